#include "core/process_table.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <iterator>
#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/fd.h"
#include "core/spill.h"

namespace fastrevert {

namespace {

// Reads per poll callback before yielding to the rest of the loop, so that
// one firehose cannot starve the other streams and the command queue.
constexpr int kReadsPerWakeup = 16;

// The waitpid fallback looks again after 1 ms, doubling up to this.
constexpr std::uint64_t kMaxExitPollDelayMs = 50;

// A stream that streams (more than kPauseAfterBytes read) and whose writer
// the reader keeps catching in small pieces (a wake-up that found less than
// kPauseBelowBytes) is not polled for kPauseMs: its pipe, grown to the
// largest size allowed, holds what comes meanwhile, and the next wake-up
// reads it in a few large reads.  A writer such as grep, whose writes are 4
// to 8 KiB, then shares the processor with one wake-up of the engine per
// millisecond instead of one per write.  A child's end is still seen at
// once, through its exit descriptor.  An output told of at once (LSP,
// ProcessOutput::Config::prompt) is never paused.
constexpr std::uint64_t kPauseAfterBytes = std::uint64_t{256} << 10;
constexpr std::uint64_t kPauseBelowBytes = std::uint64_t{64} << 10;
constexpr std::uint64_t kPauseMs = 1;

// Whether a process's LSP messages are rewritten (see rewrite_lsp).
bool options_rewrite_lsp(const ProcessTable::Options& options) {
  return options.framing == Framing::lsp &&
         (options.lisp_replies || options.lisp_file_threshold > 0);
}

void check_uv(int status, const char* function) {
  if (status < 0) throw SystemError(-status, function);
}

}  // namespace

// One output pipe of a child.
struct ProcessTable::Stream {
  explicit Stream(int stream_index) : index(stream_index) {}

  // ProcessOutput::kStdout or kStderr.
  const int index;
  // The read end, or -1 once closed (or when the child has no such pipe).
  int fd = -1;
  uv_poll_t poll{};
  // Whether poll was initialized and not yet handed to uv_close.
  bool poll_open = false;
  std::unique_ptr<AdaptiveReader> reader;
  // Null for Framing::none, whose bytes go out as read.
  std::unique_ptr<Framer> framer;
  bool broken_framing_reported = false;
  // The framer's unfinished unit as the output counts it.
  std::uint64_t partial_told = 0;
  // How much of a unit that went on in pieces is still to come: the head
  // of what the framer hands over next, which is no whole unit.
  std::uint64_t cut_rest = 0;
  // Bytes read during the current callback, not yet emitted or framed.  Its
  // capacity is reused between callbacks when a framer takes the bytes, or
  // when they go to the memfd.
  std::string raw;
  // Whether the bytes go to a memfd once more than the threshold was read
  // (stdout only); bytes_read counts what was read so far.
  bool memfd_wanted = false;
  std::uint64_t bytes_read = 0;
  // The file that receives the bytes instead of the output, or -1;
  // memfd_size is how much of it is written.
  int memfd = -1;
  std::uint64_t memfd_size = 0;
  // The last bytes of the stream so far (up to 4, the newest last), which
  // tell the output whether the memfd ends inside a character.
  char memfd_tail[4] = {0, 0, 0, 0};
  std::uint8_t memfd_tail_size = 0;
  // The memfd is filled with splice(2), which moves the bytes from the pipe
  // with one copy, until a splice fails for another reason than an empty
  // pipe; read and pwrite take over then.
  bool splice_failed = false;
  bool pipe_grown = false;
  // Reading was stopped by set_reading(), or while the backlog is full; the
  // poll runs when neither is set.
  bool reading_stopped = false;
  bool throttled = false;
  // Not polled until the pause timer runs (see kPauseMs).
  bool paused = false;
};

// A child and everything the table holds for it.  Owned by processes_ while
// live and by retiring_ afterwards; freed only once every handle's close
// callback has run, because libuv owns a handle's memory until then.
struct ProcessTable::Process {
  ProcessTable* table = nullptr;
  std::uint64_t id = 0;
  Options options;
  pid_t pid = -1;

  Stream out{ProcessOutput::kStdout};
  Stream err{ProcessOutput::kStderr};
  // Shared with the consumer, and with every table the child moves to.
  std::shared_ptr<ProcessOutput> output;

  int stdin_fd = -1;
  uv_poll_t stdin_poll{};
  bool stdin_poll_open = false;
  bool stdin_polling = false;
  bool stdin_pipe_grown = false;
  // Bytes waiting for the child to read; the front string is written from
  // stdin_front_offset on.
  std::deque<std::string> stdin_queue;
  std::size_t stdin_front_offset = 0;
  std::size_t stdin_queued_bytes = 0;
  bool stdin_close_requested = false;

  // Readable once the child has exited (see core/child_exit.h), or -1.
  int exit_fd = -1;
  uv_poll_t exit_poll{};
  bool exit_poll_open = false;
  uv_timer_t exit_timer{};
  bool exit_timer_open = false;
  std::uint64_t exit_poll_delay_ms = 1;

