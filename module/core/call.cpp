#include "core/call.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
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
#include "core/find_last.h"
#include "core/platform.h"
#include "core/spill.h"

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

// The end of the longest prefix of MEMFD[FROM, TO) that END_IN accepts, or
// FROM when there is none.  END_IN takes a window of the bytes and returns
// the end of the longest prefix of it that it accepts, or 0.
template <typename EndIn>
std::uint64_t boundary_in(int memfd, std::uint64_t from, std::uint64_t to, EndIn end_in) {
  constexpr std::uint64_t kWindow = 65536;
  char window[kWindow];
  std::uint64_t end = to;
  while (end > from) {
    std::uint64_t start = end - from > kWindow ? end - kWindow : from;
    ssize_t got = pread(memfd, window, end - start, static_cast<off_t>(start));
    if (got <= 0) return from;
    if (std::size_t cut = end_in(std::string_view(window, static_cast<std::size_t>(got)))) {
      return start + cut;
    }
    end = start;
  }
  return from;
}

// The end of the longest prefix of MEMFD[FROM, TO) that ends in a newline,
// or FROM when there is none.  A newline is a character boundary in every
// coding system the caller streams with (ASCII-compatible ones), and never
// splits a CRLF.
std::uint64_t line_boundary(int memfd, std::uint64_t from, std::uint64_t to) {
  return boundary_in(memfd, from, to, [](std::string_view bytes) -> std::size_t {
    const char* newline = find_last(bytes.data(), '\n', bytes.size());
    return newline ? static_cast<std::size_t>(newline - bytes.data()) + 1 : 0;
  });
}

// Whether a cut right after BYTE is a character boundary in every coding
// system the caller streams with (ASCII-compatible ones: UTF-8, single-byte
// charsets, Shift-JIS, Big5, GB18030).  A byte below 0x80 never starts a
// longer character in them, so one ends there, except an ASCII digit, which
// may be the second byte of a four-byte GB18030 character, and a carriage
// return, which may be half of a CRLF.
bool ends_a_character(unsigned char byte) {
  return byte < 0x80 && byte != '\r' && (byte < '0' || byte > '9');
}

// The end of the longest prefix of BYTES that ends_a_character() ends, or 0.
std::size_t character_boundary(std::string_view bytes) {
  for (std::size_t end = bytes.size(); end > 0; --end) {
    if (ends_a_character(static_cast<unsigned char>(bytes[end - 1]))) return end;
  }
  return 0;
}

