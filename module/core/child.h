// A child process: spawning it without forking Emacs, reporting a failed
// exec as Emacs would, finding its program, quitting it and reaping it.
//
// spawn() uses posix_spawn, which glibc implements with clone(CLONE_VM |
// CLONE_VFORK): the parent's address space is shared, not copied, so the cost
// does not grow with the size of a multi-gigabyte Emacs.  Where posix_spawn
// cannot set the working directory or start a session, fork and exec do
// (core/spawn_fork.h).  Nothing here installs a signal handler or touches
// SIGCHLD, which belongs to Emacs; a child is reaped only by waiting on its
// own pid (or its exit descriptor, core/child_exit.h).
//
// Every function may be called from any thread, and none keeps global state.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fastrevert {

// What to run and how to connect it.  Files named here are opened by the
// caller's process before the child starts, so a relative name resolves
// against the caller's working directory, not CWD, and an error names the file
// that failed.
struct SpawnSpec {
  // Absolute path of the executable, already resolved (see first_executable).
  std::string program;
  // The whole argument vector, argv[0] included.  When empty, the child gets
  // { program }.
  std::vector<std::string> argv;
  // The child's whole environment as "NAME=VALUE" strings (Emacs passes
  // `process-environment').  Null inherits the caller's environ.  Shared, so
  // that a caller starting many children builds it once.
  std::shared_ptr<const std::vector<std::string>> env;
  // The child's working directory; empty keeps the caller's.
  std::string cwd;

  // Where the child's standard input comes from.
  enum class Stdin {
    pipe,  // Child::stdin_fd is the write end, owned by the caller.
    null,  // /dev/null.
    file,  // stdin_file, opened read-only.
  };
  Stdin stdin_mode = Stdin::null;
  std::string stdin_file;

  // Where the child's standard output goes.
  enum class Stdout {
    pipe,  // Child::stdout_fd is the read end.
    null,  // /dev/null.
    file,  // stdout_file, created or truncated.
  };
  Stdout stdout_mode = Stdout::pipe;
  std::string stdout_file;

  // Where the child's standard error goes.
  enum class Stderr {
    pipe,   // A pipe of its own: Child::stderr_fd is the read end.
    merge,  // Wherever standard output goes (2>&1).
    null,   // /dev/null.
    file,   // stderr_file, created or truncated.
  };
  Stderr stderr_mode = Stderr::pipe;
  std::string stderr_file;

  // Runs the child in a new session (setsid), so it is also the leader of a
  // new process group that can be signalled as a whole with kill(-pid, sig),
  // and a terminal's job-control signals meant for Emacs do not reach it.
  bool new_session = false;

  // For tests: start the child by fork and exec even where posix_spawn
  // could, so that the path other systems take runs on this one too.
  bool force_fork = false;
};

// A started child.  It owns its descriptors: each one still >= 0 is closed
// when the Child is destroyed, so a caller that keeps a descriptor sets the
// member to -1.  Destroying a Child neither kills nor reaps the process; use
// kill_and_reap() or wait for it.  All descriptors are close-on-exec, and the
// pipe ends are non-blocking.
struct Child {
  pid_t pid = -1;
  // A descriptor that becomes readable once the child has exited: a pidfd
  // on Linux, a kqueue on macOS and the BSDs (see core/child_exit.h); -1
  // where there is none (before Linux 5.3, a portable build), and the
  // child's exit is then found by waitpid alone.
  int pidfd = -1;
  int stdin_fd = -1;   // Write end of the child's stdin pipe, or -1.
  int stdout_fd = -1;  // Read end of the child's stdout pipe, or -1.
  int stderr_fd = -1;  // Read end of the child's stderr pipe, or -1.

  Child() = default;
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  // Closes every descriptor still held and sets it to -1.
  void close_fds() noexcept;
};

// The environment block for a child from ENTRIES in `process-environment'
// order: the first definition of a name wins, and a lone NAME (no "=")
// removes the variable, as Emacs's own environment block does.
std::vector<std::string> child_environment(const std::vector<std::string_view>& entries);

// The environments of a run of children, made once.  Emacs gives a child's
// environment as BLOCKS, strings of one or more "NAME=VALUE" entries separated
// by NUL bytes, in `process-environment' order.  A run of children in the
// same environment gives the same blocks: the environment made from them is
// kept, which saves making it again (some 10 to 20 us a child, 1 to 2% of a
// spawn), so that a run costs one comparison a child.  Not thread-safe.
class EnvironmentCache {
 public:
  // The child_environment() of the entries in BLOCKS.
  std::shared_ptr<const std::vector<std::string>> get(std::vector<std::string> blocks);

 private:
  std::vector<std::string> blocks_;
  std::shared_ptr<const std::vector<std::string>> environment_;
};

