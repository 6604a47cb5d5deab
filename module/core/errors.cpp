#include "core/errors.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/platform.h"

namespace fastrevert {

namespace {

struct ErrnoName {
  int number;
  const char* name;
};

// POSIX's errnos.  Where two names share a number on Linux (EAGAIN and
// EWOULDBLOCK, EOPNOTSUPP and ENOTSUP, EDEADLK and EDEADLOCK) the table has
// the one glibc's strerrorname_np gives; ENOTSUP has an entry of its own
// where its number is its own.  The STREAMS errnos, which POSIX made
// optional, are listed where the system defines them.
#define FASTREVERT_ERRNO(name) {name, #name},
// clang-format off
constexpr ErrnoName kErrnoNames[] = {
    FASTREVERT_ERRNO(EPERM) FASTREVERT_ERRNO(ENOENT) FASTREVERT_ERRNO(ESRCH)
    FASTREVERT_ERRNO(EINTR) FASTREVERT_ERRNO(EIO) FASTREVERT_ERRNO(ENXIO)
    FASTREVERT_ERRNO(E2BIG) FASTREVERT_ERRNO(ENOEXEC) FASTREVERT_ERRNO(EBADF)
    FASTREVERT_ERRNO(ECHILD) FASTREVERT_ERRNO(EAGAIN) FASTREVERT_ERRNO(ENOMEM)
    FASTREVERT_ERRNO(EACCES) FASTREVERT_ERRNO(EFAULT) FASTREVERT_ERRNO(EBUSY)
    FASTREVERT_ERRNO(EEXIST) FASTREVERT_ERRNO(EXDEV) FASTREVERT_ERRNO(ENODEV)
    FASTREVERT_ERRNO(ENOTDIR) FASTREVERT_ERRNO(EISDIR) FASTREVERT_ERRNO(EINVAL)
    FASTREVERT_ERRNO(ENFILE) FASTREVERT_ERRNO(EMFILE) FASTREVERT_ERRNO(ENOTTY)
    FASTREVERT_ERRNO(ETXTBSY) FASTREVERT_ERRNO(EFBIG) FASTREVERT_ERRNO(ENOSPC)
    FASTREVERT_ERRNO(ESPIPE) FASTREVERT_ERRNO(EROFS) FASTREVERT_ERRNO(EMLINK)
    FASTREVERT_ERRNO(EPIPE) FASTREVERT_ERRNO(EDOM) FASTREVERT_ERRNO(ERANGE)
    FASTREVERT_ERRNO(EDEADLK) FASTREVERT_ERRNO(ENAMETOOLONG) FASTREVERT_ERRNO(ENOLCK)
    FASTREVERT_ERRNO(ENOSYS) FASTREVERT_ERRNO(ENOTEMPTY) FASTREVERT_ERRNO(ELOOP)
    FASTREVERT_ERRNO(ENOMSG) FASTREVERT_ERRNO(EIDRM) FASTREVERT_ERRNO(ENOLINK)
    FASTREVERT_ERRNO(EPROTO) FASTREVERT_ERRNO(EMULTIHOP) FASTREVERT_ERRNO(EBADMSG)
    FASTREVERT_ERRNO(EOVERFLOW) FASTREVERT_ERRNO(EILSEQ) FASTREVERT_ERRNO(ENOTSOCK)
    FASTREVERT_ERRNO(EDESTADDRREQ) FASTREVERT_ERRNO(EMSGSIZE) FASTREVERT_ERRNO(EPROTOTYPE)
    FASTREVERT_ERRNO(ENOPROTOOPT) FASTREVERT_ERRNO(EPROTONOSUPPORT)
    FASTREVERT_ERRNO(EOPNOTSUPP) FASTREVERT_ERRNO(EAFNOSUPPORT) FASTREVERT_ERRNO(EADDRINUSE)
    FASTREVERT_ERRNO(EADDRNOTAVAIL) FASTREVERT_ERRNO(ENETDOWN) FASTREVERT_ERRNO(ENETUNREACH)
    FASTREVERT_ERRNO(ENETRESET) FASTREVERT_ERRNO(ECONNABORTED) FASTREVERT_ERRNO(ECONNRESET)
    FASTREVERT_ERRNO(ENOBUFS) FASTREVERT_ERRNO(EISCONN) FASTREVERT_ERRNO(ENOTCONN)
    FASTREVERT_ERRNO(ETIMEDOUT) FASTREVERT_ERRNO(ECONNREFUSED) FASTREVERT_ERRNO(EHOSTUNREACH)
    FASTREVERT_ERRNO(EALREADY) FASTREVERT_ERRNO(EINPROGRESS) FASTREVERT_ERRNO(ESTALE)
    FASTREVERT_ERRNO(EDQUOT) FASTREVERT_ERRNO(ECANCELED) FASTREVERT_ERRNO(EOWNERDEAD)
    FASTREVERT_ERRNO(ENOTRECOVERABLE)
#if ENOTSUP != EOPNOTSUPP
    FASTREVERT_ERRNO(ENOTSUP)
#endif
#ifdef ENODATA
    FASTREVERT_ERRNO(ENODATA)
#endif
#ifdef ENOSR
    FASTREVERT_ERRNO(ENOSR)
#endif
#ifdef ENOSTR
    FASTREVERT_ERRNO(ENOSTR)
#endif
#ifdef ETIME
    FASTREVERT_ERRNO(ETIME)
#endif
};
// clang-format on
#undef FASTREVERT_ERRNO

}  // namespace

const char* errno_table_name(int error) noexcept {
  for (const ErrnoName& entry : kErrnoNames) {
    if (entry.number == error) return entry.name;
  }
  return nullptr;
}

std::string errno_name(int error) {
#if FASTREVERT_HAVE_STRERRORNAME_NP
  const char* name = strerrorname_np(error);
#else
  const char* name = errno_table_name(error);
#endif
  if (name) return name;
  return "errno " + std::to_string(error);
}

SystemError::SystemError(int error, std::string function, std::string path)
    : std::system_error(error, std::generic_category(), function),
      function_(std::move(function)),
      path_(std::move(path)) {}

void throw_errno(const char* function, std::string path) {
  throw SystemError(errno, function, std::move(path));
}

const char* file_error_condition(int error) noexcept {
  switch (error) {
    case ENOENT:
      return "file-missing";
    case EACCES:
      return "permission-denied";
    case EEXIST:
      return "file-already-exists";
    default:
      return "file-error";
  }
}

std::optional<int> file_errno_named(std::string_view name) noexcept {
  static const std::pair<std::string_view, int> kErrnos[] = {{"ENOENT", ENOENT},
                                                             {"EACCES", EACCES},
                                                             {"EISDIR", EISDIR},
                                                             {"ENOTDIR", ENOTDIR},
                                                             {"ENAMETOOLONG", ENAMETOOLONG}};
  for (const auto& [known, number] : kErrnos) {
    if (name == known) return number;
  }
  return std::nullopt;
}

}  // namespace fastrevert