// The same for bytes [FROM, TO) of MEMFD: FROM when no byte ends a character.
std::uint64_t character_boundary(int memfd, std::uint64_t from, std::uint64_t to) {
  return boundary_in(memfd, from, to,
                     [](std::string_view bytes) { return character_boundary(bytes); });
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

// How much one turn of Call's loop drains before it looks at what to insert:
// a child that writes as fast as this thread reads must not keep it from
// inserting.  A pipeful of the largest pipe.
constexpr std::uint64_t kDrainPerTurn = std::uint64_t{1} << 20;

// The capacity of a pipe that was never enlarged.
constexpr std::uint64_t kDefaultPipeCapacity = 65536;

// One run_call() with its stdout a pipe.
class Call {
 public:
  Call(Child& child, std::uint64_t chunk, const CallHooks& hooks)
      : child_(child), step_(chunk), hooks_(hooks) {}

  CallResult run();

 private:
  // What the pipe looked like when watch() stopped watching it.
  struct PipeState {
    // The child exited, or closed its end of the pipe: what waits may be
    // all there is (after an exit, something it started may still write).
    bool over = false;
    bool full = false;         // The child waits on the pipe, or soon will.
    bool quiet = false;        // Output waits, and the child stopped writing.
    std::size_t waiting = 0;   // Bytes waiting in it.
    std::size_t capacity = 0;  // What it holds when full.
  };
  // Waits, reading nothing, until the child has exited, the pipe is full,
  // or the child went quiet with output written.
  PipeState watch();
  // What wait_for_more() waits on.
  enum class Wait {
    pipe,          // The pipe: bytes to read, or its end.
    exit,          // The child's exit, for at most a tick.
    exit_or_pipe,  // Whichever comes first: for the first bytes.
  };
  // Waits as WAIT says (on the pipe alone once the child has exited, or
  // without a pidfd), at most TICK_MS for Wait::exit and 50 ms otherwise.
  // Returns false on a quit.
  bool wait_for_more(Wait wait, int tick_ms);
  // Reads what the pipe holds now; returns whether that reached its end
  // (no writer is left).
  bool read_waiting();
  // Reads and counts whatever the caller left in the pipe, to end of file.
  void drain_after_caller();
  // Reads the pipe on this thread until end of file, a quit, or the child
  // shows it writes faster than the caller inserts (then copy_rest() goes
  // on), handing whole lines over as they come when streaming.
  void read_on_this_thread();
  // Takes BYTES, just read: into the string while the output fits one,
  // else into the memfd.
  void take(const char* bytes, std::size_t size);
  // Copies the rest on a MemfdCopier thread, handing ranges over as they
  // come.
  void copy_rest();
  void open_memfd();
  void insert(std::uint64_t from, std::uint64_t to);
  // Gives back the memory of what the caller has inserted, by the
  // megabyte, while this thread fills the memfd.
  void release_inserted();
  bool should_quit() const { return hooks_.should_quit && hooks_.should_quit(); }
  // On a quit while output streams, hands over what was read and not yet
  // inserted (and what waits in the pipe), up to a character boundary:
  // stock has inserted what it read when the quit comes, and keeps it.
  void keep_on_quit();
  // A quit: the child gets SIGINT and a second of grace before SIGKILL, and
  // is reaped, without waiting for a pipe a grandchild may hold.
  CallResult quit_now();
  CallResult finish();

  Child& child_;
  const std::uint64_t step_;
  const CallHooks& hooks_;
  // Up to string_limit bytes, while no memfd is needed.
  std::string head_;
  UniqueFd memfd_;
  std::uint64_t written_ = 0;
  std::uint64_t consumed_ = 0;
  // Where the last newline written so far ends (0 when none was).
  std::uint64_t line_end_ = 0;
  std::uint64_t released_ = 0;
  bool eof_ = false;
  bool quit_ = false;
  // The child has exited (its pidfd said so); its pipe may still be open.
  bool exited_ = false;
  // The pipe has no writer left: what it holds is all there will be,
  // though the child may not have exited yet.
  bool hung_up_ = false;
  bool copier_used_ = false;
  // While the copy thread runs, it gives back the memory of what the caller
  // has inserted; what is left when the call ends goes with the memfd.
  MemfdCopier* copier_ = nullptr;
};

void Call::open_memfd() {
  if (memfd_) return;
  memfd_.reset(open_spill("fastrevert-call-process"));
  if (!memfd_) throw_errno(spill_call());
  if (int error = write_all_at(memfd_.get(), head_, 0)) throw SystemError(error, "write", "memfd");
  head_ = std::string();
}

void Call::take(const char* bytes, std::size_t size) {
  std::string_view view(bytes, size);
  if (!memfd_ && head_.size() + size <= hooks_.string_limit) {
    head_.append(view);
  } else {
    open_memfd();
    if (int error = write_all_at(memfd_.get(), view, written_)) {
      throw SystemError(error, "write", "memfd");
    }
  }
  if (const char* newline = find_last(bytes, '\n', size)) {
    line_end_ = written_ + static_cast<std::uint64_t>(newline - bytes) + 1;
  }
  written_ += size;
}

void Call::insert(std::uint64_t from, std::uint64_t to) {
  open_memfd();
  hooks_.insert_range(memfd_.get(), from, to);
  consumed_ = to;
  if (copier_) copier_->release(to);
}

void Call::release_inserted() {
  constexpr std::uint64_t kReleaseStep = std::uint64_t{1} << 20;
  if (consumed_ - released_ < kReleaseStep) return;
  // A failure only leaves the memory in use until the memfd is closed.
  give_back_spilled(memfd_.get(), static_cast<off_t>(consumed_));
  released_ = consumed_;
}

void Call::keep_on_quit() {
  // An output that cannot be cut (CHUNK 0) keeps nothing: a prefix of it
  // may decode otherwise than the whole would.
  if (step_ == 0) return;
  if (!eof_) {
    // What the child wrote before the quit, stock would have read: what
    // waits now, in one read, not what a child still writing adds (which
    // read_waiting() would follow for as long as it lasts).
    int waiting = 0;
    if (ioctl(child_.stdout_fd, FIONREAD, &waiting) == 0 && waiting > 0) {
      std::string bytes(static_cast<std::size_t>(waiting), '\0');
      ssize_t got = read(child_.stdout_fd, bytes.data(), bytes.size());
      if (got > 0) take(bytes.data(), static_cast<std::size_t>(got));
    }
  }
  if (memfd_) {
    std::uint64_t cut = character_boundary(memfd_.get(), consumed_, written_);
    if (cut > consumed_ && hooks_.insert_range) insert(consumed_, cut);
  } else if (std::size_t cut = character_boundary(head_); cut > 0 && hooks_.insert_bytes) {
    hooks_.insert_bytes(std::string_view(head_).substr(0, cut));
  }
}

CallResult Call::quit_now() {
  bool first = true;
  bool quit = false;
  CallResult result;
  result.wait_status = reap_with_quit(
      child_, [&first] { return std::exchange(first, false); }, true, quit);
  result.quit = true;
  result.bytes = written_;
  result.copier_used = copier_used_;
  return result;
}

CallResult Call::finish() {
  CallResult result;
  result.bytes = written_;
  result.copier_used = copier_used_;
  result.wait_status = reap_with_quit(child_, hooks_.should_quit, true, result.quit);
  return result;
}

// While a child runs, this thread does not wait on its pipe: every write
// into a pipe wakes the reader waiting on it, and a child writing in small
// pieces would pay a wake-up, often a trip to the other CPU, for each.
// It waits on the child's exit instead, for a tick that grows while
// nothing comes, and takes what has gathered meanwhile; a pipe enlarged to
// the system's largest holds what the child writes in between.
constexpr int kFirstTickMs = 1;
constexpr int kLongestTickMs = 16;

// The size of a page of a pipe.
constexpr std::size_t kPageSize = 4096;

// A first write this short, and the tick that follows it.
constexpr std::size_t kShortOutput = 4096;
constexpr int kShortOutputTickMs = 4;

int next_tick(int tick_ms, bool got_more) {
  return got_more ? kFirstTickMs : std::min(tick_ms * 2, kLongestTickMs);
}

// Whether the child PID has exited, leaving it to be reaped: the look that
// stands in for a descriptor of its exit where there is none.
bool exited_unreaped(pid_t pid) {
  siginfo_t info;
  std::memset(&info, 0, sizeof info);
  return waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
         info.si_pid == pid;
}

bool Call::wait_for_more(Wait wait, int tick_ms) {
  if (exited_) wait = Wait::pipe;
  if (child_.pidfd < 0 && wait != Wait::pipe) {
    // Nothing tells of the exit: the wait is a tick's (or, for the first
    // bytes, until they come), and then a look at the child.
    pollfd fd = {child_.stdout_fd, POLLIN, 0};
    int ready =
        wait == Wait::exit_or_pipe ? poll(&fd, 1, kLongestTickMs) : poll(nullptr, 0, tick_ms);
    if (ready < 0 && errno != EINTR) throw_errno("poll");
    if (ready > 0 && (fd.revents & POLLHUP)) hung_up_ = true;
    if (exited_unreaped(child_.pid)) exited_ = true;
    return !should_quit();
  }
  // The child's exit first, then the pipe, so that an exit is never missed.
  pollfd fds[2] = {{child_.pidfd, POLLIN, 0}, {child_.stdout_fd, POLLIN, 0}};
  pollfd* first = wait == Wait::pipe ? &fds[1] : &fds[0];
  nfds_t count = wait == Wait::exit_or_pipe ? 2 : 1;
  int ready = poll(first, count, wait == Wait::exit ? tick_ms : 50);
  if (ready < 0 && errno != EINTR) throw_errno("poll");
  if (wait != Wait::pipe && ready > 0 && fds[0].revents) exited_ = true;
  if (ready > 0 && (fds[1].revents & POLLHUP)) hung_up_ = true;
  return !should_quit();
}

Call::PipeState Call::watch() {
  PipeState state;
  state.capacity = kDefaultPipeCapacity;
  bool capacity_known = false;
  bool grown = false;
  int tick_ms = kFirstTickMs;
  // A child just started has written nothing yet: the first look at the
  // pipe comes after the first wait.
  if (!wait_for_more(Wait::exit_or_pipe, tick_ms)) {
    quit_ = true;
    return state;
  }
  for (;;) {
    int waiting = 0;
    if (ioctl(child_.stdout_fd, FIONREAD, &waiting) < 0) throw_errno("ioctl", "FIONREAD");
    bool got_more = static_cast<std::size_t>(waiting) != state.waiting;
    state.waiting = static_cast<std::size_t>(waiting);
    // Once the child has exited, a read tells whether the pipe is closed
    // too (run() makes it), which saves a look at the pipe per wait.  A
    // pipe without a writer ends the watch as an exit does: its end is
    // near, and a child that closed it is waited for without spinning on
    // a hang-up that every poll reports at once (on a busy CPU that spin
    // keeps the exiting child from running).
    if (exited_ || hung_up_) {
      state.over = true;
      return state;
    }
    // A page's worth or more may be near a full pipe: what it holds when
    // full matters from here on.
    if (!capacity_known && state.waiting >= kPageSize) {
      capacity_known = true;
      std::size_t capacity = pipe_capacity(child_.stdout_fd);
      if (capacity > 0) state.capacity = capacity;
    }
    // A pipe is full once its pages are, which small writes can make it
    // with far fewer bytes than its capacity: a pipe holding a good part
    // of its capacity that stopped filling has a child waiting on it.
    if (state.waiting >= state.capacity || (!got_more && state.waiting >= state.capacity / 4)) {
      state.full = true;
      return state;
    }
    // A child that went quiet with output written has it read now, as
    // stock would have read it: a quit while it stays quiet leaves that
    // output in the buffer.
    if (!got_more && state.waiting > 0 && tick_ms == kLongestTickMs) {
      state.quiet = true;
      return state;
    }
    // More than a string's worth: the output may go on for a while, and
    // the child must not wait on a full pipe while this thread waits.
    if (!grown && state.waiting > hooks_.string_limit) {
      grown = true;
      if (std::size_t size = grow_pipe(child_.stdout_fd, pipe_max_size())) state.capacity = size;
    }
    tick_ms = next_tick(tick_ms, got_more);
    // Less than a stdio buffer's worth is most often a short output's
    // last write before the exit: the next wake-up is then that exit.  A
    // child that goes on writing fills at most a pipe's worth meanwhile.
    if (got_more && state.waiting < kShortOutput) tick_ms = kShortOutputTickMs;
    // Until the first bytes arrive, they or the exit end the wait: a small
    // output, written just before the exit, costs one or two wake-ups.
    if (!wait_for_more(state.waiting == 0 ? Wait::exit_or_pipe : Wait::exit, tick_ms)) {
      quit_ = true;
      return state;
    }
  }
}

bool Call::read_waiting() {
  char buffer[65536];
  for (;;) {
    ssize_t got = read(child_.stdout_fd, buffer, sizeof buffer);
    if (got > 0) {
      take(buffer, static_cast<std::size_t>(got));
    } else if (got == 0) {
      eof_ = true;
      return true;
    } else if (errno == EAGAIN) {
      return false;
    } else if (errno != EINTR) {
      throw_errno("read", "process output");
    }
  }
}

void Call::drain_after_caller() {
  char buffer[65536];
  for (;;) {
    pollfd fd = {child_.stdout_fd, POLLIN, 0};
    int ready = poll(&fd, 1, 50);
    if (ready < 0 && errno != EINTR) throw_errno("poll");
    if (should_quit()) {
      quit_ = true;
      return;
    }
    if (ready <= 0) continue;
    ssize_t got = read(child_.stdout_fd, buffer, sizeof buffer);
    if (got > 0) {
      written_ += static_cast<std::uint64_t>(got);
    } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
      return;
    }
  }
}