  bool reaped = false;
  int wait_status = -1;
  // The exit record was emitted (or the process was removed): it is done.
  bool finished = false;
  // remove() was called: emit nothing more.
  bool removed = false;
  // Moved to retiring_.
  bool retired = false;
  // Handles initialized and whose close callback has not run yet.
  int open_handles = 0;
  // Counted in Stats::processes (once, whichever table adopts it first).
  bool counted = false;
  // Given up after a failure; its process_error record is out.
  bool failed = false;
  // When the child was spawned (near enough: when its Process was made).
  ProcessTable::Clock::time_point born = ProcessTable::Clock::now();
};

ProcessTable::ProcessTable(Engine& engine)
    : ProcessTable(engine, engine.loop(), Engine::Wake::yes) {}

ProcessTable::ProcessTable(Engine& engine, uv_loop_t* loop, Engine::Wake wake)
    : engine_(engine), loop_(loop), wake_(wake), read_scratch_(std::make_shared<ReadScratch>()) {
  if (loop_) {
    check_uv(uv_timer_init(loop_, &batch_timer_), "uv_timer_init");
    batch_timer_.data = this;
    batch_timer_open_ = true;
    check_uv(uv_timer_init(loop_, &pause_timer_), "uv_timer_init");
    pause_timer_.data = this;
    pause_timer_open_ = true;
  }
}

ProcessTable::~ProcessTable() = default;

void ProcessTable::start(std::uint64_t id, const SpawnSpec& spec, const Options& options) {
  if (processes_.count(id)) throw std::invalid_argument("fastrevert: process id already in use");
  adopt(id, spawn(spec), options);
}

std::unique_ptr<ProcessTable::Process> ProcessTable::process_from_child(Child& child,
                                                                        const Options& options) {
  auto process = std::make_unique<Process>();
  process->options = options;
  process->pid = std::exchange(child.pid, -1);
  process->out.fd = std::exchange(child.stdout_fd, -1);
  process->err.fd = std::exchange(child.stderr_fd, -1);
  process->stdin_fd = std::exchange(child.stdin_fd, -1);
  process->exit_fd = std::exchange(child.pidfd, -1);
  // Descriptors with no child of ours behind them (a server that Emacs
  // started, talking through named pipes): there is nobody to wait for, and
  // waitpid must never be called on it.  The end comes with end of file.
  if (process->pid <= 0) {
    process->reaped = true;
    process->wait_status = 0;
  }
  process->out.memfd_wanted = options.stdout_to_memfd;
  process->out.splice_failed = options.memfd_without_splice;
  process->output = options.output ? options.output
                                   : std::make_shared<ProcessOutput>(ProcessOutput::Config{});
  // Only the Process holds it: the options stay light to copy.
  process->options.output.reset();
  // A stream without a pipe has nothing more to give.
  if (process->out.fd < 0) process->output->end_stream(ProcessOutput::kStdout);
  if (process->err.fd < 0) process->output->end_stream(ProcessOutput::kStderr);
  return process;
}

void ProcessTable::adopt(std::uint64_t id, Child child, const Options& options) {
  std::unique_ptr<Process> process;
  try {
    process = process_from_child(child, options);
  } catch (...) {
    kill_and_reap(child);
    throw;
  }
  install(id, std::move(process));
}

void ProcessTable::adopt(std::uint64_t id, std::unique_ptr<ProcessHandover> handover) {
  if (!handover || !handover->process_) throw std::invalid_argument("fastrevert: empty handover");
  install(id, std::move(handover->process_));
}

void ProcessTable::adopt_or_report(std::uint64_t id, std::unique_ptr<ProcessHandover> handover) {
  std::shared_ptr<ProcessOutput> output =
      handover && handover->process_ ? handover->process_->output : nullptr;
  try {
    adopt(id, std::move(handover));
  } catch (const std::exception& error) {
    // adopt() killed and reaped the child; tell its owner it is gone.
    engine_.report(RecordKind::notice, id, 0, error.what(), wake_);
    if (output) {
      output->finish(ExitStatus{});
      try {
        engine_.emit(Record{RecordKind::process_ready, id, 0, {}, output}, wake_);
      } catch (...) {
        engine_.report(RecordKind::notice, id, 0, "fastrevert: a process's end was lost", wake_);
      }
    }
  }
}

void ProcessTable::install(std::uint64_t id, std::unique_ptr<Process> owned) {
  if (shutting_down_) {
    discard(*owned);
    throw std::logic_error("fastrevert: the process table is shutting down");
  }
  if (processes_.count(id)) {
    discard(*owned);
    throw std::invalid_argument("fastrevert: process id already in use");
  }
  // The slot is made before the Process moves in, so that a failed
  // allocation still leaves it here to discard.
  try {
    processes_.emplace(id, nullptr);
  } catch (...) {
    discard(*owned);
    throw;
  }
  Process& process = *owned;
  processes_[id] = std::move(owned);
  process.table = this;
  process.id = id;
  if (!process.counted) {
    process.counted = true;
    engine_.stats().processes.fetch_add(1, std::memory_order_relaxed);
  }

  try {
    for (Stream* stream : {&process.out, &process.err}) {
      if (stream->fd < 0) continue;
      Framing framing =
          stream == &process.out ? process.options.framing : process.options.stderr_framing;
      if (!stream->reader) {
        stream->reader = std::make_unique<AdaptiveReader>(
            process.options.initial_read_size, process.options.max_read_size, read_scratch_);
      } else {
        // A child handed over from another table brings a reader that
        // reads into that table's scratch, which that table's thread goes
        // on using for its other children: two threads would then read
        // into the same memory, and each copy out what the other wrote.
        // From now on it reads into this table's.
        stream->reader->use_scratch(read_scratch_);
      }
      if (!stream->framer && framing != Framing::none) stream->framer = make_framer(framing);
      if (!loop_) continue;
      check_uv(uv_poll_init(loop_, &stream->poll, stream->fd), "uv_poll_init");
      stream->poll.data = &process;
      stream->poll_open = true;
      ++process.open_handles;
      check_uv(uv_poll_start(&stream->poll, UV_READABLE, &ProcessTable::on_stream_readable),
               "uv_poll_start");
    }
    if (process.reaped) {
      close_fd(process.exit_fd);
    } else if (!loop_) {
      // Watched by the table's thread; see watched() and serve().
    } else if (process.exit_fd >= 0 && !process.options.poll_exit_with_waitpid) {
      check_uv(uv_poll_init(loop_, &process.exit_poll, process.exit_fd), "uv_poll_init");
      process.exit_poll.data = &process;
      process.exit_poll_open = true;
      ++process.open_handles;
      check_uv(uv_poll_start(&process.exit_poll, UV_READABLE, &ProcessTable::on_exit_readable),
               "uv_poll_start");
    } else {
      close_fd(process.exit_fd);
      check_uv(uv_timer_init(loop_, &process.exit_timer), "uv_timer_init");
      process.exit_timer.data = &process;
      process.exit_timer_open = true;
      ++process.open_handles;
      check_uv(uv_timer_start(&process.exit_timer, &ProcessTable::on_exit_timer,
                              process.exit_poll_delay_ms, 0),
               "uv_timer_start");
    }
  } catch (...) {
    // Leave nothing behind: no child, no zombie, no descriptor, no handle.
    process.removed = true;
    if (!process.reaped) {
      kill_and_reap(process.pid, process.options.signal_process_group);
      process.reaped = true;
    }
    retire(process);
    free_if_closed(process);
    throw;
  }
  // A handed-over child may bring input still to write, or a close of its
  // stdin still to do.
  if (!process.stdin_queue.empty()) {
    write_queued_stdin(process);
  } else if (process.stdin_close_requested) {
    close_stdin_now(process);
  }
  // Or it may be finished but for its end, or bring output its consumer
  // was not told of yet.
  maybe_finish(process);
  if (!process.finished) notify(process);
}

void ProcessTable::move_state(Process& from, Process& to) noexcept {
  to.options = from.options;
  to.output = from.output;
  to.pid = std::exchange(from.pid, -1);
  to.counted = from.counted;
  to.born = from.born;
  auto move_stream = [](Stream& source, Stream& target) {
    target.fd = std::exchange(source.fd, -1);
    target.reader = std::move(source.reader);
    target.framer = std::move(source.framer);
    target.broken_framing_reported = source.broken_framing_reported;
    target.partial_told = source.partial_told;
    target.cut_rest = source.cut_rest;
    target.raw = std::move(source.raw);
    source.raw.clear();
    target.memfd_wanted = source.memfd_wanted;
    target.bytes_read = source.bytes_read;
    target.memfd = std::exchange(source.memfd, -1);
    target.memfd_size = source.memfd_size;
    std::memcpy(target.memfd_tail, source.memfd_tail, sizeof target.memfd_tail);
    target.memfd_tail_size = source.memfd_tail_size;
    target.splice_failed = source.splice_failed;
    target.pipe_grown = source.pipe_grown;
  };
  move_stream(from.out, to.out);
  move_stream(from.err, to.err);
  to.stdin_fd = std::exchange(from.stdin_fd, -1);
  to.stdin_pipe_grown = from.stdin_pipe_grown;
  to.stdin_queue = std::move(from.stdin_queue);
  from.stdin_queue.clear();
  to.stdin_front_offset = std::exchange(from.stdin_front_offset, 0);
  to.stdin_queued_bytes = std::exchange(from.stdin_queued_bytes, 0);
  to.stdin_close_requested = from.stdin_close_requested;
  to.exit_fd = std::exchange(from.exit_fd, -1);
  to.exit_poll_delay_ms = from.exit_poll_delay_ms;
  to.reaped = from.reaped;
  to.wait_status = from.wait_status;
}

void ProcessTable::discard(Process& process) noexcept {
  if (!process.reaped && process.pid > 0) {
    kill_and_reap(process.pid, process.options.signal_process_group);
    process.reaped = true;
  }
  for (int* fd : {&process.out.fd, &process.err.fd, &process.out.memfd, &process.err.memfd,
                  &process.stdin_fd, &process.exit_fd}) {
    close_fd(*fd);
  }
  if (process.options.direct_input) process.options.direct_input->close();
}

std::unique_ptr<ProcessHandover> ProcessTable::hand_over(std::uint64_t id) {
  auto found = processes_.find(id);
  if (found == processes_.end()) return nullptr;
  Process& old = *found->second;
  // The next table polls the streams from the start.
  old.out.paused = false;
  old.err.paused = false;
  std::unique_ptr<ProcessHandover> handover(new ProcessHandover());
  handover->process_ = std::make_unique<Process>();
  move_state(old, *handover->process_);
  // What is left here is handles, closed now; the child is no longer this
  // table's to signal, reap or report.
  old.removed = true;
  old.reaped = true;
  stop_exit_watch(old);
  retire(old);
  free_if_closed(old);
  return handover;
}

ProcessTable::Clock::time_point ProcessTable::watched(
    std::vector<pollfd>& fds, std::vector<std::pair<std::uint64_t, Watch>>& owners,
    Clock::time_point now, Clock::duration quiet) const {
  Clock::time_point next = Clock::time_point::max();
  for (const auto& entry : processes_) {
    const Process& process = *entry.second;
    auto add = [&](int fd, Watch what) {
      if (fd < 0) return;
      fds.push_back(pollfd{fd, POLLIN, 0});
      owners.emplace_back(entry.first, what);
    };
    bool exit_watched = !process.reaped && process.exit_fd >= 0;
    if (exit_watched) add(process.exit_fd, Watch::exit);
    Clock::time_point of_age = process.born + quiet;
    if (exit_watched && now < of_age) {
      next = std::min(next, of_age);
      continue;
    }
    add(process.out.fd, Watch::out);
    add(process.err.fd, Watch::err);
  }
  return next;
}

void ProcessTable::serve(const std::vector<pollfd>& fds,
                         const std::vector<std::pair<std::uint64_t, Watch>>& owners) {
  for (std::size_t i = 0; i < fds.size() && i < owners.size(); ++i) {
    if (fds[i].revents == 0) continue;
    // A child may have finished, and been freed, while an earlier event
    // was served; and a descriptor it closed may have been reused.
    auto found = processes_.find(owners[i].first);
    if (found == processes_.end()) continue;
    Process& process = *found->second;
    guarded(process, [&] {
      switch (owners[i].second) {
        case Watch::out:
          if (process.out.fd == fds[i].fd) read_stream(process, process.out);
          break;
        case Watch::err:
          if (process.err.fd == fds[i].fd) read_stream(process, process.err);
          break;
        case Watch::exit:
          if (process.exit_fd != fds[i].fd) break;
          try_reap(process);
          // What the child wrote is all in its pipes now, unless it left
          // them to a child of its own; the reads end where they are empty.
          for (Stream* stream : {&process.out, &process.err}) {
            if (!process.finished && stream->fd >= 0) read_stream(process, *stream);
          }
          break;
      }
    });
  }
  // Without an exit descriptor, an exit is only seen by looking.
  std::vector<std::uint64_t> blind;
  for (const auto& entry : processes_) {
    if (entry.second->exit_fd < 0 && !entry.second->reaped) blind.push_back(entry.first);
  }
  for (std::uint64_t id : blind) {
    auto found = processes_.find(id);
    if (found != processes_.end()) {
      Process& process = *found->second;
      guarded(process, [&] { try_reap(process); });
    }
  }
  // Without handles, nothing else frees a finished child; here no
  // reference to one is held any more.
  for (auto it = retiring_.begin(); it != retiring_.end();) {
    it = it->second->open_handles == 0 ? retiring_.erase(it) : std::next(it);
  }
}

std::uint64_t ProcessTable::bytes_read(std::uint64_t id) const {
  auto found = processes_.find(id);
  if (found == processes_.end()) return 0;
  return found->second->out.bytes_read + found->second->err.bytes_read;
}

bool ProcessTable::streams(std::uint64_t bytes) const {
  for (const auto& entry : processes_) {
    if (entry.second->out.bytes_read + entry.second->err.bytes_read > bytes) return true;
  }
  return false;
}

std::vector<std::uint64_t> ProcessTable::ids() const {
  std::vector<std::uint64_t> all;
  all.reserve(processes_.size());
  for (const auto& entry : processes_) all.push_back(entry.first);
  return all;
}

ProcessHandover::ProcessHandover(Child child, const ProcessTable::Options& options) {
  try {
    process_ = ProcessTable::process_from_child(child, options);
  } catch (...) {
    kill_and_reap(child);
    throw;
  }
}

ProcessHandover::~ProcessHandover() {
  if (process_) ProcessTable::discard(*process_);
}

bool ProcessTable::write_stdin(std::uint64_t id, std::string data) {
  auto found = processes_.find(id);
  if (found == processes_.end()) return false;
  Process& process = *found->second;
  if (process.stdin_fd < 0 || process.stdin_close_requested) return false;
  if (data.empty()) return true;
  // A big write means a feeding child; a larger pipe means fewer wake-ups.
  if (!process.stdin_pipe_grown && data.size() > 65536) {
    grow_pipe(process.stdin_fd, pipe_max_size());
    process.stdin_pipe_grown = true;
  }
  process.stdin_queued_bytes += data.size();
  process.stdin_queue.push_back(std::move(data));
  write_queued_stdin(process);
  return true;
}

bool ProcessTable::close_stdin(std::uint64_t id) {
  auto found = processes_.find(id);
  if (found == processes_.end()) return false;
  Process& process = *found->second;
  process.stdin_close_requested = true;
  if (process.stdin_queue.empty()) close_stdin_now(process);
  return true;
}

bool ProcessTable::signal(std::uint64_t id, int signal_number) {
  auto found = processes_.find(id);
  if (found == processes_.end() || found->second->reaped) return false;
  send_signal(*found->second, signal_number);
  return true;
}

bool ProcessTable::set_reading(std::uint64_t id, bool reading) {
  auto found = processes_.find(id);
  if (found == processes_.end()) return false;
  for (Stream* stream : {&found->second->out, &found->second->err}) {
    stream->reading_stopped = !reading;
    update_polling(*stream);
  }
  return true;
}

void ProcessTable::update_polling(Stream& stream) {
  if (!stream.poll_open) return;
  if (stream.reading_stopped || stream.throttled || stream.paused) {
    uv_poll_stop(&stream.poll);
  } else {
    uv_poll_start(&stream.poll, UV_READABLE, &ProcessTable::on_stream_readable);
  }
}

bool ProcessTable::throttle(Process& process, Stream& stream) {
  if (!loop_ || process.output->room() > 0) return false;
  stream.throttled = true;
  update_polling(stream);
  process.output->note_throttled();
  return true;
}

bool ProcessTable::resume(std::uint64_t id) {
  auto found = processes_.find(id);
  if (found == processes_.end()) return false;
  for (Stream* stream : {&found->second->out, &found->second->err}) {
    if (!stream->throttled) continue;
    stream->throttled = false;
    update_polling(*stream);
  }
  return true;
}

void ProcessTable::notify(Process& process) {
  if (process.removed) return;
  Clock::time_point now = Clock::now();
  Clock::time_point due;
  switch (process.output->notify_decision(now, due)) {
    case ProcessOutput::Notify::none:
      return;
    case ProcessOutput::Notify::later:
      if (loop_) {
        deferred_.emplace_back(due, process.id);
        if (due < batch_timer_due_) {
          batch_timer_due_ = due;
          auto delay = std::chrono::ceil<std::chrono::milliseconds>(due - now).count();
          uv_timer_start(&batch_timer_, &ProcessTable::on_batch_timer,
                         static_cast<std::uint64_t>(std::max<long long>(delay, 1)), 0);
        }
        return;
      }
      // Without a loop nothing would come back to it: told now.
      if (!process.output->notify_due(due)) return;
      break;
    case ProcessOutput::Notify::now:
      break;
  }
  engine_.emit(Record{RecordKind::process_ready, process.id, 0, {}, process.output}, wake_);
}

void ProcessTable::pause(Process& process, Stream& stream) {
  if (!loop_ || !pause_timer_open_ || stream.paused || stream.fd < 0) return;
  // Requests and replies (LSP) are told at once: a pause would add to a
  // round trip what it saves a stream.
  if (process.output->config().prompt) return;
  if (!stream.pipe_grown) {
    stream.pipe_grown = true;
    grow_pipe(stream.fd, pipe_max_size());
  }
  stream.paused = true;
  engine_.stats().read_pauses.fetch_add(1, std::memory_order_relaxed);
  update_polling(stream);
  if (paused_.empty()) uv_timer_start(&pause_timer_, &ProcessTable::on_pause_timer, kPauseMs, 0);
  paused_.push_back(process.id);
}

void ProcessTable::on_pause_timer(uv_timer_t* handle) {
  auto& table = *static_cast<ProcessTable*>(handle->data);
  std::vector<std::uint64_t> ids;
  ids.swap(table.paused_);
  for (std::uint64_t id : ids) {
    auto found = table.processes_.find(id);
    if (found == table.processes_.end()) continue;
    for (Stream* stream : {&found->second->out, &found->second->err}) {
      if (!stream->paused) continue;
      stream->paused = false;
      table.update_polling(*stream);
    }
  }
}

void ProcessTable::on_batch_timer(uv_timer_t* handle) {
  static_cast<ProcessTable*>(handle->data)->notify_due();
}

void ProcessTable::notify_due() {
  batch_timer_due_ = Clock::time_point::max();
  Clock::time_point now = Clock::now();
  std::vector<std::pair<Clock::time_point, std::uint64_t>> later;
  std::vector<std::pair<Clock::time_point, std::uint64_t>> due;
  due.swap(deferred_);
  for (const auto& [when, id] : due) {
    auto found = processes_.find(id);
    if (found == processes_.end()) continue;
    Process& process = *found->second;
    if (when > now) {
      later.emplace_back(when, id);
      continue;
    }
    if (!process.output->notify_due(now)) continue;
    try {
      engine_.emit(Record{RecordKind::process_ready, id, 0, {}, process.output}, wake_);
    } catch (...) {
      fail(process, "fastrevert: out of memory while telling Emacs of a process's output");
    }
  }
  for (const auto& entry : later) {
    deferred_.push_back(entry);
    if (entry.first < batch_timer_due_) batch_timer_due_ = entry.first;
  }
  if (batch_timer_due_ != Clock::time_point::max()) {
    auto delay = std::chrono::ceil<std::chrono::milliseconds>(batch_timer_due_ - now).count();
    uv_timer_start(&batch_timer_, &ProcessTable::on_batch_timer,
                   static_cast<std::uint64_t>(std::max<long long>(delay, 1)), 0);
  }
}

bool ProcessTable::remove(std::uint64_t id) {
  auto found = processes_.find(id);
  if (found == processes_.end()) return false;
  Process& process = *found->second;
  process.removed = true;
  if (!loop_ && !process.reaped) {
    // No exit watch will reap it later: a SIGKILLed child dies at once.
    kill_and_reap(process.pid, process.options.signal_process_group);
    process.reaped = true;
  } else if (!process.reaped) {
    send_signal(process, SIGKILL);
  }
  retire(process);
  free_if_closed(process);
  return true;
}

pid_t ProcessTable::pid(std::uint64_t id) const {
  auto found = processes_.find(id);
  return found == processes_.end() ? -1 : found->second->pid;
}

std::shared_ptr<ProcessOutput> ProcessTable::output(std::uint64_t id) const {
  auto found = processes_.find(id);
  return found == processes_.end() ? nullptr : found->second->output;
}

std::size_t ProcessTable::queued_stdin_bytes(std::uint64_t id) const {
  auto found = processes_.find(id);
  return found == processes_.end() ? 0 : found->second->stdin_queued_bytes;
}

void ProcessTable::shutdown() {
  shutting_down_ = true;
  deferred_.clear();
  if (batch_timer_open_) {
    batch_timer_open_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&batch_timer_), nullptr);
  }
  paused_.clear();
  if (pause_timer_open_) {
    pause_timer_open_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&pause_timer_), nullptr);
  }
  std::vector<Process*> all;
  for (auto& entry : processes_) all.push_back(entry.second.get());
  for (auto& entry : retiring_) all.push_back(entry.first);
  for (Process* process : all) {
    process->removed = true;
    if (!process->reaped) {
      kill_and_reap(process->pid, process->options.signal_process_group);
      process->reaped = true;
    }
    stop_exit_watch(*process);
    retire(*process);
  }
  // Every process is now retiring; each is freed by its last close callback,
  // and the destructor frees any that had no handle left to close.
}