// Starts a child as SPEC says.  The child starts with an empty signal mask and
// every signal at its default disposition, whatever the caller had blocked or
// handled, and with no descriptor but 0, 1 and 2 open (except, where the C
// library cannot close them for the child, one that some other code opened
// without close-on-exec: see spawn_with_posix_spawn).  Throws SystemError:
// for a program that does not exist or cannot be executed, errno ENOENT,
// EACCES, ENOEXEC... with function "posix_spawn" and path PROGRAM; for an
// unusable CWD, function "chdir" and path CWD; for a redirection file,
// function "open" and that file.
Child spawn(const SpawnSpec& spec);

// The index of the first of CANDIDATES that the effective user may execute
// and that is not a directory, as Emacs's program search decides with an X_OK
// predicate; std::nullopt when none is.  CANDIDATES holds file names in
// search order, each ended by a NUL byte (the last one may end with the
// string), so that a caller keeps one string per search; an empty name is
// never executable.
std::optional<std::size_t> first_executable(const std::string& candidates);

// Whether DIRECTORY can be entered: DIRECTORY/. exists for the effective
// user, which is what `file-accessible-directory-p' decides for a local name
// (the working directory a child would get).
bool accessible_directory(std::string directory);

// Like spawn(), but when the exec itself fails (a file that is not a valid
// executable, a script whose interpreter is missing), asks ARGV0 for the
// name the parent was invoked as.  Given one, it starts a /bin/sh stand-in
// instead that prints "ARGV0: PROGRAM: STRERROR" on the child's standard
// error, through every redirection, and exits with 126 (127 for ENOENT):
// what the child of a parent that forks shows (Emacs 28, which uses
// vfork).  Given none (a parent that reports a failed exec itself, as Emacs
// 30 does), it throws the failure as spawn() does.  ARGV0 is called only
// after such a failure.
Child spawn_or_stand_in(const SpawnSpec& spec,
                        const std::function<std::optional<std::string>()>& argv0);

// The number of the signal NAME ("SIGINT", "int", "KILL": any case, with or
// without the SIG prefix), as `signal-process' accepts it, or std::nullopt.
std::optional<int> signal_number(std::string_view name);

// How a reaped child ended, decoded once from its wait status.
struct ExitStatus {
  enum class How {
    exited,    // CODE is the exit code.
    signaled,  // CODE is the number of the signal that killed it.
    lost,      // Someone else reaped it (SIGCHLD ignored): the status is gone.
  };
  How how = How::lost;
  int code = -1;
  bool core_dumped = false;
};

// Decodes the wait status WAIT_STATUS, or -1 for a child reaped elsewhere.
ExitStatus exit_status(int wait_status) noexcept;

// How STATUS ended, in one word: "exited", "signaled", "core-dumped" (killed
// by a signal, with a core dump) or "lost".  The data of a process_exit
// record (see core/process_table.h); Lisp mirrors these words
// (lisp/fastrevert-engine.el), so they never change.
const char* exit_how_name(const ExitStatus& status) noexcept;

// What a quit does to a running child: QUIT_SIGNAL (SIGINT, as C-g gives a
// stock `call-process' child) first, then SIGKILL when the user quits again
// or GRACE passes without the child exiting.  Nothing is sent to a child
// already reaped (its pid -1).
class QuitEscalation {
 public:
  explicit QuitEscalation(const Child& child, bool process_group, int quit_signal = SIGINT,
                          std::chrono::milliseconds grace = std::chrono::seconds(1)) noexcept;

  // Call after every wake-up with whether the user asks to quit now.
  void update(bool quit_requested) noexcept;
  // Whether the user has quit.
  bool quit() const noexcept { return quit_; }

 private:
  void send(int signal_number) noexcept;

  const Child& child_;
  bool process_group_;
  int quit_signal_;
  std::chrono::milliseconds grace_;
  bool quit_ = false;
  bool killed_ = false;
  std::chrono::steady_clock::time_point quit_time_{};
};

// Waits for CHILD to exit and reaps it (its pid only), asking SHOULD_QUIT at
// least every POLL_MS; a quit escalates as QuitEscalation says.  Returns the
// raw wait status, or -1 when someone else reaped it, and sets QUIT when the
// user quit.
int reap_with_quit(Child& child, const std::function<bool()>& should_quit, bool process_group,
                   bool& quit, int poll_ms = 50);

// SIGKILLs PID (its process group with PROCESS_GROUP) and waits for it,
// retrying EINTR; returns the raw wait status, or -1 when someone else
// reaped it.  For error paths and shutdown: a SIGKILLed child dies at once.
int kill_and_reap(pid_t pid, bool process_group) noexcept;

// SIGKILLs CHILD (if it has not been reaped) and waits for it, returning the
// raw wait status, or -1 when someone else reaped it.  Closes its descriptors.
// For the error paths of a caller that cannot hand the child on.
int kill_and_reap(Child& child) noexcept;

}  // namespace fastrevert
