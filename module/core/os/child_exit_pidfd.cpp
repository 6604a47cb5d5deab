// A child's exit on Linux: a pidfd, readable once the process has exited.
// See core/child_exit.h.
#include "core/platform.h"

#if FASTREVERT_HAVE_PIDFD_OPEN
// glibc 2.36's header declares pidfd_open without C linkage for C++.
extern "C" {
#include <sys/pidfd.h>
}
#else
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "core/child_exit.h"

namespace fastrevert {

const ChildExitMechanism kChildExitMechanism = ChildExitMechanism::pidfd;

int open_exit_descriptor(pid_t pid) noexcept {
  // A pidfd is always close-on-exec.  ENOSYS (a kernel before 5.3) or EPERM
  // (a seccomp filter) leaves the caller to poll with waitpid instead.  C
  // libraries before glibc 2.36 have no wrapper for the system call.
#if FASTREVERT_HAVE_PIDFD_OPEN
  return pidfd_open(pid, 0);
#else
  long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : static_cast<int>(fd);
#endif
}

}  // namespace fastrevert
