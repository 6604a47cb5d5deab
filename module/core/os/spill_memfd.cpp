// Output spilled to a memfd: an anonymous file in memory (Linux 3.17,
// FreeBSD 13).  See core/spill.h.
#include <sys/mman.h>

#include "core/spill.h"

namespace fastrevert {

int open_memfd_spill(const char* name) noexcept {
  return memfd_create(name, MFD_CLOEXEC);
}

}  // namespace fastrevert
