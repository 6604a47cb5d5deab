// What a child does between its start and its exec, prepared in full by the
// caller, for the ways of starting it that run the caller's own code in the
// child: clone3 (core/spawn_vfork.h) and fork (core/spawn_fork.h).  Nothing
// is left to allocate or look up in the child.
//
// The child a plan makes is the child stock Emacs starts:
// - a new session when asked (setsid), so that the child leads a process
//   group of its own;
// - the signal mask empty; SIGINT, SIGQUIT, SIGPROF and SIGPIPE at their
//   default disposition (Emacs handles or ignores them); every other signal
//   the caller handles at its default too, since a handler of the caller's
//   must never run in the child, while one the caller ignores stays ignored,
//   as exec itself would leave it;
// - 0, 1 and 2 from the descriptors given, and no other descriptor open, not
//   even one opened without close-on-exec;
// - the working directory given, and the limit on open files given.
#pragma once

#include <signal.h>

#include <cstdint>

namespace fastrevert {

// The signals a child starts with at their default disposition even when
// the caller ignores them: those that Emacs handles or ignores for itself
// and resets for its children.
inline constexpr int kSignalsResetForChild[] = {SIGINT, SIGQUIT, SIGPROF, SIGPIPE};

// A limit on open files as the kernel takes it (struct rlimit64).
struct FileLimit {
  std::uint64_t soft = 0;
  std::uint64_t hard = 0;
};

struct ExecPlan {
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
  // The child's limit on open files, or null to keep the caller's.
  const FileLimit* file_limit = nullptr;
  // For tests (SpawnSpec::signal_before_exec): a signal the child sends
  // itself before it unblocks signals, or 0.
  int signal_before_exec = 0;
};

// What a child that failed before its exec reports.  A successful exec
// reports nothing.
enum class ExecStep : int {
  none = 0,
  redirect,  // A dup2 onto 0, 1 or 2.
  session,   // setsid.
  chdir,
  exec,
};

}  // namespace fastrevert