void Call::read_on_this_thread() {
  // Most children write little and end soon, and for them a copy thread
  // would cost more than the copy: this thread reads, and between reads
  // inserts what has arrived, while the child writes on into the pipe.
  // Only a caller that wants every line at once (a step below a string's
  // worth) has this thread wait on the pipe itself.
  bool ticking = step_ == 0 || step_ >= hooks_.string_limit;
  char buffer[65536];
  std::size_t capacity = fastrevert::pipe_capacity(child_.stdout_fd);
  std::uint64_t pipe_capacity = capacity > 0 ? capacity : kDefaultPipeCapacity;
  bool pipe_grown = pipe_capacity > kDefaultPipeCapacity;
  int tick_ms = kFirstTickMs;
  bool quiet = false;
  while (!eof_) {
    if (!wait_for_more(ticking && quiet ? Wait::exit : Wait::pipe, tick_ms)) {
      quit_ = true;
      return;
    }
    std::uint64_t drained = 0;
    while (drained < kDrainPerTurn) {
      ssize_t got = read(child_.stdout_fd, buffer, sizeof buffer);
      if (got > 0) {
        take(buffer, static_cast<std::size_t>(got));
        drained += static_cast<std::uint64_t>(got);
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
    // A drain of a good part of the pipe shows a child writing faster than
    // this thread takes (a pipe fills up with fewer bytes than its
    // capacity when the writes are small): read again at once.  Anything
    // less, and the next wait is a tick.
    quiet = drained < pipe_capacity / 4;
    tick_ms = next_tick(tick_ms, drained > 0);
    // An output that outgrows one pipeful gets a pipe that holds more, so
    // that the child writes on while this thread inserts.
    if (!pipe_grown && written_ > kDefaultPipeCapacity) {
      pipe_grown = true;
      if (std::size_t grown = grow_pipe(child_.stdout_fd, pipe_max_size())) {
        pipe_capacity = grown;
      }
    }
    if (eof_ || step_ == 0) continue;
    // Whole lines that a child gone quiet left are inserted too, as stock
    // would have inserted them, so that a quit keeps them.
    bool gone_quiet = drained == 0 && tick_ms == kLongestTickMs;
    if (line_end_ > consumed_ && (line_end_ - consumed_ >= step_ || gone_quiet)) {
      insert(consumed_, line_end_);
      release_inserted();
      if (should_quit()) {
        quit_ = true;
        return;
      }
    }
    // A turn that found the pipe full after an insert means the child was
    // waiting on Emacs: past the threshold, a copy thread drains the pipe
    // while this thread inserts.
    if (written_ >= hooks_.copier_threshold &&
        (drained >= pipe_capacity / 4 || hooks_.copier_threshold == 0)) {
      return;
    }
  }
}

void Call::copy_rest() {
  MemfdCopier capture(child_.stdout_fd, memfd_.get(), written_);
  copier_ = &capture;
  copier_used_ = true;
  // Bytes before consumed_ are inserted; bytes in [consumed_, SCANNED) hold
  // no newline, so each byte is searched once however long a line is.
  if (line_end_ > consumed_) insert(consumed_, line_end_);
  std::uint64_t scanned = written_;
  bool done = false;
  while (!done) {
    written_ = capture.wait(scanned + step_, std::chrono::milliseconds(50), done);
    if (should_quit()) {
      copier_ = nullptr;
      capture.stop();
      // What the copy thread wrote before it stopped counts too.
      written_ = capture.wait(0, std::chrono::milliseconds(0), done);
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
  // A caller that wants every line as it comes (a CHUNK below a string's
  // worth) gets them through the memfd; any other may read the pipe itself.
  if (hooks_.insert_pipe && (step_ == 0 || step_ >= hooks_.string_limit)) {
    PipeState seen = watch();
    if (quit_) {
      keep_on_quit();
      return quit_now();
    }
    // A string's worth from a child that exited or closed the pipe is read
    // here.  Its end is then most often the pipe's, and it goes over as a
    // string; else something the child started still holds the pipe, and
    // this thread reads on.
    bool small = seen.over && seen.waiting <= hooks_.string_limit;
    if (small && read_waiting()) {
      if (!head_.empty()) hooks_.insert_bytes(head_);
      return finish();
    }
    // A full pipe shows a child that writes faster than anything reads:
    // when its output can be cut, it goes through the memfd, in chunks the
    // caller inserts while this thread, then a copy thread, drains the
    // pipe.  So does the output of a child gone quiet before its end: a
    // quit while it stays quiet keeps what it wrote, where a read straight
    // into the buffer keeps nothing (it ends at the pipe's end, and Emacs
    // drops what it read when a quit stops it).  Anything else, an output
    // whose child has ended or one that cannot be cut, the caller reads
    // straight into its buffer: nothing is copied on the way.
    if (!((seen.full || seen.quiet) && step_ > 0) && !small) {
#if !FASTREVERT_HAVE_PROC_SELF_FD
      // The caller opens the pipe as /dev/fd/N, a duplicate of this
      // descriptor that shares its O_NONBLOCK: its reads must wait for the
      // child, as they do where /proc/self/fd/N opens the pipe anew.  The
      // drain below polls before it reads, so it never blocks either way.
      int flags = fcntl(child_.stdout_fd, F_GETFL);
      if (flags < 0 || fcntl(child_.stdout_fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
        throw_errno("fcntl", "process output");
      }
#endif
      PipeInsert read = hooks_.insert_pipe(child_.stdout_fd);
      written_ = read.bytes;
      if (read.quit) return quit_now();
      // The caller reads to end of file.  Should it stop short, the rest
      // is drained and counted, so that a child blocked on a full pipe
      // cannot hang the wait for its exit.
      drain_after_caller();
      if (quit_) return quit_now();
      return finish();
    }
  }
  read_on_this_thread();
  if (quit_) {
    keep_on_quit();
    return quit_now();
  }
  if (eof_ && !memfd_) {
    if (!head_.empty()) hooks_.insert_bytes(head_);
    return finish();
  }
  if (!eof_) {
    copy_rest();
    if (quit_) {
      keep_on_quit();
      return quit_now();
    }
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
