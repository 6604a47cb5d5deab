#include "core/poll_wait.h"

#include <time.h>

#include "core/platform.h"

namespace fastrevert {

int poll_for(pollfd* fds, std::size_t count, std::chrono::nanoseconds timeout) noexcept {
  if (timeout.count() < 0) timeout = std::chrono::nanoseconds(0);
#if FASTREVERT_HAVE_PPOLL
  timespec span{static_cast<time_t>(timeout.count() / 1000000000),
                static_cast<long>(timeout.count() % 1000000000)};
  return ppoll(fds, static_cast<nfds_t>(count), &span, nullptr);
#else
  auto millis = std::chrono::ceil<std::chrono::milliseconds>(timeout).count();
  int capped = millis > 1000000000 ? 1000000000 : static_cast<int>(millis);
  return poll(fds, static_cast<nfds_t>(count), capped);
#endif
}

}  // namespace fastrevert
