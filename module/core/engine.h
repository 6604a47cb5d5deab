// The engine: one background thread running a libuv loop.
//
// Emacs (the main thread) talks to the engine by posting commands, closures
// that run on the engine thread.  The engine talks back by emitting records
// into an outbox and, when the outbox goes from empty to non-empty, writing one
// wake byte to a file descriptor.  In Emacs that descriptor comes from
// `open_channel' on a pipe process whose filter drains the whole outbox in one
// module call.  The engine never calls Emacs; this header has no Emacs types.
#pragma once

#include <uv.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <typeindex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/wake_signal.h"

namespace fastrevert {

class ProcessOutput;

// What a record reports.  Values are stable: the glue names them for Lisp.
enum class RecordKind : std::uint8_t {
  echo,            // id: the token posted by an echo command; data: its payload.
  notice,          // data: a message for the user (a fallback, an overflow).
  file_changed,    // id: the watched file's id; data: its path.
  file_watched,    // id: a new registration whose baseline is taken; data: its path;
                   // code: 1 if its first check waits for a VCS operation (a
                   // file_changed follows when it ends), else 0.
  process_ready,   // id: the process id; output: what waits for delivery (see
                   // core/process_output.h).  One at a time per process.
  vc_changed,      // id: a watched file's id; code: what changed in its repository's
                   // control files, a bit per ControlRole (1 HEAD or its branch,
                   // 2 the index); data: empty (a checkout reports every file of
                   // the repository, and the id is all Lisp needs).
};

// The symbol Lisp knows KIND by.  `fastrevert--record-kinds' lists these
// names in the order of the enum.
const char* record_kind_name(RecordKind kind) noexcept;

struct Record {
  Record() = default;
  Record(RecordKind record_kind, std::uint64_t record_id, std::int64_t record_code,
         std::string record_data, std::shared_ptr<ProcessOutput> record_output = nullptr)
      : kind(record_kind),
        id(record_id),
        code(record_code),
        data(std::move(record_data)),
        output(std::move(record_output)) {}

  RecordKind kind = RecordKind::notice;
  std::uint64_t id = 0;
  std::int64_t code = 0;
  std::string data;
  // For process_ready: the process's output, which the consumer delivers.
  std::shared_ptr<ProcessOutput> output;
};

// Counters shown by `fastrevert-stats'.  Each is written by the engine thread
// (or by whichever service owns it) and read by the main thread; relaxed
// atomics suffice because each counter is independent.
struct Stats {
  std::atomic<std::uint64_t> commands{0};
  std::atomic<std::uint64_t> records{0};
  std::atomic<std::uint64_t> wakes{0};
  std::atomic<std::uint64_t> drains{0};
  std::atomic<std::uint64_t> watches{0};
  std::atomic<std::uint64_t> polled_files{0};
  std::atomic<std::uint64_t> kernel_events{0};
  std::atomic<std::uint64_t> events_dropped_natively{0};
  std::atomic<std::uint64_t> batches{0};
  std::atomic<std::uint64_t> overflows{0};
  std::atomic<std::uint64_t> processes{0};
  std::atomic<std::uint64_t> bytes_read{0};
  // Times a streaming output pipe was left unpolled for a moment, so that
  // its writer's small writes gather (see ProcessTable).
  std::atomic<std::uint64_t> read_pauses{0};
  // Nanoseconds the main thread spent handling drained records.
  std::atomic<std::uint64_t> drain_ns{0};
};

// A counter of Stats and the name `fastrevert-stats' shows it under (as a
// keyword: `:NAME').
struct StatsCounter {
  const char* name;
  std::atomic<std::uint64_t> Stats::*counter;
};

// Every counter of Stats, in the order `fastrevert-stats' lists them.
extern const std::array<StatsCounter, 14> kStatsCounters;

class Engine;

// A long-lived part of the engine (the file watcher, the process table) that
// owns libuv handles.  Services are created and destroyed on the engine
// thread.  shutdown() runs when the engine stops: it must stop its work and
// uv_close every handle it owns; the service is destroyed once the loop has
// run all close callbacks.
class Service {
 public:
  virtual ~Service() = default;
  virtual void shutdown() = 0;
};

class Engine {
 public:
  using Command = std::function<void(Engine&)>;

  // Starts the engine thread.  The engine takes ownership of WAKE_FD (it is
  // closed when the engine stops), marks it close-on-exec and non-blocking,
  // and writes one byte to it whenever the outbox goes from empty to
  // non-empty.  Throws SystemError when the loop or thread cannot start.
  explicit Engine(int wake_fd);
  // Stops the engine (see stop()).
  ~Engine();

  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Any thread.  Queues COMMAND to run on the engine thread, in posting
  // order.  Returns false, dropping the command, once the engine is stopping.
  bool post(Command command);

  // Main thread.  Runs every posted command, shuts the services down, joins
  // the thread and closes the wake fd.  Idempotent.
  void stop();

