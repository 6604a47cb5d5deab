#include "core/copier.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <memory>
#include <new>
#include <string_view>

#include "core/errors.h"
#include "core/pipe.h"
#include "core/spill.h"
#include "core/threads.h"

namespace fastrevert {

namespace {

// The most one splice or read moves at a time.
constexpr std::size_t kChunk = std::size_t{1} << 20;

}  // namespace

MemfdCopier::MemfdCopier(int pipe_fd, int memfd, std::uint64_t written, Options options)
    : pipe_fd_(pipe_fd), memfd_(memfd), use_splice_(!options.without_splice), written_(written) {
  thread_ = start_thread_blocking_signals([this] { run(); });
}

MemfdCopier::~MemfdCopier() {
  stop();
}

std::uint64_t MemfdCopier::wait(std::uint64_t wanted, std::chrono::milliseconds timeout,
                                bool& done) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return done_ || written_ >= wanted; });
  done = done_;
  return written_;
}

void MemfdCopier::release(std::uint64_t end) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (end <= release_to_) return;
    release_to_ = end;
  }
  wake();
}

void MemfdCopier::stop() noexcept {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_requested_ = true;
  }
  wake();
  thread_.join();
}

int MemfdCopier::error() {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

std::uint64_t MemfdCopier::released() {
  std::lock_guard<std::mutex> lock(mutex_);
  return released_;
}

void MemfdCopier::wake() noexcept {
  wake_.signal();
}

void MemfdCopier::run() noexcept {
  grow_pipe(pipe_fd_, pipe_max_size());
  bool copying = true;
  std::uint64_t punched = 0;
  for (;;) {
    // Once the copy has ended the thread stays, to give back memory, until
    // it is stopped.
    pollfd fds[2] = {{copying ? pipe_fd_ : -1, POLLIN, 0}, {wake_.fd(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      std::lock_guard<std::mutex> lock(mutex_);
      if (copying) error_ = errno;
      break;
    }
    if (fds[1].revents) wake_.reset();
    std::uint64_t target;
    bool stopping;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      target = release_to_;
      stopping = stop_requested_;
    }
    if (target > punched) {
      give_back_spilled(memfd_, static_cast<off_t>(target));
      punched = target;
      std::lock_guard<std::mutex> lock(mutex_);
      released_ = target;
    }
    if (stopping) break;
    if (copying && fds[0].revents) {
      copying = copy_available();
      if (!copying) {
        std::lock_guard<std::mutex> lock(mutex_);
        done_ = true;
        changed_.notify_all();
      }
    }
  }
  std::lock_guard<std::mutex> lock(mutex_);
  done_ = true;
  changed_.notify_all();
}

bool MemfdCopier::copy_available() noexcept {
  // Only this thread changes written_, so it reads it without the lock.
  std::uint64_t offset = written_;
  std::unique_ptr<char[]> buffer;
  int error = 0;
  for (;;) {
    std::size_t got = 0;
    if (use_splice_) {
      SpliceResult spliced = splice_into(pipe_fd_, memfd_, offset, kChunk);
      if (spliced.status == SpliceResult::Status::refused) {
        use_splice_ = false;
        continue;
      }
      if (spliced.status == SpliceResult::Status::would_block) return true;
      if (spliced.status == SpliceResult::Status::eof) break;
      if (spliced.status == SpliceResult::Status::error) {
        error = spliced.error;
        break;
      }
      got = spliced.moved;
    } else {
      if (!buffer) buffer.reset(new (std::nothrow) char[kChunk]);
      if (!buffer) {
        error = ENOMEM;
        break;
      }
      ssize_t count = read(pipe_fd_, buffer.get(), kChunk);
      if (count == 0) break;  // End of file.
      if (count < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN) return true;
        error = errno;
        break;
      }
      got = static_cast<std::size_t>(count);
      error = write_all_at(memfd_, std::string_view(buffer.get(), got), offset);
      if (error != 0) break;
    }
    offset += got;
    std::lock_guard<std::mutex> lock(mutex_);
    written_ = offset;
    changed_.notify_all();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  error_ = error;
  return false;
}

}  // namespace fastrevert
