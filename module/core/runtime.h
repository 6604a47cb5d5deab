// The engine as Emacs's main thread owns it: the running engine and the
// hand-off of the children spawned for it (core/handoff.h), from start to
// stop.
//
// The module keeps one Runtime for the life of Emacs, on the main thread,
// and every method runs there.  The engine and its hand-off are shared
// because a caller that uses them across a call into Lisp (a drain calls
// handlers) or across a wait holds a reference of its own, and a signal
// handler may interrupt that wait to run `kill-emacs', which stops the
// engine: the interrupted frame is then left a stopped engine, never a freed
// one.  For the same reason the module never destroys its Runtime, so that
// exit() runs no destructor that would stop an engine from under a frame it
// interrupted.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "core/engine.h"
#include "core/handoff.h"
#include "core/process_table.h"

namespace fastrevert {

class Runtime {
 public:
  // Whether the engine took a command, and if not, why.
  enum class Posted : std::uint8_t { yes, not_running, stopping };
  // What stop() found and did.
  enum class Stopped : std::uint8_t { stopped, abandoned, not_running };

  // TUNING is for the hand-off of each engine started (see Handoff::Tuning).
  explicit Runtime(Handoff::Tuning tuning = {}) : tuning_(tuning) {}
  // Stops the running engine and waits for every engine stop() abandoned.
  ~Runtime();

  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Starts an engine that wakes WAKE_FD (see Engine::Engine), with the
  // hand-off of its children.  Throws std::logic_error if one runs already
  // (WAKE_FD is then still the caller's), SystemError when it cannot start.
  void start(int wake_fd);

  // Stops the running engine, waiting at most TIMEOUT (max() for no limit)
  // for its thread.  Whatever happens, the engine is no longer the running
  // one.  A thread that does not finish in time (stuck in a file system that
  // does not answer) is left behind with its engine, which is kept until
  // this Runtime is destroyed: `abandoned'.  Otherwise the records nobody
  // drained are dropped.
  Stopped stop(std::chrono::milliseconds timeout);

  // The running engine, or nullptr.
  Engine* engine() const noexcept { return engine_.get(); }
  // The same, for a caller that uses it across a call into Lisp: the
  // reference keeps the engine alive, if stopped meanwhile, until it is done.
  std::shared_ptr<Engine> reference() const noexcept { return engine_; }

  // Whether a command posted now would be taken.
  Posted can_post() const noexcept;

  // Posts COMMAND to the running engine.
  Posted post(Engine::Command command);

  // Posts COMMAND for process ID, after handing its child to the engine if
  // it waits in the nursery, so that COMMAND finds it in the engine's table.
  Posted post_for_process(std::uint64_t id, Engine::Command command);

  // Gives a freshly spawned CHILD, as process ID, to the hand-off (which
  // serves it while Lisp waits, see core/handoff.h).  When the engine cannot
  // take it, CHILD is killed and reaped.
  Posted adopt(std::uint64_t id, std::unique_ptr<ProcessHandover> child);

  // Waits up to TIMEOUT for the engine to have records ready, asking
  // SHOULD_QUIT at least every 10 ms, and serving meanwhile on this thread
  // the children that wait in the nursery.  Returns whether records are
  // ready: false when the time ran out, the user quit or no engine runs.
  bool wait(std::chrono::nanoseconds timeout, const std::function<bool()>& should_quit);

  // Hands HANDLER every record ready now, one at a time and in order, and
  // returns how many it handled; the drain's time counts in the engine's
  // Stats::drain_ns.  A HANDLER that drains again goes on with the next
  // record.  If HANDLER returns false (it handled the record, but the drain
  // is to stop there: Lisp exits non-locally) or throws, the records after
  // the one it was handed stay queued, a wake byte says so, and the drain
  // returns or the exception propagates.
  std::size_t drain(const std::function<bool(const Record&)>& handler);

 private:
  const Handoff::Tuning tuning_;
  // handoff_ exists exactly while engine_ does; declared after it, it is
  // destroyed first, as it uses the engine.
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<Handoff> handoff_;
  // Engines whose thread stop() left behind: the thread still uses them.
  std::vector<std::shared_ptr<Engine>> abandoned_;
};

}  // namespace fastrevert
