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

#include "core/call_output.h"
#include "core/copier.h"
#include "core/engine.h"
#include "core/errors.h"
#include "core/fd.h"
#include "core/platform.h"

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

// How much one turn of Call's loop drains before it looks at what to hand
// over: a child that writes as fast as this thread reads must not keep it
// from handing over.  A pipeful of the largest pipe.
constexpr std::uint64_t kDrainPerTurn = std::uint64_t{1} << 20;

// The capacity of a pipe that was never enlarged.
constexpr std::uint64_t kDefaultPipeCapacity = 65536;

// One run_call() with its stdout a pipe.  Whatever path the output takes,
// it goes through output_, which alone decides what a quit keeps.
class Call {
 public:
  Call(Child& child, std::uint64_t chunk, const CallHooks& hooks)
      : child_(child),
        step_(chunk),
        hooks_(hooks),
        output_(hooks, chunk, hooks.cut, hooks.string_limit) {}

  CallResult run();

 private:
  // What the pipe looked like when watch() stopped watching it.
  struct PipeState {
    // The child exited, or closed its end of the pipe: what waits may be
    // all there is (after an exit, something it started may still write).
    bool over = false;
    std::size_t waiting = 0;  // Bytes waiting in it.
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
  // without a pidfd), at most TICK_MS for Wait::exit and quit_poll_ms
  // otherwise.
  // Returns false on a quit.
  bool wait_for_more(Wait wait, int tick_ms);
  // Whether the pipe has no writer left, so that what it holds is all
  // there will be.
  bool writers_gone();
  // Reads what the pipe holds now; returns whether that reached its end
  // (no writer is left).
  bool read_waiting();
  // Reads and counts whatever the caller left in the pipe, to end of file.
  void drain_after_caller();
  // Reads the pipe on this thread until end of file, a quit, or the child
  // shows it writes faster than the caller inserts (then copy_rest() goes
  // on), handing whole lines over as they come when streaming.
  void read_on_this_thread();
  // Copies the rest on a MemfdCopier thread, handing ranges over as they
  // come.
  void copy_rest();
  bool should_quit() const { return hooks_.should_quit && hooks_.should_quit(); }
  // A quit: what was read, and what waits in the pipe, is handed over up
  // to the last whole character, as stock has inserted what it read when
  // the quit comes and keeps it; then the child gets SIGINT and a second
  // of grace before SIGKILL, and is reaped, without waiting for a pipe a
  // grandchild may hold.
  CallResult quit_now();
  CallResult finish();

  Child& child_;
  const std::uint64_t step_;
  const CallHooks& hooks_;
  CallOutput output_;
  bool eof_ = false;
  bool quit_ = false;
  // The child has exited (its pidfd said so); its pipe may still be open.
  bool exited_ = false;
  // The pipe has no writer left: what it holds is all there will be,
  // though the child may not have exited yet.
  bool hung_up_ = false;
  bool copier_used_ = false;
};

CallResult Call::quit_now() {
  if (!eof_) {
    // What the child wrote before the quit, stock would have read: what
    // waits now, in one read, not what a child still writing adds.
    int waiting = 0;
    if (ioctl(child_.stdout_fd, FIONREAD, &waiting) == 0 && waiting > 0) {
      std::string bytes(static_cast<std::size_t>(waiting), '\0');
      ssize_t got = read(child_.stdout_fd, bytes.data(), bytes.size());
      if (got > 0) output_.take(bytes.data(), static_cast<std::size_t>(got));
    }
  }
  output_.hand_on_quit();
  // The quit that brought the call here, then any other the user asks for.
  bool first = true;
  bool quit = false;
  CallResult result;
  result.wait_status = reap_with_quit(
      child_, [this, &first] { return std::exchange(first, false) || should_quit(); }, true, quit,
      hooks_.quit_poll_ms);
  result.quit = true;
  result.bytes = output_.read();
  result.copier_used = copier_used_;
  return result;
}

CallResult Call::finish() {
  CallResult result;
  result.bytes = output_.read();
  result.copier_used = copier_used_;
  result.wait_status =
      reap_with_quit(child_, hooks_.should_quit, true, result.quit, hooks_.quit_poll_ms);
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
    int timeout =
        std::min(wait == Wait::exit_or_pipe ? kLongestTickMs : tick_ms, hooks_.quit_poll_ms);
    int ready = wait == Wait::exit_or_pipe ? poll(&fd, 1, timeout) : poll(nullptr, 0, timeout);
    if (ready < 0 && errno != EINTR) throw_errno("poll");
    if (ready > 0 && (fd.revents & POLLHUP)) hung_up_ = true;
    if (exited_unreaped(child_.pid)) exited_ = true;
    return !should_quit();
  }
  // The child's exit first, then the pipe, so that an exit is never missed.
  pollfd fds[2] = {{child_.pidfd, POLLIN, 0}, {child_.stdout_fd, POLLIN, 0}};
  pollfd* first = wait == Wait::pipe ? &fds[1] : &fds[0];
  nfds_t count = wait == Wait::exit_or_pipe ? 2 : 1;
  int timeout = wait == Wait::exit ? std::min(tick_ms, hooks_.quit_poll_ms) : hooks_.quit_poll_ms;
  int ready = poll(first, count, timeout);
  if (ready < 0 && errno != EINTR) throw_errno("poll");
  if (wait != Wait::pipe && ready > 0 && fds[0].revents) exited_ = true;
  if (ready > 0 && (fds[1].revents & POLLHUP)) hung_up_ = true;
  return !should_quit();
}

