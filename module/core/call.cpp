#include "core/call.h"

#include <poll.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

#include "core/copier.h"
#include "core/engine.h"
#include "core/errors.h"
#include "core/fd.h"

namespace fastrevert {

namespace {

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
        escalation_(child, options.signal_process_group, options.quit_signal,
                    std::chrono::milliseconds(options.kill_grace_ms)),
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

  Child& child_;
  const ByteSink& on_stdout_;
  const ByteSink& on_stderr_;
  const RunOptions& options_;
  QuitEscalation escalation_;
  AdaptiveReader stdout_reader_;
  AdaptiveReader stderr_reader_;
  std::size_t stdin_offset_ = 0;
  bool reaped_ = false;
  RunResult result_;
};

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

void SyncRun::handle_quit() {
  if (!options_.should_quit) return;
  escalation_.update(options_.should_quit());
  result_.quit = escalation_.quit();
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

// The end of the longest prefix of MEMFD[FROM, TO) that ends in a newline,
// or FROM when there is none.  A newline is a character boundary in every
// coding system the caller streams with (ASCII-compatible ones), and never
// splits a CRLF.
std::uint64_t line_boundary(int memfd, std::uint64_t from, std::uint64_t to) {
  constexpr std::uint64_t kWindow = 65536;
  char window[kWindow];
  std::uint64_t end = to;
  while (end > from) {
    std::uint64_t start = end - from > kWindow ? end - kWindow : from;
    ssize_t got = pread(memfd, window, end - start, static_cast<off_t>(start));
    if (got <= 0) return from;
    const void* newline = memrchr(window, '\n', static_cast<std::size_t>(got));
    if (newline)
      return start + static_cast<std::uint64_t>(static_cast<const char*>(newline) - window) + 1;
    end = start;
  }
  return from;
}

// Kills and reaps the child when a call unwinds early (an exception from a
// hook), so that nothing is left running.  The copy thread, declared after
// it, has stopped by then.
struct KillOnUnwind {
  Child& child;
  ~KillOnUnwind() {
    if (child.pid > 0) {
      kill(-child.pid, SIGKILL);
      kill_and_reap(child);
    }
  }
};

// One run_call() with its stdout a pipe.
class Call {
 public:
  Call(Child& child, std::uint64_t chunk, const CallHooks& hooks)
      : child_(child), step_(chunk), hooks_(hooks) {}

  CallResult run();

 private:
  // Reads the pipe on this thread until end of file or a chunk's worth.
  void read_first_phase();
  // Copies the rest on a MemfdCopier thread, handing ranges over as they
  // come.
  void copy_rest();
  void open_memfd();
  void insert(std::uint64_t from, std::uint64_t to);
  bool should_quit() const { return hooks_.should_quit && hooks_.should_quit(); }
  // A quit: the child gets SIGINT and a second of grace before SIGKILL, and
  // is reaped, without waiting for a pipe a grandchild may hold.
  CallResult quit_now();
  CallResult finish();

  Child& child_;
  const std::uint64_t step_;
  const CallHooks& hooks_;
  // Up to kCallStringLimit bytes, while no memfd is needed.
  std::string head_;
  UniqueFd memfd_;
  std::uint64_t written_ = 0;
  std::uint64_t consumed_ = 0;
  bool eof_ = false;
  bool quit_ = false;
  // While the copy thread runs, it gives back the memory of what the caller
  // has inserted; what is left when the call ends goes with the memfd.
  MemfdCopier* copier_ = nullptr;
};

void Call::open_memfd() {
  if (memfd_) return;
  memfd_.reset(memfd_create("fastrevert-call-process", MFD_CLOEXEC));
  if (!memfd_) throw_errno("memfd_create");
  if (int error = write_all_at(memfd_.get(), head_, 0)) throw SystemError(error, "write", "memfd");
  head_ = std::string();
}

void Call::insert(std::uint64_t from, std::uint64_t to) {
  hooks_.insert_range(memfd_.get(), from, to);
  consumed_ = to;
  if (copier_) copier_->release(to);
}

CallResult Call::quit_now() {
  bool first = true;
  bool quit = false;
  CallResult result;
  result.wait_status = reap_with_quit(
      child_, [&first] { return std::exchange(first, false); }, true, quit);
  result.quit = true;
  result.bytes = written_;
  return result;
}

CallResult Call::finish() {
  CallResult result;
  result.bytes = written_;
  result.wait_status = reap_with_quit(child_, hooks_.should_quit, true, result.quit);
  return result;
}

void Call::read_first_phase() {
  // Most children write little and end soon, and for them a copy thread
  // would cost more than the copy.  Only output that outgrows a chunk moves
  // to a copy thread, so that the caller can insert one chunk while the
  // child writes the next.
  char buffer[65536];
  while (!eof_ && !(step_ > 0 && written_ >= step_)) {
    pollfd fd = {child_.stdout_fd, POLLIN, 0};
    int ready = poll(&fd, 1, 50);
    if (ready < 0 && errno != EINTR) throw_errno("poll");
    if (should_quit()) {
      quit_ = true;
      return;
    }
    if (ready <= 0) continue;
    for (;;) {
      ssize_t got = read(child_.stdout_fd, buffer, sizeof buffer);
      if (got > 0) {
        std::string_view bytes(buffer, static_cast<std::size_t>(got));
        if (!memfd_ && head_.size() + bytes.size() <= kCallStringLimit) {
          head_.append(bytes);
        } else {
          open_memfd();
          if (int error = write_all_at(memfd_.get(), bytes, written_)) {
            throw SystemError(error, "write", "memfd");
          }
        }
        written_ += static_cast<std::uint64_t>(got);
        if (step_ > 0 && written_ >= step_) break;
        continue;
      }
      if (got == 0) {
        eof_ = true;
      } else if (errno == EINTR) {
        continue;
      } else if (errno != EAGAIN) {
        throw_errno("read", "process output");
      }
      break;
    }
  }
}

void Call::copy_rest() {
  MemfdCopier capture(child_.stdout_fd, memfd_.get(), written_);
  copier_ = &capture;
  // Bytes before consumed_ are inserted; bytes in [consumed_, SCANNED) hold
  // no newline, so each byte is searched once however long a line is.
  std::uint64_t scanned = 0;
  bool done = false;
  while (!done) {
    written_ = capture.wait(scanned + step_, std::chrono::milliseconds(50), done);
    if (should_quit()) {
      copier_ = nullptr;
      capture.stop();
      quit_ = true;
      return;
    }
    if (!done && written_ >= scanned + step_) {
      std::uint64_t boundary = line_boundary(memfd_.get(), scanned, written_);
      scanned = written_;
      if (boundary > consumed_) insert(consumed_, boundary);
    }
  }
  if (int error = capture.error()) throw SystemError(error, "read", "process output");
  // The copy thread is stopped only once the last range is inserted, so
  // that giving back the memory of the ranges before runs meanwhile.
  if (written_ > consumed_) insert(consumed_, written_);
  copier_ = nullptr;
}

CallResult Call::run() {
  KillOnUnwind cleanup{child_};
  read_first_phase();
  if (quit_) return quit_now();
  if (eof_ && !memfd_) {
    if (!head_.empty()) hooks_.insert_bytes(head_);
    return finish();
  }
  open_memfd();
  if (!eof_) {
    copy_rest();
    if (quit_) return quit_now();
  } else if (written_ > consumed_) {
    insert(consumed_, written_);
  }
  return finish();
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

CallResult run_call(Child& child, std::uint64_t chunk, const CallHooks& given) {
  CallHooks hooks = given;
  bool quit_seen = false;
  if (given.should_quit) {
    hooks.should_quit = [&given, &quit_seen] {
      return !quit_seen && (quit_seen = given.should_quit());
    };
  }
  if (child.stdout_fd >= 0) {
    CallResult result = Call(child, chunk, hooks).run();
    if (hooks.stats && !result.quit) {
      hooks.stats->processes.fetch_add(1, std::memory_order_relaxed);
      hooks.stats->bytes_read.fetch_add(result.bytes, std::memory_order_relaxed);
    }
    return result;
  }
  RunOptions options;
  options.signal_process_group = true;
  options.should_quit = hooks.should_quit;
  RunResult run = run_to_completion(child, ByteSink(), ByteSink(), options);
  CallResult result;
  result.wait_status = run.wait_status;
  result.quit = run.quit;
  return result;
}

}  // namespace fastrevert
