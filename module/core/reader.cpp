#include "core/reader.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <utility>

#include "core/errors.h"

namespace fastrevert {

char* ReadScratch::reserve(std::size_t size) {
  if (size > capacity_) {
    // Grow at least geometrically so that a reader doubling its size does
    // not reallocate for every step.
    std::size_t new_capacity = std::max(size, capacity_ * 2);
    data_.reset(new char[new_capacity]);
    capacity_ = new_capacity;
  }
  return data_.get();
}

AdaptiveReader::AdaptiveReader(std::size_t initial_size, std::size_t max_size,
                               std::shared_ptr<ReadScratch> scratch, std::size_t grow_pipe_to)
    : read_size_(initial_size == 0 ? 4096 : initial_size),
      max_size_(std::max(max_size, read_size_)),
      scratch_(scratch ? std::move(scratch) : std::make_shared<ReadScratch>()),
      grow_pipe_to_(grow_pipe_to) {}

ReadResult AdaptiveReader::read(int fd) {
  char* buffer = scratch_->reserve(read_size_);
  ssize_t count;
  do {
    count = ::read(fd, buffer, read_size_);
  } while (count < 0 && errno == EINTR);
  ReadResult result;
  if (count > 0) {
    result.status = ReadResult::Status::data;
    result.bytes = std::string_view(buffer, static_cast<std::size_t>(count));
    if (static_cast<std::size_t>(count) == read_size_) after_full_read(fd, read_size_);
  } else if (count == 0) {
    result.status = ReadResult::Status::eof;
  } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
    result.status = ReadResult::Status::would_block;
  } else {
    result.status = ReadResult::Status::error;
    result.error = errno;
  }
  return result;
}

ReadResult AdaptiveReader::read_append(int fd, std::string& out) {
  ReadResult result = read(fd);
  if (result.status == ReadResult::Status::data) {
    std::size_t old_size = out.size();
    out.append(result.bytes);
    result.bytes = std::string_view(out).substr(old_size);
  }
  return result;
}

void AdaptiveReader::after_full_read(int fd, std::size_t bytes) {
  if (!pipe_growth_done_ && grow_pipe_to_ > 0) {
    if (pipe_capacity_ == 0) {
      int capacity = fcntl(fd, F_GETPIPE_SZ);
      if (capacity < 0) {
        pipe_growth_done_ = true;  // Not a pipe: nothing to enlarge.
      } else {
        pipe_capacity_ = static_cast<std::size_t>(capacity);
      }
    }
    // Reading a whole pipe's worth at once means the writer had filled it and
    // was probably blocked; a larger pipe lets it run ahead of us.
    if (!pipe_growth_done_ && bytes >= pipe_capacity_) {
      std::size_t grown = grow_pipe(fd, grow_pipe_to_);
      if (grown > 0) pipe_capacity_ = grown;
      pipe_growth_done_ = true;
    }
  }
  if (read_size_ < max_size_) read_size_ = std::min(read_size_ * 2, max_size_);
}

ssize_t write_without_sigpipe(int fd, const char* data, std::size_t size) noexcept {
  sigset_t sigpipe_only;
  sigset_t previous_mask;
  sigemptyset(&sigpipe_only);
  sigaddset(&sigpipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &sigpipe_only, &previous_mask);
  // A SIGPIPE already pending belongs to someone else; leave it alone.
  sigset_t pending;
  sigpending(&pending);
  bool already_pending = sigismember(&pending, SIGPIPE) == 1;

  ssize_t written;
  do {
    written = write(fd, data, size);
  } while (written < 0 && errno == EINTR);
  int saved_errno = errno;

  if (written < 0 && saved_errno == EPIPE && !already_pending) {
    struct timespec no_wait = {0, 0};
    int taken;
    do {
      taken = sigtimedwait(&sigpipe_only, nullptr, &no_wait);
    } while (taken < 0 && errno == EINTR);
  }
  pthread_sigmask(SIG_SETMASK, &previous_mask, nullptr);
  errno = saved_errno;
  return written;
}

namespace {

using Clock = std::chrono::steady_clock;

// The state of one run_to_completion() call.  Keeping it in an object lets
// the exception path reach the child to kill it.
class SyncRun {
 public:
  SyncRun(Child& child, const ByteSink& on_stdout, const ByteSink& on_stderr,
          const RunOptions& options)
      : child_(child),
        on_stdout_(on_stdout),
        on_stderr_(on_stderr),
        options_(options),
        stdout_reader_(options.initial_read_size, options.max_read_size),
        stderr_reader_(options.initial_read_size, options.max_read_size) {}

  RunResult run();

 private:
  // Reads FD until it would block, reaches end of file, or has given a few
  // reads' worth (so that the other stream and quit checks get their turn).
  // Closes FD and sets it to -1 at end of file.
  void pump(int& fd, AdaptiveReader& reader, const ByteSink& sink);
  void feed_stdin();
  void try_reap(bool block);
  void handle_quit();
  void send(int signal_number);

