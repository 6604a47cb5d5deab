// Starting a child by fork and exec, for what neither clone3
// (core/spawn_vfork.h) nor posix_spawn can do on this system: a working
// directory without posix_spawn_file_actions_addchdir_np (glibc before 2.29,
// and a portable build), a new session without POSIX_SPAWN_SETSID
// (FreeBSD), or a limit on open files, which posix_spawn cannot set.
// spawn() in core/child.cpp decides.
//
// fork copies the caller's page tables, which a vfork-like start does not,
// so this costs more in a large Emacs; it is correct all the same.  Between
// fork and exec the child calls only async-signal-safe functions, and every
// argument is prepared before the fork, so that nothing there allocates or
// takes a lock another thread held.
#pragma once

#include <sys/types.h>

#include "core/exec_plan.h"

namespace fastrevert {

// Starts the child PLAN describes (core/exec_plan.h): its session, signals,
// 0, 1 and 2, working directory and limit on open files, then exec.  Returns
// its pid.  Throws SystemError for what failed: "fork"; "chdir" with the
// directory's name; "posix_spawn" with the program's name for the exec or a
// redirection, as spawn() reports them.
pid_t fork_exec(const ExecPlan& plan);

}  // namespace fastrevert
