// A descriptor that one thread makes readable and another polls and resets:
// how commands reach the engine loop, finished jobs reach it from the
// worker pool, and records reach a main thread that polls descriptors of its
// own.
//
// Linux has an eventfd for this, one descriptor whose counter a write raises
// and a read clears (os/wake_eventfd.cpp).  Elsewhere, and in a portable
// build, a pipe does it with two (os/wake_pipe.cpp): a write puts a byte in,
// and a reset reads every byte out.  Both are close-on-exec and
// non-blocking, so a signal never blocks, however many are unread.
#pragma once

#include "core/platform.h"

namespace fastrevert {

class EventfdWakeSignal {
 public:
  // Throws SystemError ("eventfd") when the descriptor cannot be made.
  EventfdWakeSignal();
  ~EventfdWakeSignal() { close(); }

  EventfdWakeSignal(const EventfdWakeSignal&) = delete;
  EventfdWakeSignal& operator=(const EventfdWakeSignal&) = delete;

  // The descriptor to poll for readability, or -1 once closed.
  int fd() const noexcept { return fd_; }
  // Any thread.  Makes fd() readable; nothing after close().
  void signal() noexcept;
  // The polling thread.  Makes fd() unreadable until the next signal().
  void reset() noexcept;
  // Closes the descriptor now rather than at destruction.  Idempotent.
  void close() noexcept;

 private:
  int fd_ = -1;
};

class PipeWakeSignal {
 public:
  // Throws SystemError ("pipe") when the pipe cannot be made.
  PipeWakeSignal();
  ~PipeWakeSignal() { close(); }

  PipeWakeSignal(const PipeWakeSignal&) = delete;
  PipeWakeSignal& operator=(const PipeWakeSignal&) = delete;

  int fd() const noexcept { return read_fd_; }
  void signal() noexcept;
  void reset() noexcept;
  void close() noexcept;

 private:
  int read_fd_ = -1;
  int write_fd_ = -1;
};

#if FASTREVERT_HAVE_EVENTFD
using WakeSignal = EventfdWakeSignal;
#else
using WakeSignal = PipeWakeSignal;
#endif

}  // namespace fastrevert
