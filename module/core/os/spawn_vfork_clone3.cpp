// Starting a child with clone3 on Linux x86_64.  See core/spawn_vfork.h.
//
// The child shares the caller's memory until its exec, and its thread
// pointer too: it runs on a stack of its own, and the code it runs calls
// nothing but system calls through syscall(3), which sets only errno.  It
// may not call anything a sanitizer intercepts, nor be instrumented itself:
// either would update the calling thread's state from another process.
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/errors.h"
#include "core/spawn_vfork.h"

#if !defined(__x86_64__) || !defined(__linux__)
#error "The clone3 start is written for Linux on x86_64"
#endif

namespace fastrevert {

namespace {

// The kernel's interface, spelled out here: C libraries before glibc 2.34
// and musl declare none of it.  The numbers are the same on every Linux
// architecture.
constexpr long kSysClone3 = 435;
constexpr long kSysCloseRange = 436;
constexpr std::uint64_t kCloneVm = 0x100;
constexpr std::uint64_t kClonePidfd = 0x1000;
constexpr std::uint64_t kCloneVfork = 0x4000;
constexpr std::uint64_t kCloneClearSighand = 0x100000000ULL;

// struct clone_args as of Linux 5.3 (CLONE_ARGS_SIZE_VER0).
struct CloneArgs {
  std::uint64_t flags;
  std::uint64_t pidfd;
  std::uint64_t child_tid;
  std::uint64_t parent_tid;
  std::uint64_t exit_signal;
  std::uint64_t stack;
  std::uint64_t stack_size;
  std::uint64_t tls;
};
static_assert(sizeof(CloneArgs) == 64, "CLONE_ARGS_SIZE_VER0");

// The kernel's struct sigaction for rt_sigaction, with a signal mask of 64
// bits.  All zero is SIG_DFL with no flags.
struct KernelSigaction {
  void* handler;
  unsigned long flags;
  void* restorer;
  std::uint64_t mask;
};
constexpr unsigned long kKernelSigsetSize = sizeof(std::uint64_t);

// Constants the child reads: it builds nothing on its stack that a compiler
// might fill with a call to memset.
const KernelSigaction kDefaultAction = {};
const std::uint64_t kNoSignals = 0;

// What the caller and the child share: the plan, and what went wrong.  The
// child writes the failure before it exits; the caller reads it once the
// kernel has let it run again, which orders the two.
struct Shared {
  const ExecPlan* plan;
  volatile int step;
  volatile int error;
};

// The stack the child runs on until its exec.  The child needs a few
// hundred bytes: its frame and syscall(3)'s.
constexpr std::size_t kChildStackSize = 16384;

}  // namespace

}  // namespace fastrevert

// Makes the child with clone3(ARGS, SIZE) and has it call CHILD(ARGUMENT) on
// the stack ARGS names, then exit_group with what CHILD returns.  Returns
// the child's pid, or minus the errno, in the caller.  In assembly because
// the child starts on its new stack with no frame to return to.
extern "C" long fastrevert_clone3_start(fastrevert::CloneArgs* args, std::size_t size,
                                        int (*child)(void*), void* argument);
asm(R"(
  .text
  .p2align 4
  .globl fastrevert_clone3_start
  .hidden fastrevert_clone3_start
  .type fastrevert_clone3_start, @function
fastrevert_clone3_start:
  .cfi_startproc
  movq %rdx, %r8
  movq %rcx, %r9
  movl $435, %eax
  syscall
  testq %rax, %rax
  jz 1f
  ret
1:
  .cfi_undefined rip
  xorl %ebp, %ebp
  movq %r9, %rdi
  callq *%r8
  movl %eax, %edi
  movl $231, %eax
  syscall
  hlt
  .cfi_endproc
  .size fastrevert_clone3_start, .-fastrevert_clone3_start
)");

