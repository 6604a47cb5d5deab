// Starting a child by fork and exec.  See core/spawn_fork.h.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "core/cloexec_pipe.h"
#include "core/errors.h"
#include "core/spawn_fork.h"

namespace fastrevert {

namespace {

// What the child reports through the error pipe when a step fails.  The
// pipe is close-on-exec, so a successful exec closes it unwritten.
struct Failure {
  ExecStep step;
  int error;
};

// The highest signal number plus one.
#ifdef NSIG
constexpr int kSignalLimit = NSIG;
#else
constexpr int kSignalLimit = 65;
#endif

// Moves FD above 2, where the child's dup2 onto 0, 1 and 2 cannot close it
// (a caller running with a standard descriptor closed gets one of those
// numbers for a new pipe).
void above_stdio(UniqueFd& fd) {
  if (fd.get() > 2) return;
  int moved = fcntl(fd.get(), F_DUPFD_CLOEXEC, 3);
  if (moved < 0) throw_errno("fcntl");
  fd.reset(moved);
}

[[noreturn]] void fail(int report_fd, ExecStep step) noexcept {
  Failure failure{step, errno};
  ssize_t ignored = write(report_fd, &failure, sizeof failure);
  (void)ignored;
  _exit(127);
}

bool reset_for_child(int number) noexcept {
  for (int reset : kSignalsResetForChild) {
    if (number == reset) return true;
  }
  return false;
}

// The child, between fork and exec.  Async-signal-safe calls only.
[[noreturn]] void become_child(const ExecPlan& plan, int report_fd) noexcept {
  // A handler the caller installed must not run here; the caller blocked
  // every signal before forking, so none can arrive before this.
  struct sigaction default_action = {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int number = 1; number < kSignalLimit; ++number) {
    struct sigaction current;
    if (sigaction(number, nullptr, &current) < 0) continue;
    bool handled = (current.sa_flags & SA_SIGINFO) != 0 ||
                   (current.sa_handler != SIG_DFL && current.sa_handler != SIG_IGN);
    if (handled || (current.sa_handler == SIG_IGN && reset_for_child(number))) {
      sigaction(number, &default_action, nullptr);
    }
  }
  if (plan.new_session && setsid() < 0) fail(report_fd, ExecStep::session);
  // dup2 clears close-on-exec on the copy, so exactly 0, 1 and 2 survive
  // the exec, as with posix_spawn's file actions.
  if (dup2(plan.stdin_fd, 0) < 0 || dup2(plan.stdout_fd, 1) < 0 ||
      dup2(plan.stderr_fd >= 0 ? plan.stderr_fd : 1, 2) < 0) {
    fail(report_fd, ExecStep::redirect);
  }
  if (plan.cwd && ::chdir(plan.cwd) < 0) fail(report_fd, ExecStep::chdir);
  if (plan.file_limit) {
    // As Emacs does, a limit it cannot set is left as it is.
    struct rlimit limit;
    limit.rlim_cur = static_cast<rlim_t>(plan.file_limit->soft);
    limit.rlim_max = static_cast<rlim_t>(plan.file_limit->hard);
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (plan.signal_before_exec) kill(getpid(), plan.signal_before_exec);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execve(plan.program, plan.argv, plan.envp);
  fail(report_fd, ExecStep::exec);
}

}  // namespace

pid_t fork_exec(const ExecPlan& plan) {
  CloexecPipe report = make_cloexec_pipe();
  above_stdio(report.write_end);
  sigset_t all_signals;
  sigset_t previous;
  sigfillset(&all_signals);
  pthread_sigmask(SIG_SETMASK, &all_signals, &previous);
  pid_t pid = fork();
  if (pid == 0) become_child(plan, report.write_end.get());
  int fork_error = errno;
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (pid < 0) throw SystemError(fork_error, "fork");

  report.write_end.reset();
  Failure failure{};
  ssize_t got;
  do {
    got = read(report.read_end.get(), &failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  if (got != static_cast<ssize_t>(sizeof failure)) return pid;  // The exec closed the pipe.
  // The child has exited or is about to: reap it, on its pid alone.
  int status;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  switch (failure.step) {
    case ExecStep::chdir:
      throw SystemError(failure.error, "chdir", plan.cwd ? plan.cwd : "");
    case ExecStep::session:
      throw SystemError(failure.error, "setsid");
    case ExecStep::none:
    case ExecStep::redirect:
    case ExecStep::exec:
      break;
  }
  throw SystemError(failure.error, "posix_spawn", plan.program);
}

}  // namespace fastrevert