  // Main thread.  Like stop(), but waits at most TIMEOUT for the engine
  // thread, which can be stuck in a stat on a dead network mount.  Returns
  // false if it did not finish in time: the thread is then detached and
  // still uses this Engine, so the caller must keep it alive (at exit, leak
  // it).  A later stop() or the destructor waits for the thread to finish.
  bool stop_within(std::chrono::milliseconds timeout);

  bool running() const noexcept { return !stopping_.load(std::memory_order_acquire); }

  // Whether an emitted record wakes its consumers.  The main thread, when it
  // emits records while it waits itself (see ProcessTable), has no one to
  // wake: it drains them before it returns to Lisp.
  enum class Wake : std::uint8_t { yes, no };

  // Any thread.  Appends RECORD to the outbox, writing a wake byte if the
  // outbox was empty and no wake is pending.  Throws std::bad_alloc when
  // memory runs out.
  void emit(Record record, Wake wake = Wake::yes);

  // Any thread.  Like emit() with a record of KIND, ID, CODE and the text
  // TEXT, but never throws, for the places that report a failure and must
  // not fail themselves (an engine callback, which no exception may leave).
  // A record that cannot be made for lack of memory is counted instead, and
  // the next take() returns a notice saying how many were lost.
  void report(RecordKind kind, std::uint64_t id, std::int64_t code, const char* text,
              Wake wake = Wake::yes) noexcept;

  // Any thread.  Writes a wake byte if records wait and none is pending:
  // for records emitted with Wake::no, once the last of them is queued.
  void wake_if_pending();

  // A descriptor that becomes readable when a record is emitted while the
  // main thread watches it (see watch_records), for a main thread that
  // polls descriptors of its own and must also learn of the engine's
  // results.  The watcher resets it with clear_records_fd().
  int records_fd() const noexcept { return records_signal_ ? records_signal_->fd() : -1; }
  // Main thread.  Makes records_fd() unreadable until the next record.
  void clear_records_fd() noexcept {
    if (records_signal_) records_signal_->reset();
  }

  // Main thread.  Starts or stops signalling records_fd() on every emitted
  // record.
  void watch_records(bool watching);

  // Main thread.  Takes every record in the outbox, in emission order.
  std::deque<Record> drain();

  // Main thread.  Like drain(), into RECORDS, but returns false instead of
  // waiting when the outbox lock is held: for a stop that may run in a
  // signal handler, which can interrupt this thread while it holds the lock.
  bool try_drain(std::deque<Record>& records);

  // Main thread.  Starts a drain by take(): from now on an emitted record
  // writes a wake byte again.  Counts the drain in Stats::drains.  Returns
  // the drain's end, to pass to take(): the drain covers the records in the
  // outbox now, and not those a busy producer emits while it runs.
  std::uint64_t begin_drain();

  // Main thread.  Moves the oldest record of the outbox into RECORD and
  // returns true, or returns false when the outbox is empty or holds only
  // records emitted after the drain that ends at END began.  Records are
  // taken one at a time, so that a consumer that drains again while it
  // handles one (a process filter that waits for more output) goes on with
  // the next record instead of overtaking those an outer drain still holds:
  // every stream stays in order however deep the drains nest.
  bool take(Record& record, std::uint64_t end);

  // Main thread.  Writes a wake byte if records wait, pending wake or not:
  // for a drain that stopped early (its consumer exited non-locally) after
  // the byte that started it was read, so that the rest is not left waiting
  // for an unrelated record.
  void rewake();

  // Main thread.  Puts records that could not be delivered back at the front
  // of the outbox, so that a failing consumer loses nothing, and wakes the
  // consumer again.
  void unread(std::deque<Record> records);

  // Main thread.  While held (hold_wakes(true) more often than
  // hold_wakes(false)), no wake byte is written: for a caller that drains
  // the outbox itself and lets Emacs's event loop run meanwhile, which
  // would otherwise find the wake pipe readable after every drain of a busy
  // stream and read it for as long as the stream runs.  Released for the
  // last time, writes a wake byte if records wait.
  void hold_wakes(bool hold);

  // Main thread.  Wakes WAKE_FD from now on instead of the descriptor the
  // engine was started with, which is closed: for a consumer whose wake
  // pipe was deleted and made anew.  The engine takes ownership of WAKE_FD
  // and prepares it as the constructor does; if records wait, a wake byte
  // goes to it at once.  Throws SystemError (having closed WAKE_FD) when it
  // cannot be prepared.
  void set_wake_fd(int wake_fd);

  // Main thread.  The number of records waiting in the outbox.
  std::size_t pending() const;

  // Main thread.  Waits up to TIMEOUT for the outbox to hold a record and
  // returns whether it does: a caller that waits here instead of on the
  // wake descriptor learns of a result without a trip through Emacs's
  // event loop.  Returns early, with false, once the engine is stopping.
  bool wait_for_records(std::chrono::milliseconds timeout);

