// Pipe work: reading a child's output at pipe speed, sizing pipes, writing
// without SIGPIPE, and moving a pipe's bytes into a memfd.
//
// AdaptiveReader starts at Emacs's `read-process-output-max' and doubles its
// read size while reads come back full, so a chatty child is read in large
// gulps and a quiet one costs a small buffer.  Its memory is reused: in steady
// state a read allocates nothing.
//
// Every function may be called from any thread.  None keeps global state
// except the cached value of /proc/sys/fs/pipe-max-size.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace fastrevert {

// The value of /proc/sys/fs/pipe-max-size, read once and cached; 1 MiB when it
// cannot be read.
std::size_t pipe_max_size() noexcept;

// What pipe FD holds when full, or 0 when FD is not a pipe or the system
// does not tell (F_GETPIPE_SZ is Linux's; macOS grows its pipes itself).
std::size_t pipe_capacity(int fd) noexcept;

// Asks for pipe FD to hold SIZE bytes (capped at pipe_max_size()).  Returns
// the capacity the pipe now has, or 0 when FD is not a pipe or the system
// does not size pipes (F_SETPIPE_SZ is Linux's).  Never throws: a refused
// enlargement (EPERM past a user's pipe quota) leaves the pipe as it was.
std::size_t grow_pipe(int fd, std::size_t size) noexcept;

// The largest read an AdaptiveReader grows to, unless told otherwise.
inline constexpr std::size_t kDefaultMaxReadSize = std::size_t{4} << 20;

// Growable scratch memory for reads.  It never shrinks, so once it has reached
// the largest read size in use, reads stop allocating.  One scratch may serve
// many readers on one thread (the engine thread shares one across every
// stream, since each read's bytes are copied out before the next read).  Not
// thread-safe: every reader of one scratch must read on the same thread, and
// a reader that moves to another thread must be given that thread's scratch
// (AdaptiveReader::use_scratch).
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

  // Reads into SCRATCH from now on (null: a scratch of its own), keeping
  // the read size it has grown to: for a reader whose stream moves to
  // another thread, which must not share memory with the readers it left.
  void use_scratch(std::shared_ptr<ReadScratch> scratch);

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

// write(2) that never raises SIGPIPE in the calling thread, and installs no
// handler.  Where a descriptor can be told to raise none (F_SETNOSIGPIPE:
// macOS, the BSDs), FD is told so.  Otherwise it blocks SIGPIPE around the
// write and, when the write fails with EPIPE, consumes the thread-directed
// SIGPIPE it caused: with sigtimedwait (Linux), else with sigwait once
// sigpending shows it.  Returns what write() returns, with errno set on
// failure (EINTR is retried).
ssize_t write_without_sigpipe(int fd, const char* data, std::size_t size) noexcept;

// Writes every byte of DATA to the file FD at OFFSET (a memfd: never short in
// practice, but a short write must not lose the rest), retrying EINTR.
// Returns 0, or the errno that stopped it (ENOSPC for a write of nothing).
int write_all_at(int fd, std::string_view data, std::uint64_t offset) noexcept;

// Bytes [BEGIN, END) of the file FD, read with pread; bytes past the end of
// the file are missing from the result, and only what the file holds is
// allocated, however far END reaches.  Throws SystemError.
std::string read_at(int fd, std::uint64_t begin, std::uint64_t end);

// What one splice_into() call did.
struct SpliceResult {
  enum class Status {
    moved,        // MOVED bytes went from the pipe to the file.
    would_block,  // The pipe is empty now.
    eof,          // The writer closed its end and everything was moved.
    refused,      // The kernel will not splice here (EINVAL, ENOSYS): copy instead.
    error,        // splice() failed with ERROR.
  };
  Status status = Status::would_block;
  std::size_t moved = 0;
  int error = 0;
};

// Moves up to MAX bytes from the non-blocking pipe PIPE_FD into FILE_FD at
// OFFSET with splice(2), which moves pipe pages without a copy through user
// space.  Retries EINTR.  Where there is no splice (Linux's alone), always
// Status::refused, with ENOSYS: the caller reads and writes instead.
SpliceResult splice_into(int pipe_fd, int file_fd, std::uint64_t offset, std::size_t max) noexcept;

}  // namespace fastrevert
