// Output spilled to a file where there are no memfds (macOS, the BSDs
// before FreeBSD 13), and in a portable build: a new file in $TMPDIR, or
// /tmp, made close-on-exec as it is created and removed at once.  Emacs
// opens it by a name of its descriptor (`fastrevert--memfd-file-name').
// See core/spill.h.
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/spill.h"

namespace fastrevert {

namespace {

// The directory of the files, without a trailing slash: $TMPDIR as it was
// at the first spill (the environment is not read again from another
// thread), else /tmp.
struct SpillDirectory {
  char path[PATH_MAX];

  SpillDirectory() noexcept {
    const char* chosen = std::getenv("TMPDIR");
    if (chosen == nullptr || *chosen == '\0' || std::strlen(chosen) >= sizeof path) {
      chosen = "/tmp";
    }
    std::strcpy(path, chosen);
    for (std::size_t length = std::strlen(path); length > 1 && path[length - 1] == '/';) {
      path[--length] = '\0';
    }
  }
};

const char* spill_directory() noexcept {
  static const SpillDirectory directory;
  return directory.path;
}

// A well-mixed 64-bit value from a few that differ between calls and
// processes (splitmix64's finalizer).  A name need not be secret, since the
// file is created exclusively and removed at once; it only has to be
// unlikely to be taken.
std::uint64_t mixed(std::uint64_t value) noexcept {
  value += 0x9e3779b97f4a7c15ULL;
  value = (value ^ (value >> 30)) * 0xbf58476d1ce4e5b9ULL;
  value = (value ^ (value >> 27)) * 0x94d049bb133111ebULL;
  return value ^ (value >> 31);
}

// Files made so far by this process, to make each name differ.
std::atomic<std::uint64_t> files_made{0};

}  // namespace

int open_file_spill(const char* name) noexcept {
  const char* directory = spill_directory();
  // O_EXCL makes the name ours alone (it also refuses a symbolic link put
  // there), so a name already taken only costs another try.
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto now =
        static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    std::uint64_t unique =
        mixed(now ^ (static_cast<std::uint64_t>(getpid()) << 32) ^
              mixed(files_made.fetch_add(1, std::memory_order_relaxed)) ^
              static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(&files_made)));
    char path[PATH_MAX];
    int length = std::snprintf(path, sizeof path, "%s/%s-%016llx", directory, name,
                               static_cast<unsigned long long>(unique));
    if (length < 0 || static_cast<std::size_t>(length) >= sizeof path) {
      errno = ENAMETOOLONG;
      return -1;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, S_IRUSR | S_IWUSR);
    if (fd < 0) {
      if (errno == EEXIST) continue;
      return -1;
    }
    // Nameless from here on: the file goes with its last descriptor.  Were
    // the removal refused, the file would still serve; it would only stay
    // behind afterwards.
    unlink(path);
    return fd;
  }
  errno = EEXIST;
  return -1;
}

}  // namespace fastrevert