  // Main thread.  Like wait_for_records() above, but asks SHOULD_QUIT every
  // 10 ms, so that a user's quit is seen within that, and returns false as
  // soon as it says yes.
  bool wait_for_records(std::chrono::nanoseconds timeout, const std::function<bool()>& should_quit);

  // Engine thread only.
  uv_loop_t* loop() noexcept { return &loop_; }

  // Engine thread only.  Returns the service of type T, creating it with
  // T(Engine&) on first use.
  template <typename T>
  T& service() {
    auto& slot = services_[std::type_index(typeid(T))];
    if (!slot) slot = std::make_unique<T>(*this);
    return static_cast<T&>(*slot);
  }

  Stats& stats() noexcept { return stats_; }
  const Stats& stats() const noexcept { return stats_; }

 private:
  static void on_commands(uv_poll_t* handle, int status, int events);
  // Signals commands_signal_ unless a signal is already unread; commands_mutex_
  // must be held.
  void signal_commands_locked();
  void run_commands();
  // Emits a notice that a command failed with WHAT; never throws.
  void report_failure(const char* what) noexcept;
  // What emitting a record must do to wake its consumers.  Decided with
  // outbox_mutex_ held, done once it is released, so that no system call
  // is made while the producer or the consumer waits for the outbox.
  struct WakeActions {
    bool notify_waiters = false;
    bool signal_records = false;
    bool write_byte = false;
  };
  // Decides the actions for a record emitted with WAKE: waiters are
  // signalled, and a wake byte is written unless one is pending or held
  // back; outbox_mutex_ must be held.
  WakeActions wake_locked(Wake wake);
  // Does ACTIONS; outbox_mutex_ must not be held.
  void perform(const WakeActions& actions);
  void thread_main();

  uv_loop_t loop_{};
  // Readable when commands wait; see signal_commands_locked().
  std::optional<WakeSignal> commands_signal_;
  uv_poll_t command_poll_{};
  std::thread thread_;
  // Guards wake_fd_ while a byte is written to it or it is replaced: a
  // descriptor number closed by set_wake_fd() must not be written to.
  std::mutex wake_fd_mutex_;
  int wake_fd_ = -1;

  // Set by stop(); read by post() and by the loop.  Release/acquire pairs it
  // with the commands queued before it.
  std::atomic<bool> stopping_{false};
  bool joined_ = false;
  bool detached_ = false;

  // Guards thread_finished_, which the engine thread sets as its very last
  // act so that stop_within() can wait for it with a deadline.
  std::mutex finish_mutex_;
  std::condition_variable finish_cv_;
  bool thread_finished_ = false;

  // Guards commands_.  Posters push; the engine thread swaps the whole queue
  // out and runs it without the lock held.
  std::mutex commands_mutex_;
  std::deque<Command> commands_;
  bool commands_signalled_ = false;

  // Guards outbox_ and wake_pending_.  wake_pending_ is true from the moment a
  // wake byte is written until the next drain, so a burst of records costs
  // one byte however long Emacs takes to come round.
  mutable std::mutex outbox_mutex_;
  // Signalled whenever a record is added, for wait_for_records().
  std::condition_variable outbox_filled_;
  std::deque<Record> outbox_;
  bool wake_pending_ = false;
  // How many holds of hold_wakes() are in force.
  int wake_holds_ = 0;
  // Signalled on every record while records_watched_; see watch_records().
  std::optional<WakeSignal> records_signal_;
  bool records_watched_ = false;
  // How many records were taken from the front of outbox_ since the engine
  // started (less those put back by unread()): outbox_[i] is record number
  // taken_ + i, which stays its number while the records before it are
  // taken one by one.
  std::uint64_t taken_ = 0;
  // Records report() could not queue for lack of memory.  Relaxed: only
  // the count matters.
  std::atomic<std::uint64_t> lost_records_{0};
  // Engine thread only (created and destroyed there).
  std::unordered_map<std::type_index, std::unique_ptr<Service>> services_;

  Stats stats_;
};

// Main thread.  Times one drain into Stats::drain_ns, the main thread's time
// spent handling records, from its construction to its destruction.  A drain
// nested in another (a handler that drains again) is inside the outer one's
// time: only the outermost timer counts, and only when its drain handled a
// record.
class DrainTimer {
 public:
  explicit DrainTimer(Engine& engine) noexcept;
  ~DrainTimer();

  DrainTimer(const DrainTimer&) = delete;
  DrainTimer& operator=(const DrainTimer&) = delete;

  // Says that the drain handled a record.
  void handled() noexcept { handled_ = true; }

 private:
  Engine& engine_;
  std::chrono::steady_clock::time_point start_;
  bool outermost_;
  bool handled_ = false;
};

}  // namespace fastrevert