template <typename Step>
void ProcessTable::guarded(Process& process, Step&& step) noexcept {
  try {
    step();
  } catch (const std::bad_alloc&) {
    fail(process, "fastrevert: out of memory while reading the process's output; it was killed");
  } catch (const std::exception& error) {
    fail(process, error.what());
  } catch (...) {
    fail(process, "fastrevert: unknown exception while serving the process; it was killed");
  }
}

void ProcessTable::fail(Process& process, const char* what) noexcept {
  if (!process.failed && !process.removed) {
    process.failed = true;
    process.output->fail(what);
    try {
      engine_.emit(Record{RecordKind::process_ready, process.id, 0, {}, process.output}, wake_);
    } catch (...) {
      engine_.report(RecordKind::notice, process.id, 0, what, wake_);
    }
  }
  if (!process.reaped) send_signal(process, SIGKILL);
  for (Stream* stream : {&process.out, &process.err}) {
    stream->raw.clear();
    close_stream(process, *stream);
  }
  close_stdin_now(process);
  // A child that has already exited can report its end now.
  try {
    maybe_finish(process);
  } catch (...) {
    // Its output has told its owner already.
  }
}

void ProcessTable::on_stream_readable(uv_poll_t* handle, int, int) {
  // A poll error is not acted on directly: the read that follows reports it
  // (or end of file), and the stream is closed then.
  Process& process = *static_cast<Process*>(handle->data);
  Stream& stream = handle == &process.out.poll ? process.out : process.err;
  process.table->guarded(process, [&] { process.table->read_stream(process, stream); });
}

