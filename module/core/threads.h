// Threads that never run a signal handler meant for Emacs.
#pragma once

#include <signal.h>

#include <thread>
#include <utility>

namespace fastrevert {

// Starts a thread running FN with every signal blocked.  A new thread
// inherits the signal mask of its creator, so the mask is blocked around the
// creation and restored afterwards: signals meant for Emacs stay with Emacs's
// own threads, and no handler is ever needed here.  Throws what std::thread
// throws, with the caller's mask restored.
template <typename Fn>
std::thread start_thread_blocking_signals(Fn&& fn) {
  sigset_t all_signals;
  sigset_t previous;
  sigfillset(&all_signals);
  pthread_sigmask(SIG_SETMASK, &all_signals, &previous);
  try {
    std::thread thread(std::forward<Fn>(fn));
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    return thread;
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &previous, nullptr);
    throw;
  }
}

}  // namespace fastrevert
