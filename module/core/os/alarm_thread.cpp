// An alarm anywhere: a thread that sleeps until the time, then signals a
// pipe.  See core/alarm.h.  The thread blocks every signal, as every thread
// the engine starts does.
#include <chrono>
#include <mutex>

#include "core/alarm.h"
#include "core/threads.h"

namespace fastrevert {

ThreadAlarm::ThreadAlarm() {
  thread_ = start_thread_blocking_signals([this] { thread_main(); });
}

ThreadAlarm::~ThreadAlarm() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_one();
  thread_.join();
}

void ThreadAlarm::arm(std::chrono::microseconds delay) noexcept {
  if (delay.count() <= 0) delay = std::chrono::microseconds(1);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    signal_.reset();
    due_ = std::chrono::steady_clock::now() + delay;
  }
  changed_.notify_one();
}

void ThreadAlarm::disarm() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  due_.reset();
  signal_.reset();
}

void ThreadAlarm::acknowledge() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  signal_.reset();
}

void ThreadAlarm::thread_main() noexcept {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (!due_) {
      changed_.wait(lock);
    } else if (std::chrono::steady_clock::now() < *due_) {
      changed_.wait_until(lock, *due_);
    } else {
      due_.reset();
      signal_.signal();
    }
  }
}

}  // namespace fastrevert