void ProcessTable::on_stdin_writable(uv_poll_t* handle, int, int) {
  Process& process = *static_cast<Process*>(handle->data);
  process.table->guarded(process, [&] { process.table->write_queued_stdin(process); });
}

void ProcessTable::on_exit_readable(uv_poll_t* handle, int, int) {
  Process& process = *static_cast<Process*>(handle->data);
  process.table->guarded(process, [&] { process.table->try_reap(process); });
}

void ProcessTable::on_exit_timer(uv_timer_t* handle) {
  Process& process = *static_cast<Process*>(handle->data);
  process.table->guarded(process, [&] { process.table->try_reap(process); });
  if (!process.reaped && process.exit_timer_open) {
    process.exit_poll_delay_ms = std::min(process.exit_poll_delay_ms * 2, kMaxExitPollDelayMs);
    uv_timer_start(handle, &ProcessTable::on_exit_timer, process.exit_poll_delay_ms, 0);
  }
}

void ProcessTable::on_handle_closed(uv_handle_t* handle) {
  Process& process = *static_cast<Process*>(handle->data);
  --process.open_handles;
  process.table->free_if_closed(process);
}

void ProcessTable::read_stream(Process& process, Stream& stream) {
  if (process.options.test_fail_first_read) {
    process.options.test_fail_first_read = false;
    throw std::bad_alloc();
  }
  bool at_eof = false;
  bool emptied = false;
  const std::uint64_t read_before = stream.bytes_read;
  for (int reads = 0; reads < kReadsPerWakeup && !at_eof; ++reads) {
    // The backlog is full: the child waits until Emacs has caught up.  A
    // table without a loop only stops this round; the child goes to the
    // engine's table when the wait ends, and that one stops polling it.
    if (process.output->room() == 0) {
      throttle(process, stream);
      break;
    }
    // Unframed bytes bound for a memfd go there straight from the pipe, and
    // the output learns of them after every read rather than once per
    // callback, so that Emacs inserts while the next reads run.
    bool to_memfd = stream.memfd >= 0 && !stream.framer;
    if (to_memfd && !stream.splice_failed && !process.removed) {
      std::uint64_t room = process.output->room();
      int spliced = splice_to_memfd(
          process, stream,
          static_cast<std::size_t>(std::clamp<std::uint64_t>(room, 65536, kDefaultMaxReadSize)));
      if (spliced > 0) continue;
      if (spliced == 0) {
        emptied = true;
        break;
      }
      if (spliced == -1) {
        at_eof = true;
        break;
      }
    }
    ReadResult result = to_memfd ? stream.reader->read(stream.fd)
                                 : stream.reader->read_append(stream.fd, stream.raw);
    if (result.status == ReadResult::Status::data) {
      stream.bytes_read += result.bytes.size();
      engine_.stats().bytes_read.fetch_add(result.bytes.size(), std::memory_order_relaxed);
      if (to_memfd && !process.removed && !append_to_memfd(process, stream, result.bytes)) {
        stream.raw.append(result.bytes.data(), result.bytes.size());
      } else if (!to_memfd && stream.memfd_wanted) {
        start_memfd(process, stream);
      }
      // Each read goes to the output at once, where it counts towards the
      // backlog before the next read.
      deliver(process, stream, false);
    } else if (result.status == ReadResult::Status::would_block) {
      emptied = true;
      break;
    } else {
      at_eof = true;
    }
  }
  deliver(process, stream, at_eof);
  if (emptied && !process.removed) {
    std::uint64_t read_now = stream.bytes_read - read_before;
    if (read_now < kPauseBelowBytes && stream.bytes_read > kPauseAfterBytes) {
      pause(process, stream);
    }
  }
  if (at_eof) {
    close_stream(process, stream);
    // A child's output ends as it exits, so it has usually exited by the
    // time its end of file is read: reaping it now tells its end in the
    // same wake as its last output.
    if (process.out.fd < 0 && process.err.fd < 0) try_reap(process);
    maybe_finish(process);
  }
  notify(process);
}

