// A wake signal on Linux: one eventfd, whose counter a write raises and a
// read clears.  See core/wake_signal.h.
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "core/errors.h"
#include "core/wake_signal.h"

namespace fastrevert {

EventfdWakeSignal::EventfdWakeSignal() {
  fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd_ < 0) throw_errno("eventfd");
}

void EventfdWakeSignal::signal() noexcept {
  if (fd_ < 0) return;
  std::uint64_t one = 1;
  ssize_t written;
  do {
    written = write(fd_, &one, sizeof one);
  } while (written < 0 && errno == EINTR);
  // An eventfd only refuses a write when its counter would overflow, which
  // leaves it readable all the same.
}

void EventfdWakeSignal::reset() noexcept {
  if (fd_ < 0) return;
  std::uint64_t count;
  ssize_t ignored = read(fd_, &count, sizeof count);
  (void)ignored;
}

void EventfdWakeSignal::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace fastrevert
