// An alarm on Linux: a timerfd.  See core/alarm.h.
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>

#include "core/alarm.h"
#include "core/errors.h"

namespace fastrevert {

TimerfdAlarm::TimerfdAlarm() {
  fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (fd_ < 0) throw_errno("timerfd_create");
}

TimerfdAlarm::~TimerfdAlarm() {
  close(fd_);
}

void TimerfdAlarm::arm(std::chrono::microseconds delay) noexcept {
  itimerspec due{};
  auto micros = delay.count() > 0 ? delay.count() : 1;
  due.it_value.tv_sec = static_cast<time_t>(micros / 1000000);
  due.it_value.tv_nsec = static_cast<long>(micros % 1000000) * 1000;
  // Arming a valid timerfd with a valid time cannot fail.
  timerfd_settime(fd_, 0, &due, nullptr);
}

void TimerfdAlarm::disarm() noexcept {
  // Setting a timerfd also clears the expirations not yet read.
  itimerspec never{};
  timerfd_settime(fd_, 0, &never, nullptr);
}

void TimerfdAlarm::acknowledge() noexcept {
  std::uint64_t expirations;
  ssize_t ignored = read(fd_, &expirations, sizeof expirations);
  (void)ignored;
}

}  // namespace fastrevert