std::string ProcessTable::rewrite_lsp(Process& process, Stream& stream, std::string units) {
  if (units.empty() || stream.framer->broken()) return units;
  const std::shared_ptr<const JsonLisp>& style = process.options.lisp_replies;
  const std::size_t threshold = process.options.lisp_file_threshold;
  // A large body goes to a file of its own, named by the process's id and
  // the output's token for it.  Where no file can be made or written, the
  // body stays in the message.
  const std::shared_ptr<ProcessOutput>& output = process.output;
  const std::uint64_t id = process.id;
  LispBodyFiler filer = [&output, id](std::string_view text, std::string& name) {
    UniqueFd file(open_spill("fastrevert-lsp-reply"));
    if (!file || write_all_at(file.get(), text, 0) != 0) return false;
    std::uint64_t token = output->add_lisp_file(std::move(file), text.size());
    name = std::to_string(id) + " " + std::to_string(token);
    return true;
  };
  auto rewrite = [&](std::string_view run) {
    if (style) return lsp_bodies_to_lisp(run, *style, threshold > 0 ? &filer : nullptr, threshold);
    return lsp_bodies_to_files(run, filer, threshold);
  };
  // The rest of a unit that went on in pieces stays as it is.
  std::size_t rest = static_cast<std::size_t>(std::min<std::uint64_t>(stream.cut_rest, units.size()));
  stream.cut_rest -= rest;
  if (rest == 0) return rewrite(units);
  std::string rewritten = units.substr(0, rest);
  rewritten += rewrite(std::string_view(units).substr(rest));
  return rewritten;
}