bool Call::writers_gone() {
  if (!hung_up_) {
    pollfd fd = {child_.stdout_fd, POLLIN, 0};
    if (poll(&fd, 1, 0) > 0 && (fd.revents & POLLHUP)) hung_up_ = true;
  }
  return hung_up_;
}

Call::PipeState Call::watch() {
  PipeState state;
  std::size_t capacity = kDefaultPipeCapacity;
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
      if (std::size_t size = pipe_capacity(child_.stdout_fd)) capacity = size;
    }
    // A pipe is full once its pages are, which small writes can make it
    // with far fewer bytes than its capacity: a pipe holding a good part
    // of its capacity that stopped filling has a child waiting on it,
    // which this thread must read for.
    if (state.waiting >= capacity || (!got_more && state.waiting >= capacity / 4)) return state;
    // A child that went quiet with output written has it read now, as
    // stock would have read it.
    if (!got_more && state.waiting > 0 && tick_ms == kLongestTickMs) return state;
    // More than a string's worth: the output may go on for a while, and
    // the child must not wait on a full pipe while this thread waits.
    if (!grown && state.waiting > hooks_.string_limit) {
      grown = true;
      if (std::size_t size = grow_pipe(child_.stdout_fd, pipe_max_size())) capacity = size;
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
      output_.take(buffer, static_cast<std::size_t>(got));
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
  // The pipe has no writer left, so this ends at what it holds.
  char buffer[65536];
  for (;;) {
    ssize_t got = read(child_.stdout_fd, buffer, sizeof buffer);
    if (got > 0) {
      output_.read_by_caller(static_cast<std::uint64_t>(got));
    } else if (got == 0 || errno != EINTR) {
      return;
    }
  }
}

void Call::read_on_this_thread() {
  // Most children write little and end soon, and for them a copy thread
  // would cost more than the copy: this thread reads, and between reads
  // hands over what has arrived, while the child writes on into the pipe.
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
        output_.take(buffer, static_cast<std::size_t>(got));
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
    // that the child writes on while this thread hands over.
    if (!pipe_grown && output_.read() > kDefaultPipeCapacity) {
      pipe_grown = true;
      if (std::size_t grown = grow_pipe(child_.stdout_fd, pipe_max_size())) {
        pipe_capacity = grown;
      }
    }
    if (eof_) continue;
    // Whole lines that a child gone quiet left are handed over too, as
    // stock would have inserted them.
    std::uint64_t handed = output_.handed();
    output_.hand_lines(drained == 0 && tick_ms == kLongestTickMs);
    if (output_.handed() != handed && should_quit()) {
      quit_ = true;
      return;
    }
    // A turn that found the pipe full after a hand-over means the child
    // was waiting on Emacs: past the threshold, a copy thread drains the
    // pipe while this thread hands over.
    if (step_ > 0 && output_.read() >= hooks_.copier_threshold &&
        (drained >= pipe_capacity / 4 || hooks_.copier_threshold == 0)) {
      return;
    }
  }
}

void Call::copy_rest() {
  MemfdCopier capture(child_.stdout_fd, output_.spill(), output_.read());
  copier_used_ = true;
  // The output gives back the memory of what it hands over through the
  // copy thread while that runs, and never after.
  struct Attached {
    CallOutput& output;
    ~Attached() { output.set_copier(nullptr); }
  } attached{output_};
  output_.set_copier(&capture);
  output_.hand_lines(true);
  bool done = false;
  while (!done) {
    output_.copied_to(
        capture.wait(output_.read() + step_, std::chrono::milliseconds(hooks_.quit_poll_ms), done));
    if (should_quit()) {
      output_.set_copier(nullptr);
      capture.stop();
      // What the copy thread wrote before it stopped counts too.
      output_.copied_to(capture.wait(0, std::chrono::milliseconds(0), done));
      quit_ = true;
      return;
    }
    if (!done) output_.hand_lines(false);
  }
  if (int error = capture.error()) throw SystemError(error, "read", "process output");
  // The copy thread is stopped only once the last range is handed over, so
  // that giving back the memory of the ranges before runs meanwhile.
  output_.hand_rest();
  eof_ = true;
}

CallResult Call::run() {
  KillOnUnwind cleanup{child_};
  // A caller that wants every line as it comes (a CHUNK below a string's
  // worth) gets them as they are read; any other may read the pipe itself
  // once its writers are gone.
  if (hooks_.insert_pipe && (step_ == 0 || step_ >= hooks_.string_limit)) {
    PipeState seen = watch();
    if (quit_) return quit_now();
    // A string's worth from a child that exited or closed the pipe is read
    // here.  Its end is then most often the pipe's, and it goes over as a
    // string; else something the child started still holds the pipe, and
    // this thread reads on.
    bool small = seen.over && seen.waiting <= hooks_.string_limit;
    if (small && read_waiting()) {
      output_.hand_rest();
      return finish();
    }
    // A pipe with no writer left holds all the output there will be: the
    // caller reads it straight into its buffer, nothing copied on the way.
    // That read is bounded by the pipe's capacity, so the caller can keep
    // a quit out of it and lose nothing.  A pipe that still has a writer
    // is read here, where a quit keeps what was read.
    if (!small && seen.over && writers_gone()) {
      output_.read_by_caller(hooks_.insert_pipe(child_.stdout_fd));
      // The caller reads to end of file.  Should it stop short, the rest
      // is drained and counted.
      drain_after_caller();
      eof_ = true;
      return finish();
    }
  }
  read_on_this_thread();
  if (quit_) return quit_now();
  if (!eof_) {
    copy_rest();
    if (quit_) return quit_now();
  }
  output_.hand_rest();
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

CallResult run_call(Child& child, std::uint64_t chunk, const CallHooks& hooks) {
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
