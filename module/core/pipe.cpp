#include "core/pipe.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <utility>

#include "core/errors.h"
#include "core/platform.h"

namespace fastrevert {

std::size_t pipe_max_size() noexcept {
  // A function-local static: C++11 makes its one-time initialization
  // thread-safe, and the value never changes afterwards.
  static const std::size_t cached = [] {
    std::size_t value = 1 << 20;
    if (FILE* file = std::fopen("/proc/sys/fs/pipe-max-size", "re")) {
      unsigned long read_value = 0;
      if (std::fscanf(file, "%lu", &read_value) == 1 && read_value >= 4096) value = read_value;
      std::fclose(file);
    }
    return value;
  }();
  return cached;
}

std::size_t pipe_capacity(int fd) noexcept {
#if FASTREVERT_HAVE_PIPE_SIZE
  int current = fcntl(fd, F_GETPIPE_SZ);
  return current < 0 ? 0 : static_cast<std::size_t>(current);
#else
  (void)fd;
  return 0;
#endif
}

std::size_t grow_pipe(int fd, std::size_t size) noexcept {
#if FASTREVERT_HAVE_PIPE_SIZE
  std::size_t current = pipe_capacity(fd);
  if (current == 0) return 0;
  std::size_t wanted = size < pipe_max_size() ? size : pipe_max_size();
  if (wanted <= current) return current;
  int granted = fcntl(fd, F_SETPIPE_SZ, static_cast<int>(wanted));
  return granted < 0 ? current : static_cast<std::size_t>(granted);
#else
  (void)fd;
  (void)size;
  return 0;
#endif
}

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
    : read_size_(std::min(initial_size == 0 ? 4096 : initial_size,
                          max_size == 0 ? kDefaultMaxReadSize : max_size)),
      max_size_(max_size == 0 ? kDefaultMaxReadSize : max_size),
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

void AdaptiveReader::use_scratch(std::shared_ptr<ReadScratch> scratch) {
  scratch_ = scratch ? std::move(scratch) : std::make_shared<ReadScratch>();
}

void AdaptiveReader::after_full_read(int fd, std::size_t bytes) {
  if (!pipe_growth_done_ && grow_pipe_to_ > 0) {
    if (pipe_capacity_ == 0) {
      std::size_t capacity = fastrevert::pipe_capacity(fd);
      if (capacity == 0) {
        // Not a pipe, or a system that does not size pipes: nothing to enlarge.
        pipe_growth_done_ = true;
      } else {
        pipe_capacity_ = capacity;
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

namespace {

ssize_t write_retrying(int fd, const char* data, std::size_t size) noexcept {
  ssize_t written;
  do {
    written = write(fd, data, size);
  } while (written < 0 && errno == EINTR);
  return written;
}

// Takes the SIGPIPE that a failed write raised in this thread, where
// SIGPIPE is blocked, off the thread's pending signals.
void consume_own_sigpipe(const sigset_t& sigpipe_only) noexcept {
#if FASTREVERT_HAVE_SIGTIMEDWAIT
  struct timespec no_wait = {0, 0};
  int taken;
  do {
    taken = sigtimedwait(&sigpipe_only, nullptr, &no_wait);
  } while (taken < 0 && errno == EINTR);
#else
  // sigwait waits for a signal that is not pending, so it is asked only for
  // one that is.
  sigset_t pending;
  if (sigpending(&pending) == 0 && sigismember(&pending, SIGPIPE) == 1) {
    int taken;
    sigwait(&sigpipe_only, &taken);
  }
#endif
}

}  // namespace

ssize_t write_without_sigpipe(int fd, const char* data, std::size_t size) noexcept {
#if FASTREVERT_HAVE_F_SETNOSIGPIPE
  // macOS and the BSDs: a descriptor can be told to fail with EPIPE alone,
  // which leaves the signal mask out of it.  Should that be refused, the
  // mask does it.
  if (fcntl(fd, F_SETNOSIGPIPE, 1) == 0) return write_retrying(fd, data, size);
#endif
  sigset_t sigpipe_only;
  sigset_t previous_mask;
  sigemptyset(&sigpipe_only);
  sigaddset(&sigpipe_only, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &sigpipe_only, &previous_mask);
  // A SIGPIPE already pending belongs to someone else; leave it alone.
  sigset_t pending;
  sigpending(&pending);
  bool already_pending = sigismember(&pending, SIGPIPE) == 1;

  ssize_t written = write_retrying(fd, data, size);
  int saved_errno = errno;

  if (written < 0 && saved_errno == EPIPE && !already_pending) consume_own_sigpipe(sigpipe_only);
  pthread_sigmask(SIG_SETMASK, &previous_mask, nullptr);
  errno = saved_errno;
  return written;
}

int write_all_at(int fd, std::string_view data, std::uint64_t offset) noexcept {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t written =
        pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return written < 0 ? errno : ENOSPC;
    done += static_cast<std::size_t>(written);
  }
  return 0;
}

std::string read_at(int fd, std::uint64_t begin, std::uint64_t end) {
  struct stat status;
  if (fstat(fd, &status) != 0) throw_errno("fstat");
  std::uint64_t size = status.st_size > 0 ? static_cast<std::uint64_t>(status.st_size) : 0;
  std::uint64_t stop = std::min(end, size);
  std::string bytes(stop > begin ? static_cast<std::size_t>(stop - begin) : 0, '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t got =
        pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(begin + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw_errno("pread");
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  bytes.resize(done);
  return bytes;
}

SpliceResult splice_into(int pipe_fd, int file_fd, std::uint64_t offset, std::size_t max) noexcept {
#if !FASTREVERT_HAVE_SPLICE
  // No splice here: the caller copies, as it does where the kernel refuses.
  (void)pipe_fd;
  (void)file_fd;
  (void)offset;
  (void)max;
  SpliceResult refused;
  refused.status = SpliceResult::Status::refused;
  refused.error = ENOSYS;
  return refused;
#else
  auto at = static_cast<loff_t>(offset);
  ssize_t moved;
  do {
    moved = splice(pipe_fd, nullptr, file_fd, &at, max, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
  } while (moved < 0 && errno == EINTR);
  SpliceResult result;
  if (moved > 0) {
    result.status = SpliceResult::Status::moved;
    result.moved = static_cast<std::size_t>(moved);
  } else if (moved == 0) {
    result.status = SpliceResult::Status::eof;
  } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
    result.status = SpliceResult::Status::would_block;
  } else if (errno == EINVAL || errno == ENOSYS) {
    result.status = SpliceResult::Status::refused;
    result.error = errno;
  } else {
    result.status = SpliceResult::Status::error;
    result.error = errno;
  }
  return result;
#endif
}

}  // namespace fastrevert