void ProcessTable::deliver(Process& process, Stream& stream, bool at_eof) {
  std::string chunk;
  if (!stream.framer) {
    chunk.swap(stream.raw);
  } else {
    stream.framer->append(stream.raw);
    stream.raw.clear();
    chunk = stream.framer->take();
    if (stream.index == ProcessOutput::kStdout && options_rewrite_lsp(process.options)) {
      chunk = rewrite_lsp(process, stream, std::move(chunk));
    }
    std::uint64_t unfinished = stream.framer->pending_size();
    std::uint64_t backlog = process.output->config().backlog;
    // What will wait once CHUNK is appended, this unit included.
    std::uint64_t waiting = process.output->waiting();
    std::uint64_t total = waiting - std::min(waiting, stream.partial_told) + chunk.size() + unfinished;
    if (at_eof) {
      chunk += stream.framer->flush();
    } else if (unfinished > 0 &&
               (unfinished >= backlog || (unfinished > backlog / 2 && total >= backlog))) {
      // A unit longer than the backlog cannot wait whole: it goes on in
      // pieces, which the units after it follow as usual.  So does one
      // that holds more than half a full backlog: Emacs, taking the rest,
      // could not bring it down to where reading resumes.
      std::string piece = stream.framer->take_unfinished();
      if (!piece.empty()) stream.cut_rest = stream.framer->unit_rest();
      chunk += piece;
    }
    if (stream.framer->broken() && !stream.broken_framing_reported && !process.removed) {
      stream.broken_framing_reported = true;
      engine_.emit(Record{RecordKind::notice, process.id, stream.index,
                          "fastrevert: process output framing failed (" + stream.framer->error() +
                              "); passing the rest through raw"},
                   wake_);
    }
  }
  if (process.removed) return;
  if (!chunk.empty() && !(stream.memfd >= 0 && append_to_memfd(process, stream, chunk))) {
    process.output->append(stream.index, chunk);
  }
  if (stream.framer) {
    stream.partial_told = stream.framer->pending_size();
    process.output->set_partial(stream.index, stream.partial_told);
  }
}

