// How a child's exit is seen without a signal handler.
//
// SIGCHLD belongs to Emacs, so a child is watched through a descriptor that
// becomes readable once it has exited, and then reaped by waitpid on its pid
// alone.  Linux gives a pidfd (os/child_exit_pidfd.cpp); macOS and the BSDs
// a kqueue of the child's own watching it with EVFILT_PROC
// (os/child_exit_kqueue.cpp).  Where neither exists, and in a portable build,
// there is no such descriptor (os/child_exit_waitpid.cpp): everything that
// waits for a child then looks with waitpid(WNOHANG) at short intervals
// instead, as it also does on a kernel that refuses a pidfd.
#pragma once

#include <sys/types.h>

namespace fastrevert {

enum class ChildExitMechanism { pidfd, kqueue, waitpid };

// The mechanism this build was made with.
extern const ChildExitMechanism kChildExitMechanism;

// A close-on-exec descriptor that becomes readable once the child PID (not
// yet reaped) has exited, and stays readable; -1 when there is none to be
// had, and the caller polls with waitpid.  Reading it is never needed, and
// the caller closes it.  Any thread.
int open_exit_descriptor(pid_t pid) noexcept;

}  // namespace fastrevert
