// A descriptor that becomes readable a set time after it is armed: how the
// engine loop learns that a child has waited in the nursery long enough
// (core/handoff.h), armed from whichever thread put the child there.
//
// Linux has a timerfd for this (os/alarm_timerfd.cpp).  Elsewhere, and in a
// portable build, a thread of the alarm's own sleeps until the time and then
// signals a pipe (os/alarm_thread.cpp).  Either way the descriptor stays
// readable from the time until acknowledge() or disarm().
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <thread>

#include "core/platform.h"
#include "core/wake_signal.h"

namespace fastrevert {

class TimerfdAlarm {
 public:
  // Throws SystemError ("timerfd_create").
  TimerfdAlarm();
  ~TimerfdAlarm();

  TimerfdAlarm(const TimerfdAlarm&) = delete;
  TimerfdAlarm& operator=(const TimerfdAlarm&) = delete;

  // The descriptor to poll for readability.
  int fd() const noexcept { return fd_; }
  // Any thread.  Makes fd() readable DELAY from now (at least 1 us),
  // replacing any earlier arming and clearing what it made readable.
  void arm(std::chrono::microseconds delay) noexcept;
  // Any thread.  Cancels the arming and makes fd() unreadable.
  void disarm() noexcept;
  // Any thread.  Makes fd() unreadable after it became readable, until the
  // next arm().
  void acknowledge() noexcept;

 private:
  int fd_ = -1;
};

class ThreadAlarm {
 public:
  // Throws SystemError when the pipe or the thread cannot be made.
  ThreadAlarm();
  // Stops and joins the thread.
  ~ThreadAlarm();

  ThreadAlarm(const ThreadAlarm&) = delete;
  ThreadAlarm& operator=(const ThreadAlarm&) = delete;

  int fd() const noexcept { return signal_.fd(); }
  void arm(std::chrono::microseconds delay) noexcept;
  void disarm() noexcept;
  void acknowledge() noexcept;

 private:
  void thread_main() noexcept;

  PipeWakeSignal signal_;
  // Guards due_ and stopping_, and orders a signal against a disarm: the
  // thread signals under it, so a disarm or acknowledge that returns has
  // left the pipe empty.
  std::mutex mutex_;
  std::condition_variable changed_;
  std::optional<std::chrono::steady_clock::time_point> due_;
  bool stopping_ = false;
  std::thread thread_;
};

#if FASTREVERT_HAVE_TIMERFD
using Alarm = TimerfdAlarm;
#else
using Alarm = ThreadAlarm;
#endif

}  // namespace fastrevert