int ProcessTable::splice_to_memfd(Process& process, Stream& stream, std::size_t max) {
  SpliceResult spliced = splice_into(stream.fd, stream.memfd, stream.memfd_size, max);
  if (spliced.status == SpliceResult::Status::eof) return -1;
  if (spliced.status == SpliceResult::Status::would_block) return 0;
  if (spliced.status != SpliceResult::Status::moved) {
    // Anything else: let the read path find out (and report) what is wrong.
    stream.splice_failed = true;
    return -2;
  }
  std::size_t moved = spliced.moved;
  // A full pipe: a bigger one means fewer wake-ups.
  if (!stream.pipe_grown && moved >= 65536) {
    grow_pipe(stream.fd, pipe_max_size());
    stream.pipe_grown = true;
  }
  stream.bytes_read += moved;
  engine_.stats().bytes_read.fetch_add(moved, std::memory_order_relaxed);
  char tail[4];
  std::size_t want = std::min(sizeof tail, moved);
  auto end = static_cast<off_t>(stream.memfd_size + moved);
  ssize_t got = pread(stream.memfd, tail, want, end - static_cast<off_t>(want));
  // Reading back what was just written cannot fail short of a kernel
  // bug; zeros then at least keep every byte delivered.
  if (got != static_cast<ssize_t>(want)) std::memset(tail, 0, sizeof tail);
  announce_memfd(process, stream, std::string_view(tail, want), moved);
  return 1;
}

bool ProcessTable::start_memfd(Process& process, Stream& stream) {
  if (!stream.memfd_wanted || stream.framer || process.removed ||
      stream.bytes_read <= process.options.memfd_threshold)
    return false;
  stream.memfd_wanted = false;
  int memfd = open_spill("fastrevert-process");
  int theirs = memfd >= 0 ? fcntl(memfd, F_DUPFD_CLOEXEC, 0) : -1;
  if (theirs < 0) {
    int error = errno;
    if (memfd >= 0) close(memfd);
    engine_.emit(Record{RecordKind::notice, process.id, stream.index,
                        std::string("fastrevert: cannot make a memfd for process output (") +
                            std::strerror(error) + "); passing it as strings"},
                 wake_);
    return false;
  }
  stream.memfd = memfd;
  process.output->start_memfd(UniqueFd(theirs));
  // What this wake-up read so far, the read that crossed the threshold
  // included, goes in first; only earlier wake-ups' bytes went as bytes.
  // If the write fails, they stay to go as bytes.
  if (!stream.raw.empty() && append_to_memfd(process, stream, stream.raw)) stream.raw.clear();
  return stream.memfd >= 0;
}

bool ProcessTable::append_to_memfd(Process& process, Stream& stream, std::string_view bytes) {
  std::uint64_t limit = process.options.test_memfd_size_limit;
  int error = limit > 0 && stream.memfd_size + bytes.size() > limit
                  ? EFBIG
                  : write_all_at(stream.memfd, bytes, stream.memfd_size);
  if (error) {
    close_fd(stream.memfd);
    // The bytes written so far were never told of, so nothing is seen
    // twice: all of BYTES goes as bytes.
    engine_.emit(Record{RecordKind::notice, process.id, stream.index,
                        std::string("fastrevert: cannot write process output to memory (") +
                            std::strerror(error) + "); passing it as strings"},
                 wake_);
    return false;
  }
  announce_memfd(process, stream,
                 bytes.substr(bytes.size() - std::min<std::size_t>(bytes.size(), 4)), bytes.size());
  return true;
}

