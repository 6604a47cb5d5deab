// Reading a child's output at pipe speed, and running a child to completion.
//
// AdaptiveReader starts at Emacs's `read-process-output-max' and doubles its
// read size while reads come back full, so a chatty child is read in large
// gulps and a quiet one costs a small buffer.  Its memory is reused: in steady
// state a read allocates nothing.
//
// run_to_completion() is the engine of a `call-process' equivalent: it runs on
// the calling thread (Emacs's main thread), multiplexes stdin, stdout, stderr
// and the child's exit with poll(), and asks the caller at least every
// RunOptions::quit_poll_ms whether the user has quit.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/spawn.h"

namespace fastrevert {

// The largest read an AdaptiveReader grows to, unless told otherwise.
inline constexpr std::size_t kDefaultMaxReadSize = std::size_t{4} << 20;

// Growable scratch memory for reads.  It never shrinks, so once it has reached
// the largest read size in use, reads stop allocating.  One scratch may serve
// many readers on one thread (the engine thread shares one across every
// stream, since each read's bytes are copied out before the next read).  Not
// thread-safe.
class ReadScratch {
 public:
  // Returns at least SIZE writable bytes, valid until the next reserve().
  char* reserve(std::size_t size);
  std::size_t capacity() const noexcept { return capacity_; }

 private:
  std::unique_ptr<char[]> data_;
  std::size_t capacity_ = 0;
};

struct ReadResult {
  enum class Status {
    data,         // BYTES holds what was read (never empty).
    would_block,  // Nothing to read now (EAGAIN).
    eof,          // The writer closed its end and everything was read.
    error,        // read() failed with ERROR (EIO...).  Treat as end of stream.
  };
  Status status = Status::would_block;
  // For Status::data: a view into the reader's scratch, valid until the next
  // read from any reader sharing that scratch.
  std::string_view bytes;
  int error = 0;
};

// Reads a non-blocking descriptor with a read size that adapts to the
// producer.  Not thread-safe; one per stream.
class AdaptiveReader {
 public:
  // INITIAL_SIZE is the first read size (Emacs's `read-process-output-max';
  // 0 means 4096); MAX_SIZE (0 means kDefaultMaxReadSize) caps the doubling
  // and the first size too, so that a huge `read-process-output-max' costs
  // a buffer of the cap, never an allocation that cannot succeed.  SCRATCH is the memory to read
  // into; null gives the reader a scratch of its own.  GROW_PIPE_TO, when not
  // 0, is the capacity to ask for (see grow_pipe) the first time a single read
  // drains a whole full pipe, which shows the writer was blocked on it.
  explicit AdaptiveReader(std::size_t initial_size, std::size_t max_size = kDefaultMaxReadSize,
                          std::shared_ptr<ReadScratch> scratch = nullptr,
                          std::size_t grow_pipe_to = pipe_max_size());

  // Does one read() of read_size() bytes from FD, retrying EINTR.  A read
  // that fills the request doubles the next read size, up to the cap.
  ReadResult read(int fd);

  // Like read(), but appends the bytes to OUT (whose capacity the caller can
  // reuse by clearing it).  The result's BYTES views the appended part.
  ReadResult read_append(int fd, std::string& out);

  // The size the next read will ask for.
  std::size_t read_size() const noexcept { return read_size_; }
  std::size_t max_size() const noexcept { return max_size_; }
  // The capacity of the pipe after any enlargement, or 0 while unknown.
  std::size_t pipe_capacity() const noexcept { return pipe_capacity_; }

 private:
  void after_full_read(int fd, std::size_t bytes);

  std::size_t read_size_;
  std::size_t max_size_;
  std::shared_ptr<ReadScratch> scratch_;
  std::size_t grow_pipe_to_;
  std::size_t pipe_capacity_ = 0;
  bool pipe_growth_done_ = false;
};

// write(2) that never raises SIGPIPE in the calling thread: it blocks SIGPIPE
// around the write and, when the write fails with EPIPE, consumes the
// thread-directed SIGPIPE it caused.  Returns what write() returns, with errno
// set on failure (EINTR is retried).
ssize_t write_without_sigpipe(int fd, const char* data, std::size_t size) noexcept;

// Receives a stream's bytes in order.  May throw: the child is then killed and
// reaped and the exception propagates.
using ByteSink = std::function<void(std::string_view)>;

struct RunOptions {
  // Written to the child's stdin pipe (if Child::stdin_fd >= 0), which is then
  // closed.  The caller keeps the bytes alive for the call.
  std::string_view stdin_data;
  // First and largest read size (see AdaptiveReader).
  std::size_t initial_read_size = 65536;
  std::size_t max_read_size = kDefaultMaxReadSize;
  // Called after every wake-up, and at least every QUIT_POLL_MS while nothing
  // happens; true means the user quit.  The first quit sends QUIT_SIGNAL; a
  // second quit, or KILL_GRACE_MS passing without the child exiting, sends
  // SIGKILL.  After a quit, the run ends as soon as the child is reaped,
  // without waiting for output pipes that a grandchild may hold open.
  std::function<bool()> should_quit;
  int quit_poll_ms = 50;
  int quit_signal = SIGINT;
  int kill_grace_ms = 1000;
  // Signal the child's process group (kill(-pid)), for a child spawned with
  // SpawnSpec::new_session.
  bool signal_process_group = false;
};

struct RunResult {
  // The raw wait status (WIFEXITED...), or -1 when the child had already been
  // reaped by someone else (SIGCHLD set to SIG_IGN).
  int wait_status = -1;
  // Whether should_quit() returned true at some point.
  bool quit = false;
};

// Feeds STDIN_DATA, hands every byte of stdout and stderr, in order, to
// ON_STDOUT and ON_STDERR (either may be empty to discard), waits until both
// pipes reach end of file and the child has exited, and reaps it (waitpid on
// its pid only).  Without a quit, output is read to end of file even after the
// child exits, as `call-process' does.  On return, or on an exception, the
// child is reaped and all its descriptors are closed.
RunResult run_to_completion(Child& child, const ByteSink& on_stdout, const ByteSink& on_stderr,
                            const RunOptions& options = {});

}  // namespace fastrevert
