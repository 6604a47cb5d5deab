#include "core/engine.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <exception>
#include <utility>

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

Engine::Engine(int wake_fd) : wake_fd_(wake_fd) {
  try {
    prepare_wake_fd(wake_fd_);
    command_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (command_fd_ < 0) throw_errno("eventfd");
    records_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (records_fd_ < 0) {
      close(command_fd_);
      throw_errno("eventfd");
    }
    int status = uv_loop_init(&loop_);
    if (status < 0) {
      close(command_fd_);
      close(records_fd_);
      throw SystemError(-status, "uv_loop_init");
    }
  } catch (...) {
    close(wake_fd_);
    throw;
  }
  // Commands arrive through an eventfd of our own rather than a uv_async_t,
  // whose receiving side spins while a sender is between its steps.
  int status = uv_poll_init(&loop_, &command_poll_, command_fd_);
  if (status < 0) {
    uv_loop_close(&loop_);
    close(command_fd_);
    close(records_fd_);
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
    close(command_fd_);
    close(records_fd_);
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
    std::lock_guard<std::mutex> lock(commands_mutex_);
    if (!stopping_.load(std::memory_order_acquire)) {
      stopping_.store(true, std::memory_order_release);
      signal_commands_locked();
    }
  }
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
  close(command_fd_);
  std::lock_guard<std::mutex> lock(outbox_mutex_);
  close(records_fd_);
  records_fd_ = -1;
  close(wake_fd_);
  wake_fd_ = -1;
  joined_ = true;
  return true;
}

void Engine::emit(Record record, Wake wake) {
  std::lock_guard<std::mutex> lock(outbox_mutex_);
  outbox_.push_back(std::move(record));
  stats_.records.fetch_add(1, std::memory_order_relaxed);
  wake_locked(wake);
}

void Engine::emit_coalesced(Record record, Wake wake) {
  std::lock_guard<std::mutex> lock(outbox_mutex_);
  StreamKey key{record.kind, record.id, record.code};
  auto open = open_streams_.find(key);
  if (open != open_streams_.end()) {
    outbox_[open->second].data.append(record.data);
    return;
  }
  open_streams_.emplace(key, outbox_.size());
  outbox_.push_back(std::move(record));
  stats_.records.fetch_add(1, std::memory_order_relaxed);
  wake_locked(wake);
}

void Engine::wake_if_pending() {
  std::lock_guard<std::mutex> lock(outbox_mutex_);
  if (!outbox_.empty()) wake_locked(Wake::yes);
}

void Engine::watch_records(bool watching) {
  std::lock_guard<std::mutex> lock(outbox_mutex_);
  records_watched_ = watching;
}

void Engine::wake_locked(Wake wake) {
  if (wake == Wake::no) return;
  // Without a waiter this costs no system call.
  outbox_filled_.notify_all();
  if (records_watched_ && records_fd_ >= 0) {
    std::uint64_t one = 1;
    ssize_t ignored = write(records_fd_, &one, sizeof one);
    (void)ignored;
  }
  if (wake_pending_ || wake_fd_ < 0) return;
  wake_pending_ = true;
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
  open_streams_.clear();
  wake_pending_ = false;
  stats_.drains.fetch_add(1, std::memory_order_relaxed);
  return taken;
}

void Engine::unread(std::deque<Record> records) {
  if (records.empty()) return;
  std::lock_guard<std::mutex> lock(outbox_mutex_);
  for (auto& record : outbox_) records.push_back(std::move(record));
  outbox_.swap(records);
  // Indexes shifted; later records start new entries rather than extend
  // ones whose place is no longer known.
  open_streams_.clear();
  // The drain that took these cleared the pending wake; ask for another so
  // the records are not left waiting for the next unrelated one.
  wake_locked(Wake::yes);
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

void Engine::signal_commands_locked() {
  if (commands_signalled_) return;
  commands_signalled_ = true;
  std::uint64_t one = 1;
  ssize_t written;
  do {
    written = write(command_fd_, &one, sizeof one);
  } while (written < 0 && errno == EINTR);
  // An eventfd only refuses a write when its counter would overflow, which
  // one write per batch of commands never approaches.
}

void Engine::on_commands(uv_poll_t* handle, int, int) {
  static_cast<Engine*>(handle->data)->run_commands();
}

void Engine::run_commands() {
  for (;;) {
    std::deque<Command> batch;
    {
      std::lock_guard<std::mutex> lock(commands_mutex_);
      // Reset the eventfd with the queue, under the lock, so that a command
      // posted from now on signals it again.
      std::uint64_t count;
      ssize_t ignored = read(command_fd_, &count, sizeof count);
      (void)ignored;
      commands_signalled_ = false;
      batch.swap(commands_);
    }
    if (batch.empty()) break;
    for (auto& command : batch) {
      try {
        command(*this);
      } catch (const std::exception& error) {
        emit(Record{RecordKind::notice, 0, 0, std::string("fastrevert engine: ") + error.what()});
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

}  // namespace fastrevert
