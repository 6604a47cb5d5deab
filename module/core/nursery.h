// The nursery: children spawned for the engine's process table that have not
// been adopted by it yet.
//
// Emacs's main thread spawns an asynchronous child and puts it here instead
// of handing it to the engine at once.  A main thread that then waits for
// output takes the children out and serves them itself (glue/process.cpp):
// a short-lived child is read and reaped without any thread handing its
// output on, which is most of the cost of a small process.  Whatever stays
// here for the adoption delay, the engine adopts: it watches timer_fd(),
// which becomes readable that long after a child arrives in an empty
// nursery.  Each child is taken exactly once, by whichever thread is first.
//
// Every method may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "core/process.h"

namespace fastrevert {

class Nursery {
 public:
  // Throws SystemError when the timer cannot be made.
  explicit Nursery(std::chrono::microseconds adoption_delay);
  // Kills and reaps the children still here.
  ~Nursery();

  Nursery(const Nursery&) = delete;
  Nursery& operator=(const Nursery&) = delete;

  // Adds CHILD as ID (replacing nothing: ids are unique), arming the timer
  // if it is not armed.
  void put(std::uint64_t id, std::unique_ptr<ProcessHandover> child);

  // Takes ID's child out, or returns nullptr when it is not here.
  std::unique_ptr<ProcessHandover> take(std::uint64_t id);

  // Takes every child out, in the order of their ids.
  std::vector<std::pair<std::uint64_t, std::unique_ptr<ProcessHandover>>> take_all();

  // The number of children here.
  std::size_t size() const;

  // Readable once the adoption delay has passed since the timer was armed;
  // disarmed again when the nursery empties.
  int timer_fd() const noexcept { return timer_fd_; }

  // Resets the timer after it became readable, so that the next put() arms
  // it again.  Call it before take_all(), so that no child put in between
  // is left without a timer.
  void acknowledge() noexcept;

 private:
  // Disarms the timer if the nursery is empty; mutex_ must be held.  A thread
  // that serves every child itself then never wakes the engine.
  void disarm_if_empty_locked() noexcept;

  const std::chrono::microseconds delay_;
  int timer_fd_ = -1;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, std::unique_ptr<ProcessHandover>> children_;
  bool armed_ = false;
};

}  // namespace fastrevert
