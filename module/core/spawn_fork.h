// Starting a child by fork and exec, for what posix_spawn cannot do on this
// system: a working directory without posix_spawn_file_actions_addchdir_np
// (glibc before 2.29, and a portable build), or a new session without
// POSIX_SPAWN_SETSID (FreeBSD).  spawn() in core/child.cpp decides.
//
// fork copies the caller's page tables, which posix_spawn's vfork-like start
// does not, so this costs more in a large Emacs; it is correct all the same.
// Between fork and exec the child calls only async-signal-safe functions,
// and every argument is prepared before the fork, so that nothing there
// allocates or takes a lock another thread held.
#pragma once

#include <sys/types.h>

namespace fastrevert {

struct ForkExec {
  // What execve gets.
  const char* program = nullptr;
  char* const* argv = nullptr;
  char* const* envp = nullptr;
  // The descriptors that become the child's 0, 1 and 2; each above 2.
  // STDERR_FD -1 makes 2 a copy of 1.
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  // The child's working directory, or null to keep the caller's.
  const char* cwd = nullptr;
  bool new_session = false;
};

// Starts the child as SPEC says: every signal at its default disposition and
// unblocked, a new session if asked, 0, 1 and 2 in place, then the working
// directory, then exec.  Returns its pid.  Throws SystemError for what
// failed: "fork"; "chdir" with the directory's name; "posix_spawn" with the
// program's name for the exec or a redirection, as spawn() reports them.
pid_t fork_exec(const ForkExec& spec);

}  // namespace fastrevert
