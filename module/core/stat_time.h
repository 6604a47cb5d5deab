// A file's times in nanoseconds, from a struct stat: POSIX names them
// st_mtim and st_ctim, Darwin st_mtimespec and st_ctimespec.
#pragma once

#include <sys/stat.h>

#include <cstdint>

#include "core/platform.h"

namespace fastrevert {

inline std::int64_t timespec_ns(const timespec& time) noexcept {
  return static_cast<std::int64_t>(time.tv_sec) * 1000000000 + time.tv_nsec;
}

inline std::int64_t mtime_ns(const struct stat& status) noexcept {
#if FASTREVERT_HAVE_STAT_MTIM
  return timespec_ns(status.st_mtim);
#elif FASTREVERT_HAVE_STAT_MTIMESPEC
  return timespec_ns(status.st_mtimespec);
#else
  return static_cast<std::int64_t>(status.st_mtime) * 1000000000;
#endif
}

inline std::int64_t ctime_ns(const struct stat& status) noexcept {
#if FASTREVERT_HAVE_STAT_MTIM
  return timespec_ns(status.st_ctim);
#elif FASTREVERT_HAVE_STAT_MTIMESPEC
  return timespec_ns(status.st_ctimespec);
#else
  return static_cast<std::int64_t>(status.st_ctime) * 1000000000;
#endif
}

}  // namespace fastrevert
