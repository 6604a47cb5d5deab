#include "core/engine.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <exception>
#include <utility>

#include "core/duration.h"
#include "core/errors.h"
#include "core/threads.h"

namespace fastrevert {

namespace {

// Marks FD close-on-exec and non-blocking.  A blocking wake write could stall
// the engine behind a full pipe; close-on-exec keeps it out of every child.
void prepare_wake_fd(int fd) {
  int fd_flags = fcntl(fd, F_GETFD);
  if (fd_flags < 0 || fcntl(fd, F_SETFD, fd_flags | FD_CLOEXEC) < 0) throw_errno("fcntl");
  int status_flags = fcntl(fd, F_GETFL);
  if (status_flags < 0 || fcntl(fd, F_SETFL, status_flags | O_NONBLOCK) < 0) throw_errno("fcntl");
}

}  // namespace

const char* record_kind_name(RecordKind kind) noexcept {
  switch (kind) {
    case RecordKind::echo:
      return "echo";
    case RecordKind::notice:
      return "notice";
    case RecordKind::file_changed:
      return "file-changed";
    case RecordKind::file_watched:
      return "file-watched";
    case RecordKind::process_ready:
      return "process-ready";
    case RecordKind::vc_changed:
      return "vc-changed";
  }
  return "unknown";
}

const std::array<StatsCounter, 14> kStatsCounters = {{
    {"watches", &Stats::watches},
    {"polled-files", &Stats::polled_files},
    {"kernel-events", &Stats::kernel_events},
    {"events-dropped-natively", &Stats::events_dropped_natively},
    {"batches", &Stats::batches},
    {"overflows", &Stats::overflows},
    {"processes", &Stats::processes},
    {"bytes-read", &Stats::bytes_read},
    {"read-pauses", &Stats::read_pauses},
    {"commands", &Stats::commands},
    {"records", &Stats::records},
    {"wakes", &Stats::wakes},
    {"drains", &Stats::drains},
    {"drain-ns", &Stats::drain_ns},
}};

Engine::Engine(int wake_fd) : wake_fd_(wake_fd) {
  try {
    prepare_wake_fd(wake_fd_);
    // Destroyed with the engine's other members if a later step throws.
    commands_signal_.emplace();
    records_signal_.emplace();
    int status = uv_loop_init(&loop_);
    if (status < 0) throw SystemError(-status, "uv_loop_init");
  } catch (...) {
    close(wake_fd_);
    throw;
  }
  // Commands arrive through a wake signal of our own rather than a
  // uv_async_t, whose receiving side spins while a sender is between its
  // steps.
  int status = uv_poll_init(&loop_, &command_poll_, commands_signal_->fd());
  if (status < 0) {
    uv_loop_close(&loop_);
    close(wake_fd_);
    throw SystemError(-status, "uv_poll_init");
  }
  command_poll_.data = this;
  uv_poll_start(&command_poll_, UV_READABLE, &Engine::on_commands);

  // No signal meant for Emacs is ever run on the engine thread, and no
  // handler is installed here.
  try {
    thread_ = start_thread_blocking_signals([this] { thread_main(); });
  } catch (...) {
    uv_close(reinterpret_cast<uv_handle_t*>(&command_poll_), nullptr);
    uv_run(&loop_, UV_RUN_DEFAULT);
    uv_loop_close(&loop_);
    close(wake_fd_);
    throw;
  }
}

Engine::~Engine() { stop(); }

bool Engine::post(Command command) {
  {
    std::lock_guard<std::mutex> lock(commands_mutex_);
    // Checked under the lock so that stop() cannot slip between the test and
    // the push and leave a command that never runs.
    if (stopping_.load(std::memory_order_acquire)) return false;
    commands_.push_back(std::move(command));
    signal_commands_locked();
  }
  stats_.commands.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void Engine::stop() { stop_within(std::chrono::milliseconds::max()); }

bool Engine::stop_within(std::chrono::milliseconds timeout) {
  if (joined_) return true;
  {
    // Emacs runs `kill-emacs' from its handler of SIGTERM and SIGHUP, on
    // the main thread, which may be interrupted in the middle of post()
    // with this lock held.  A stop that cannot take the lock at once goes
    // on without it: a command posted at that moment may then never run,
    // which at exit does not matter, and a deadlock would.
    std::unique_lock<std::mutex> lock(commands_mutex_, std::try_to_lock);
    if (!stopping_.load(std::memory_order_acquire)) {
      stopping_.store(true, std::memory_order_release);
      if (lock.owns_lock()) {
        signal_commands_locked();
      } else {
        commands_signal_->signal();
      }
    }
  }
  // Wake a wait_for_records() on another frame of this thread's stack (the
  // same interrupted main thread), so that it returns once it runs again.
  outbox_filled_.notify_all();
  {
    std::unique_lock<std::mutex> lock(finish_mutex_);
    auto finished = [this] { return thread_finished_; };
    if (timeout == std::chrono::milliseconds::max()) {
      finish_cv_.wait(lock, finished);
    } else if (!finish_cv_.wait_for(lock, timeout, finished)) {
      if (!detached_) thread_.detach();
      detached_ = true;
      return false;
    }
  }
  if (!detached_) thread_.join();
  uv_loop_close(&loop_);
  commands_signal_->close();
  // Taken for the same reason as the commands' lock above: an interrupted
  // frame may hold it, and then the descriptors are left open for exit.
  std::unique_lock<std::mutex> lock(outbox_mutex_, std::try_to_lock);
  std::unique_lock<std::mutex> fd_lock(wake_fd_mutex_, std::try_to_lock);
  if (lock.owns_lock() && fd_lock.owns_lock()) {
    records_signal_->close();
    close(wake_fd_);
    wake_fd_ = -1;
  }
  joined_ = true;
  return true;
}

void Engine::emit(Record record, Wake wake) {
  WakeActions actions;
  {
    std::lock_guard<std::mutex> lock(outbox_mutex_);
    outbox_.push_back(std::move(record));
    stats_.records.fetch_add(1, std::memory_order_relaxed);
    actions = wake_locked(wake);
  }
  perform(actions);
}

void Engine::report(RecordKind kind, std::uint64_t id, std::int64_t code, const char* text,
                    Wake wake) noexcept {
  try {
    emit(Record{kind, id, code, text}, wake);
  } catch (...) {
    lost_records_.fetch_add(1, std::memory_order_relaxed);
    // The consumer must still come round to learn of the loss.
    WakeActions actions;
    {
      std::lock_guard<std::mutex> lock(outbox_mutex_);
      wake_pending_ = false;
      actions = wake_locked(wake);
    }
    perform(actions);
  }
}

void Engine::wake_if_pending() {
  WakeActions actions;
  {
    std::lock_guard<std::mutex> lock(outbox_mutex_);
    if (!outbox_.empty()) actions = wake_locked(Wake::yes);
  }
  perform(actions);
}

void Engine::watch_records(bool watching) {
  std::lock_guard<std::mutex> lock(outbox_mutex_);
  records_watched_ = watching;
}

Engine::WakeActions Engine::wake_locked(Wake wake) {
  WakeActions actions;
  if (wake == Wake::no) return actions;
  actions.notify_waiters = true;
  actions.signal_records = records_watched_;
  if (wake_pending_ || wake_holds_ > 0) return actions;
  wake_pending_ = true;
  actions.write_byte = true;
  return actions;
}

void Engine::perform(const WakeActions& actions) {
  // Without a waiter this costs no system call.
  if (actions.notify_waiters) outbox_filled_.notify_all();
  if (actions.signal_records) records_signal_->signal();
  if (!actions.write_byte) return;
  std::lock_guard<std::mutex> lock(wake_fd_mutex_);
  if (wake_fd_ < 0) return;
  char byte = '!';
  ssize_t written;
  do {
    written = write(wake_fd_, &byte, 1);
  } while (written < 0 && errno == EINTR);
  // EAGAIN means the pipe is full of unread wake bytes, so Emacs is already
  // due to wake and drain; any other failure (Emacs deleted the pipe process)
  // leaves the records for an explicit drain.  Neither loses a record.
  if (written == 1) stats_.wakes.fetch_add(1, std::memory_order_relaxed);
}

std::deque<Record> Engine::drain() {
  std::deque<Record> taken;
  std::lock_guard<std::mutex> lock(outbox_mutex_);
  taken.swap(outbox_);
  taken_ += taken.size();
  wake_pending_ = false;
  stats_.drains.fetch_add(1, std::memory_order_relaxed);
  return taken;
}

bool Engine::try_drain(std::deque<Record>& records) {
  std::unique_lock<std::mutex> lock(outbox_mutex_, std::try_to_lock);
  if (!lock.owns_lock()) return false;
  records.swap(outbox_);
  taken_ += records.size();
  wake_pending_ = false;
  return true;
}

std::uint64_t Engine::begin_drain() {
  std::lock_guard<std::mutex> lock(outbox_mutex_);
  wake_pending_ = false;
  stats_.drains.fetch_add(1, std::memory_order_relaxed);
  return taken_ + outbox_.size();
}

bool Engine::take(Record& record, std::uint64_t end) {
  if (std::uint64_t lost = lost_records_.exchange(0, std::memory_order_relaxed)) {
    try {
      record = Record{RecordKind::notice, 0, 0,
                      "fastrevert: " + std::to_string(lost) +
                          " engine results were lost for lack of memory"};
    } catch (...) {
      lost_records_.fetch_add(lost, std::memory_order_relaxed);
      throw;
    }
    return true;
  }
  std::lock_guard<std::mutex> lock(outbox_mutex_);
  // Compared as a difference, which stays right when the count wraps.
  if (outbox_.empty() || static_cast<std::int64_t>(end - taken_) <= 0) return false;
  record = std::move(outbox_.front());
  outbox_.pop_front();
  ++taken_;
  return true;
}

void Engine::rewake() {
  WakeActions actions;
  {
    std::lock_guard<std::mutex> lock(outbox_mutex_);
    if (outbox_.empty()) return;
    wake_pending_ = false;
    actions = wake_locked(Wake::yes);
  }
  perform(actions);
}

void Engine::unread(std::deque<Record> records) {
  if (records.empty()) return;
  WakeActions actions;
  {
    std::lock_guard<std::mutex> lock(outbox_mutex_);
    taken_ -= records.size();
    for (auto& record : outbox_) records.push_back(std::move(record));
    outbox_.swap(records);
    // The drain that took these cleared the pending wake; ask for another so
    // the records are not left waiting for the next unrelated one.
    actions = wake_locked(Wake::yes);
  }
  perform(actions);
}

void Engine::hold_wakes(bool hold) {
  WakeActions actions;
  {
    std::lock_guard<std::mutex> lock(outbox_mutex_);
    if (hold) {
      ++wake_holds_;
    } else if (wake_holds_ > 0 && --wake_holds_ == 0 && !outbox_.empty()) {
      actions = wake_locked(Wake::yes);
    }
  }
  perform(actions);
}

void Engine::set_wake_fd(int wake_fd) {
  try {
    prepare_wake_fd(wake_fd);
  } catch (...) {
    close(wake_fd);
    throw;
  }
  {
    std::lock_guard<std::mutex> lock(wake_fd_mutex_);
    if (wake_fd_ >= 0) close(wake_fd_);
    wake_fd_ = wake_fd;
  }
  WakeActions actions;
  {
    std::lock_guard<std::mutex> lock(outbox_mutex_);
    // A byte written to the old descriptor was never read.
    wake_pending_ = false;
    if (!outbox_.empty()) actions = wake_locked(Wake::yes);
  }
  perform(actions);
}

std::size_t Engine::pending() const {
  std::lock_guard<std::mutex> lock(outbox_mutex_);
  return outbox_.size();
}

bool Engine::wait_for_records(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(outbox_mutex_);
  // A timed wait that has already expired still sleeps for the kernel's
  // timer slack (50 us by default); a caller that only looks must not.
  if (timeout <= std::chrono::milliseconds(0)) return !outbox_.empty();
  outbox_filled_.wait_for(lock, timeout, [this] {
    return !outbox_.empty() || stopping_.load(std::memory_order_acquire);
  });
  return !outbox_.empty();
}

bool Engine::wait_for_records(std::chrono::nanoseconds timeout,
                              const std::function<bool()>& should_quit) {
  constexpr std::chrono::milliseconds kSlice(10);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = ceil_milliseconds(deadline - std::chrono::steady_clock::now());
    if (wait_for_records(std::clamp(left, std::chrono::milliseconds(0), kSlice))) return true;
    if (left <= kSlice || !running() || should_quit()) return false;
  }
}

void Engine::signal_commands_locked() {
  if (commands_signalled_) return;
  commands_signalled_ = true;
  commands_signal_->signal();
}

void Engine::report_failure(const char* what) noexcept {
  try {
    emit(Record{RecordKind::notice, 0, 0, std::string("fastrevert engine: ") + what});
  } catch (...) {
    report(RecordKind::notice, 0, 0, "fastrevert engine: a command failed");
  }
}

void Engine::on_commands(uv_poll_t* handle, int, int) {
  static_cast<Engine*>(handle->data)->run_commands();
}

void Engine::run_commands() {
  for (;;) {
    std::deque<Command> batch;
    {
      std::lock_guard<std::mutex> lock(commands_mutex_);
      // Reset the signal with the queue, under the lock, so that a command
      // posted from now on signals it again.
      commands_signal_->reset();
      commands_signalled_ = false;
      batch.swap(commands_);
    }
    if (batch.empty()) break;
    for (auto& command : batch) {
      // No exception may leave a libuv callback, this one included.
      try {
        command(*this);
      } catch (const std::exception& error) {
        report_failure(error.what());
      } catch (...) {
        report_failure("unknown exception");
      }
    }
  }
  if (stopping_.load(std::memory_order_acquire)) {
    // Commands posted before stop() have run; now let every service close its
    // handles, and close our own, so that uv_run returns.
    for (auto& entry : services_) entry.second->shutdown();
    uv_close(reinterpret_cast<uv_handle_t*>(&command_poll_), nullptr);
  }
}

void Engine::thread_main() {
  uv_run(&loop_, UV_RUN_DEFAULT);
  // Every handle is closed, so services may now be freed on the thread that
  // owned them.
  services_.clear();
  std::lock_guard<std::mutex> lock(finish_mutex_);
  thread_finished_ = true;
  finish_cv_.notify_all();
}

namespace {

// How many drains are under way on the main thread, the only one that
// drains.
int drain_depth = 0;

}  // namespace

DrainTimer::DrainTimer(Engine& engine) noexcept
    : engine_(engine), start_(std::chrono::steady_clock::now()), outermost_(drain_depth++ == 0) {}

DrainTimer::~DrainTimer() {
  --drain_depth;
  if (!outermost_ || !handled_) return;
  auto spent = std::chrono::steady_clock::now() - start_;
  engine_.stats().drain_ns.fetch_add(
      static_cast<std::uint64_t>(
          std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count()),
      std::memory_order_relaxed);
}

}  // namespace fastrevert
