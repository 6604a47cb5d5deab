// The one owner of a file descriptor.
//
// UniqueFd closes the descriptor it holds when it is destroyed or reset, so
// that no error path or unwinding quit leaks one.  Descriptors that live in
// structures shared with libuv or handed between tables stay plain ints;
// close_fd() is the one way to close those, and leaves -1 behind so that a
// second close cannot hit a number the kernel has given to someone else.
#pragma once

#include <unistd.h>

#include <utility>

namespace fastrevert {

// Closes FD if it is open and sets it to -1.
inline void close_fd(int& fd) noexcept {
  if (fd >= 0) close(fd);
  fd = -1;
}

class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { close_fd(fd_); }

  int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  // Gives the descriptor up to the caller, who closes it.
  int release() noexcept { return std::exchange(fd_, -1); }
  // Closes the descriptor held, if any, and holds FD instead.
  void reset(int fd = -1) noexcept {
    close_fd(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace fastrevert
