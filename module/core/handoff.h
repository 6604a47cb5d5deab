// Children served on the thread that waits for the engine's results, and
// their adoption by the engine.
//
// Emacs's main thread spawns an asynchronous child and puts it in the
// nursery instead of handing it to the engine at once.  A main thread that
// then waits for results (Handoff::serve) takes the nursery's children into
// a process table of its own and serves them itself while it waits: a
// short-lived child is read and reaped without any thread handing its
// output on, which is most of the cost of a small process, and its output
// and exit reach Lisp in the same return.  Children still running when the
// wait ends go back to the nursery, except those whose output streams, which
// go to the engine at once to be read while Lisp inserts.  Whatever stays in
// the nursery for the adoption delay, the engine adopts (NurseryAdoption);
// and before any command for a child is posted, the caller hands the child to
// the engine (Handoff::hand_to_engine).  Each child is taken exactly once, by
// whichever thread is first; from then on only the engine thread touches it.
#pragma once

#include <poll.h>
#include <uv.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

#include "core/alarm.h"
#include "core/engine.h"
#include "core/process_table.h"

namespace fastrevert {

// Children spawned for the engine's process table that no table has adopted
// yet.  Every method may be called from any thread.
class Nursery {
 public:
  // Throws SystemError when the timer cannot be made (see core/alarm.h).
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

  // Like take_all(), for the engine once the timer is readable: resets the
  // timer in the same step, so that the next put() arms it again.  A child
  // put between a take and a separate reset would be left with its timer
  // reset and unarmed, unread until something else came along.  If the
  // children cannot be taken (no memory), the timer stays readable.
  std::vector<std::pair<std::uint64_t, std::unique_ptr<ProcessHandover>>> take_due();

  // The number of children here.
  std::size_t size() const;

  // Readable once the adoption delay has passed since the timer was armed;
  // disarmed again when the nursery empties, reset by take_due().
  int timer_fd() const noexcept { return timer_.fd(); }

 private:
  // Disarms the timer if the nursery is empty; mutex_ must be held.  A thread
  // that serves every child itself then never wakes the engine.
  void disarm_if_empty_locked() noexcept;

  const std::chrono::microseconds delay_;
  Alarm timer_;
  mutable std::mutex mutex_;
  std::map<std::uint64_t, std::unique_ptr<ProcessHandover>> children_;
  bool armed_ = false;
};

// The engine's side: whenever the nursery attended comes due, the engine's
// process table adopts its children.  Engine thread only.
class NurseryAdoption : public Service {
 public:
  explicit NurseryAdoption(Engine& engine) : engine_(engine) {}

  // From now on, adopts NURSERY's children whenever its timer is due.
  // Shutting down kills and reaps those still waiting.  Throws SystemError
  // when the timer cannot be watched.
  void attend(std::shared_ptr<Nursery> nursery);
  void shutdown() override;

 private:
  static void on_due(uv_poll_t* handle, int status, int events);

  Engine& engine_;
  std::shared_ptr<Nursery> nursery_;
  uv_poll_t poll_{};
  bool poll_open_ = false;
  bool shutting_down_ = false;
};

// Posts CHILD to the engine's table as ID; returns whether it was posted.  If
// the command never runs, the handover dies with it and kills its child.
bool post_adoption(Engine& engine, std::uint64_t id, std::unique_ptr<ProcessHandover> child);

// The main thread's side.  Main thread only, and only while ENGINE runs.
class Handoff {
 public:
  struct Tuning {
    // How long a child may wait in the nursery before the engine adopts it:
    // long enough for Lisp to get from `fastrevert-make-process' to its
    // first wait, short enough that the output of a child nobody waits for
    // is read at once.
    std::chrono::microseconds adoption_delay{2000};
    // How long a wait that has results for Lisp goes on serving children
    // that are still running: a child that has just written its output is
    // usually about to exit, and its exit then comes with the same return to
    // Lisp instead of another round.  The wait's own deadline still ends it,
    // and so does a child whose output streams.
    std::chrono::microseconds linger{3000};
    // How long after its start a child served here has only its exit watched
    // (see ProcessTable::watched): a child that ends within that time costs
    // one wake-up, and the first output of one that lives on comes at most
    // that late.  Short, since a child that streams stalls meanwhile on a
    // full pipe.
    std::chrono::microseconds quiet_start{1000};
    // A child with more output read than this streams: it goes to the engine
    // when the wait ends, and a wait with results stops lingering for it.
    // Past the memfd threshold too, output streams through a memfd that the
    // engine fills while Lisp inserts.
    std::uint64_t streaming_bytes = kMemfdThreshold;
  };

  // Makes the nursery and has ENGINE's table adopt from it.  Throws
  // SystemError when the nursery cannot be made.
  explicit Handoff(Engine& engine) : Handoff(engine, Tuning()) {}
  Handoff(Engine& engine, Tuning tuning);
  ~Handoff();

  Handoff(const Handoff&) = delete;
  Handoff& operator=(const Handoff&) = delete;

  // Puts a freshly spawned CHILD in the nursery as ID.
  void put(std::uint64_t id, std::unique_ptr<ProcessHandover> child);

  // Hands child ID to the engine if it waits in the nursery, so that a
  // command posted next finds it in the engine's table.
  void hand_to_engine(std::uint64_t id);

  // Serves the nursery's children on this thread for up to TIMEOUT or until
  // the engine has results, whichever comes first, asking SHOULD_QUIT at
  // least every 10 ms.  Returns whether results are ready, false when the
  // user quit, or std::nullopt without waiting when no child waits.  On
  // every way out, no child is left in this thread's table.
  std::optional<bool> serve(std::chrono::nanoseconds timeout,
                            const std::function<bool()>& should_quit);

 private:
  // Gives the children still running back to the nursery, or to the engine
  // when they stream.
  void give_back();

  Engine& engine_;
  const Tuning tuning_;
  std::shared_ptr<Nursery> nursery_;
  // The table, without a loop, that serves the nursery's children while the
  // main thread waits.
  ProcessTable table_;
  // Reused from wait to wait.
  std::vector<pollfd> fds_;
  std::vector<std::pair<std::uint64_t, ProcessTable::Watch>> owners_;
};

}  // namespace fastrevert