namespace fastrevert {

namespace {

#if defined(__clang__)
#define FASTREVERT_UNINSTRUMENTED __attribute__((no_sanitize("address", "thread", "undefined")))
#else
#define FASTREVERT_UNINSTRUMENTED \
  __attribute__((no_sanitize_address, no_sanitize_thread, no_sanitize_undefined))
#endif

[[noreturn]] FASTREVERT_UNINSTRUMENTED void child_fails(Shared* shared, ExecStep step) {
  shared->error = errno;
  shared->step = static_cast<int>(step);
  syscall(SYS_exit_group, 127);
  __builtin_unreachable();
}

// The child, from clone3 to execve.  Every signal is blocked (the caller
// blocked them all), and the kernel has reset every handled one.
FASTREVERT_UNINSTRUMENTED int run_child(void* argument) {
  Shared* shared = static_cast<Shared*>(argument);
  const ExecPlan* plan = shared->plan;
  if (plan->new_session && syscall(SYS_setsid) < 0) child_fails(shared, ExecStep::session);
  for (int number : kSignalsResetForChild) {
    syscall(SYS_rt_sigaction, number, &kDefaultAction, nullptr, kKernelSigsetSize);
  }
  // dup2 clears close-on-exec on the copy, so 0, 1 and 2 survive the exec.
  if (syscall(SYS_dup2, plan->stdin_fd, 0) < 0 || syscall(SYS_dup2, plan->stdout_fd, 1) < 0 ||
      syscall(SYS_dup2, plan->stderr_fd >= 0 ? plan->stderr_fd : 1, 2) < 0) {
    child_fails(shared, ExecStep::redirect);
  }
  // Every descriptor of the module's is close-on-exec; this closes one that
  // other code opened without.  Before Linux 5.9 there is no close_range,
  // and such a descriptor stays open.
  syscall(kSysCloseRange, 3, ~0U, 0);
  if (plan->cwd && syscall(SYS_chdir, plan->cwd) < 0) child_fails(shared, ExecStep::chdir);
  // As Emacs does, a limit it cannot set is left as it is.
  if (plan->file_limit) syscall(SYS_prlimit64, 0, RLIMIT_NOFILE, plan->file_limit, nullptr);
  if (plan->signal_before_exec) syscall(SYS_kill, syscall(SYS_getpid), plan->signal_before_exec);
  syscall(SYS_rt_sigprocmask, SIG_SETMASK, &kNoSignals, nullptr, kKernelSigsetSize);
  syscall(SYS_execve, plan->program, plan->argv, plan->envp);
  child_fails(shared, ExecStep::exec);
}

// Set once the kernel has refused this way of starting a child.
std::atomic<bool> refused{false};

}  // namespace

bool vfork_exec_built() noexcept {
  return true;
}

std::optional<VforkChild> vfork_exec(const ExecPlan& plan) {
  if (refused.load(std::memory_order_relaxed)) return std::nullopt;
  Shared shared{&plan, 0, 0};
  alignas(64) unsigned char stack[kChildStackSize];
  int pidfd = -1;
  CloneArgs args = {};
  args.flags = kCloneVm | kCloneVfork | kClonePidfd | kCloneClearSighand;
  args.pidfd = reinterpret_cast<std::uintptr_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  args.stack = reinterpret_cast<std::uintptr_t>(stack);
  args.stack_size = sizeof stack;

  // No signal reaches this thread, and so none the child, until the child
  // unblocks them right before its exec: by then it leads its own session,
  // and no handler is left in it.
  sigset_t all_signals;
  sigset_t previous;
  sigfillset(&all_signals);
  pthread_sigmask(SIG_SETMASK, &all_signals, &previous);
  long started = fastrevert_clone3_start(&args, sizeof args, run_child, &shared);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);

  if (started < 0) {
    int error = static_cast<int>(-started);
    // ENOSYS: before Linux 5.3; EINVAL: CLONE_CLEAR_SIGHAND, before 5.5;
    // EPERM: a seccomp filter.  Nothing was started.
    if (error == ENOSYS || error == EINVAL || error == EPERM) {
      refused.store(true, std::memory_order_relaxed);
      return std::nullopt;
    }
    throw SystemError(error, "clone3");
  }
  VforkChild child;
  child.pid = static_cast<pid_t>(started);
  child.pidfd = pidfd;
  ExecStep step = static_cast<ExecStep>(shared.step);
  if (step == ExecStep::none) return child;

  // The child has exited: reap it, on its pid alone.
  int status;
  while (waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (pidfd >= 0) close(pidfd);
  int error = shared.error;
  switch (step) {
    case ExecStep::chdir:
      throw SystemError(error, "chdir", plan.cwd ? plan.cwd : "");
    case ExecStep::session:
      throw SystemError(error, "setsid");
    case ExecStep::none:
    case ExecStep::redirect:
    case ExecStep::exec:
      break;
  }
  throw SystemError(error, "posix_spawn", plan.program);
}

}  // namespace fastrevert
