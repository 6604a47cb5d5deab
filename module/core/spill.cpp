#include "core/spill.h"

#include <cstdlib>
#include <cstring>

namespace fastrevert {

#if FASTREVERT_HAVE_MEMFD_CREATE
namespace {

// Whether the tests asked for files where memfds exist.  The environment is
// read once, at the first spill, and never again from another thread.
bool files_asked_for() noexcept {
  static const bool asked = [] {
    const char* value = std::getenv("FASTREVERT_TEST_SPILL");
    return value != nullptr && std::strcmp(value, "file") == 0;
  }();
  return asked;
}

}  // namespace
#endif

SpillMechanism spill_mechanism() noexcept {
#if FASTREVERT_HAVE_MEMFD_CREATE
  if (!files_asked_for()) return SpillMechanism::memfd;
#endif
  return SpillMechanism::file;
}

int open_spill(const char* name) noexcept {
#if FASTREVERT_HAVE_MEMFD_CREATE
  if (spill_mechanism() == SpillMechanism::memfd) return open_memfd_spill(name);
#endif
  return open_file_spill(name);
}

const char* spill_call() noexcept {
  return spill_mechanism() == SpillMechanism::memfd ? "memfd_create" : "open";
}

}  // namespace fastrevert