  Child& child_;
  const ByteSink& on_stdout_;
  const ByteSink& on_stderr_;
  const RunOptions& options_;
  AdaptiveReader stdout_reader_;
  AdaptiveReader stderr_reader_;
  std::size_t stdin_offset_ = 0;
  bool reaped_ = false;
  RunResult result_;
  bool killed_ = false;
  Clock::time_point quit_time_{};
};

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

void SyncRun::pump(int& fd, AdaptiveReader& reader, const ByteSink& sink) {
  for (int reads = 0; reads < 16; ++reads) {
    ReadResult result = reader.read(fd);
    switch (result.status) {
      case ReadResult::Status::data:
        if (sink) sink(result.bytes);
        break;
      case ReadResult::Status::would_block:
        return;
      case ReadResult::Status::eof:
      case ReadResult::Status::error:
        close_fd(fd);
        return;
    }
  }
}

void SyncRun::feed_stdin() {
  const std::string_view& data = options_.stdin_data;
  while (stdin_offset_ < data.size()) {
    ssize_t written = write_without_sigpipe(child_.stdin_fd, data.data() + stdin_offset_,
                                            data.size() - stdin_offset_);
    if (written < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      // EPIPE: the child does not want the rest; that is its business.
      break;
    }
    stdin_offset_ += static_cast<std::size_t>(written);
  }
  close_fd(child_.stdin_fd);
}

void SyncRun::try_reap(bool block) {
  if (reaped_) return;
  int status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(child_.pid, &status, block ? 0 : WNOHANG);
  } while (reaped < 0 && errno == EINTR);
  if (reaped == child_.pid) {
    result_.wait_status = status;
    reaped_ = true;
  } else if (reaped < 0) {
    // ECHILD: reaped behind our back; the status is lost.
    result_.wait_status = -1;
    reaped_ = true;
  }
  if (reaped_) {
    child_.pid = -1;
    close_fd(child_.pidfd);
  }
}

void SyncRun::send(int signal_number) {
  if (reaped_) return;
  kill(options_.signal_process_group ? -child_.pid : child_.pid, signal_number);
}

void SyncRun::handle_quit() {
  if (!options_.should_quit || killed_) return;
  bool quit_now = options_.should_quit();
  if (quit_now && !result_.quit) {
    result_.quit = true;
    quit_time_ = Clock::now();
    if (options_.quit_signal == SIGKILL) killed_ = true;
    send(options_.quit_signal);
    return;
  }
  if (result_.quit && (quit_now || Clock::now() - quit_time_ >=
                                       std::chrono::milliseconds(options_.kill_grace_ms))) {
    killed_ = true;
    send(SIGKILL);
  }
}

RunResult SyncRun::run() {
  if (child_.stdin_fd >= 0 && options_.stdin_data.empty()) close_fd(child_.stdin_fd);
  for (;;) {
    bool pipes_open = child_.stdout_fd >= 0 || child_.stderr_fd >= 0;
    if (reaped_ && (!pipes_open || result_.quit)) break;

    pollfd fds[4];
    int count = 0;
    int stdout_index = -1, stderr_index = -1, stdin_index = -1, pidfd_index = -1;
    if (child_.stdout_fd >= 0) {
      stdout_index = count;
      fds[count++] = {child_.stdout_fd, POLLIN, 0};
    }
    if (child_.stderr_fd >= 0) {
      stderr_index = count;
      fds[count++] = {child_.stderr_fd, POLLIN, 0};
    }
    if (child_.stdin_fd >= 0) {
      stdin_index = count;
      fds[count++] = {child_.stdin_fd, POLLOUT, 0};
    }
    if (!reaped_ && child_.pidfd >= 0) {
      pidfd_index = count;
      fds[count++] = {child_.pidfd, POLLIN, 0};
    }
    int timeout = options_.quit_poll_ms > 0 ? options_.quit_poll_ms : 50;
    // Without a pidfd nothing wakes us when the child exits, so look often.
    if (!reaped_ && child_.pidfd < 0) timeout = std::min(timeout, pipes_open ? 50 : 5);

    int ready = poll(fds, static_cast<nfds_t>(count), timeout);
    if (ready < 0 && errno != EINTR) throw SystemError(errno, "poll");

    if (ready > 0) {
      if (stdout_index >= 0 && fds[stdout_index].revents)
        pump(child_.stdout_fd, stdout_reader_, on_stdout_);
      if (stderr_index >= 0 && fds[stderr_index].revents)
        pump(child_.stderr_fd, stderr_reader_, on_stderr_);
      if (stdin_index >= 0 && fds[stdin_index].revents) feed_stdin();
      if (pidfd_index >= 0 && fds[pidfd_index].revents) try_reap(false);
    }
    if (!reaped_ && child_.pidfd < 0) try_reap(false);
    handle_quit();
  }
  child_.close_fds();
  return result_;
}

}  // namespace

RunResult run_to_completion(Child& child, const ByteSink& on_stdout, const ByteSink& on_stderr,
                            const RunOptions& options) {
  SyncRun run(child, on_stdout, on_stderr, options);
  try {
    return run.run();
  } catch (...) {
    kill_and_reap(child);
    throw;
  }
}

}  // namespace fastrevert