void ProcessTable::announce_memfd(Process& process, Stream& stream, std::string_view last,
                                  std::uint64_t added) {
  std::uint64_t from = stream.memfd_size;
  stream.memfd_size += added;
  // The newest bytes go last; older ones stay in front while fewer came.
  std::size_t size = last.size();
  if (size >= sizeof stream.memfd_tail) {
    std::memcpy(stream.memfd_tail, last.data() + size - sizeof stream.memfd_tail,
                sizeof stream.memfd_tail);
    stream.memfd_tail_size = sizeof stream.memfd_tail;
  } else {
    std::size_t keep = std::min<std::size_t>(stream.memfd_tail_size, sizeof stream.memfd_tail - size);
    std::memmove(stream.memfd_tail, stream.memfd_tail + stream.memfd_tail_size - keep, keep);
    std::memcpy(stream.memfd_tail + keep, last.data(), size);
    stream.memfd_tail_size = static_cast<std::uint8_t>(keep + size);
  }
  process.output->memfd_written(from, stream.memfd_size,
                                std::string_view(stream.memfd_tail, stream.memfd_tail_size));
}


void ProcessTable::close_stream(Process& process, Stream& stream) {
  if (stream.poll_open) {
    stream.poll_open = false;
    close_handle(process, reinterpret_cast<uv_handle_t*>(&stream.poll));
  }
  // Safe right after uv_close: libuv has stopped watching the descriptor.
  if (stream.fd >= 0 && process.output) process.output->end_stream(stream.index);
  close_fd(stream.fd);
  close_fd(stream.memfd);
}

void ProcessTable::write_queued_stdin(Process& process) {
  while (!process.stdin_queue.empty()) {
    const std::string& front = process.stdin_queue.front();
    ssize_t written =
        write_without_sigpipe(process.stdin_fd, front.data() + process.stdin_front_offset,
                              front.size() - process.stdin_front_offset);
    if (written < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      // EPIPE: the child closed its stdin.  What it did not read is dropped,
      // as a pipe would.
      close_stdin_now(process);
      return;
    }
    process.stdin_front_offset += static_cast<std::size_t>(written);
    process.stdin_queued_bytes -= static_cast<std::size_t>(written);
    if (process.options.direct_input) {
      process.options.direct_input->wrote(static_cast<std::size_t>(written));
    }
    if (process.stdin_front_offset == front.size()) {
      process.stdin_queue.pop_front();
      process.stdin_front_offset = 0;
    }
  }

  if (process.stdin_queue.empty()) {
    if (process.stdin_polling) {
      uv_poll_stop(&process.stdin_poll);
      process.stdin_polling = false;
    }
    if (process.stdin_close_requested) close_stdin_now(process);
    return;
  }
  // Without a loop, the rest waits for the next table.
  if (!loop_) return;
  if (!process.stdin_poll_open) {
    int status = uv_poll_init(loop_, &process.stdin_poll, process.stdin_fd);
    if (status < 0) {
      engine_.emit(
          Record{RecordKind::notice, process.id, 0,
                 std::string("fastrevert: cannot watch process stdin: ") + uv_strerror(status)},
          wake_);
      close_stdin_now(process);
      return;
    }
    process.stdin_poll.data = &process;
    process.stdin_poll_open = true;
    ++process.open_handles;
  }
  if (!process.stdin_polling) {
    uv_poll_start(&process.stdin_poll, UV_WRITABLE, &ProcessTable::on_stdin_writable);
    process.stdin_polling = true;
  }
}

void ProcessTable::close_stdin_now(Process& process) {
  if (process.stdin_poll_open) {
    process.stdin_poll_open = false;
    process.stdin_polling = false;
    close_handle(process, reinterpret_cast<uv_handle_t*>(&process.stdin_poll));
  }
  close_fd(process.stdin_fd);
  if (process.options.direct_input) process.options.direct_input->close();
  process.stdin_queue.clear();
  process.stdin_front_offset = 0;
  process.stdin_queued_bytes = 0;
  process.stdin_close_requested = true;
}

void ProcessTable::try_reap(Process& process) {
  if (process.reaped) return;
  int status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(process.pid, &status, WNOHANG);
  } while (reaped < 0 && errno == EINTR);
  if (reaped == 0) return;
  process.reaped = true;
  // ECHILD means someone reaped our child (SIGCHLD ignored): the status is
  // lost, but the child is gone all the same.
  process.wait_status = reaped == process.pid ? status : -1;
  stop_exit_watch(process);
  maybe_finish(process);
}

void ProcessTable::stop_exit_watch(Process& process) {
  if (process.exit_poll_open) {
    process.exit_poll_open = false;
    close_handle(process, reinterpret_cast<uv_handle_t*>(&process.exit_poll));
  }
  close_fd(process.exit_fd);
  if (process.exit_timer_open) {
    process.exit_timer_open = false;
    close_handle(process, reinterpret_cast<uv_handle_t*>(&process.exit_timer));
  }
}

void ProcessTable::send_signal(Process& process, int signal_number) {
  // The pid cannot have been reused: it stays ours until we reap it, and
  // callers check process.reaped first.
  if (process.reaped || process.pid <= 0) return;
  kill(process.options.signal_process_group ? -process.pid : process.pid, signal_number);
}

void ProcessTable::maybe_finish(Process& process) {
  if (process.finished) return;
  if (!process.reaped || process.out.fd >= 0 || process.err.fd >= 0) return;
  process.finished = true;
  if (!process.removed) {
    process.output->finish(exit_status(process.wait_status));
    notify(process);
  }
  retire(process);
}

void ProcessTable::retire(Process& process) {
  close_stream(process, process.out);
  close_stream(process, process.err);
  close_stdin_now(process);
  if (process.reaped) stop_exit_watch(process);
  if (process.retired) return;
  process.retired = true;
  auto found = processes_.find(process.id);
  if (found != processes_.end() && found->second.get() == &process) {
    retiring_.emplace(&process, std::move(found->second));
    processes_.erase(found);
  }
}

void ProcessTable::close_handle(Process&, uv_handle_t* handle) {
  if (!uv_is_closing(handle)) uv_close(handle, &ProcessTable::on_handle_closed);
}

void ProcessTable::free_if_closed(Process& process) {
  // Only retired processes are freed, and only once libuv has let go of
  // every handle embedded in them.
  if (process.retired && process.open_handles == 0) retiring_.erase(&process);
}

}  // namespace fastrevert
