// Starting a child as stock Emacs does, with a vfork, but without its
// hazards: Linux's clone3 with CLONE_VM | CLONE_VFORK, on a stack of the
// child's own, the way the C library's posix_spawn starts one, and
// CLONE_CLEAR_SIGHAND, with which the kernel itself resets every handled
// signal in the child.
//
// Why not posix_spawn: glibc's cannot know which signals the caller
// handles, so its child asks about all 64 (or resets them all), and it
// maps and unmaps a stack for each child and asks for the limit on open
// files once per file action.  On a virtual machine, where each system call
// costs about half a microsecond, that was some 80 calls more than Emacs's
// own vfork child makes, while the caller waits.  This child makes what
// Emacs's makes (setsid, four signal resets, three dup2, close_range,
// chdir, the mask, execve), and the kernel hands back a pidfd for its exit
// with the child, which saves another call.
//
// Linux 5.5 or later on x86_64.  Elsewhere, or where the kernel refuses
// (an older kernel, a seccomp filter that denies clone3), spawn() in
// core/child.cpp takes posix_spawn or fork instead.
#pragma once

#include <sys/types.h>

#include <optional>

#include "core/exec_plan.h"

namespace fastrevert {

struct VforkChild {
  pid_t pid = -1;
  // Close-on-exec; readable once the child has exited (core/child_exit.h).
  int pidfd = -1;
};

// Starts the child PLAN describes (core/exec_plan.h) and returns once it has
// called execve.  Throws SystemError as fork_exec() does, with function
// "clone3" when the kernel could not make the child (EAGAIN, ENOMEM).
// Returns std::nullopt when this kernel cannot start a child this way;
// every later call then returns it at once.
std::optional<VforkChild> vfork_exec(const ExecPlan& plan);

// Whether this build has the clone3 start at all.
bool vfork_exec_built() noexcept;

}  // namespace fastrevert
