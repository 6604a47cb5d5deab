// Waiting on descriptors for a span shorter than a millisecond.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>

namespace fastrevert {

// Waits up to TIMEOUT (not negative) for one of the COUNT descriptors of FDS
// to be ready, as poll() does, and returns what poll() returns.  ppoll
// keeps the timeout to the nanosecond, which the main thread's short waits
// for a child need; plain poll (macOS, and a portable build) rounds it up to
// the next millisecond, so such a wait lasts a little longer but never ends
// early.
int poll_for(pollfd* fds, std::size_t count, std::chrono::nanoseconds timeout) noexcept;

}  // namespace fastrevert
