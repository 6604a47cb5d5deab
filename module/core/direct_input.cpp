#include "core/direct_input.h"

#include <fcntl.h>

#include <cerrno>

#include "core/errors.h"
#include "core/pipe.h"

namespace fastrevert {

DirectInput::DirectInput(int fd) {
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) throw_errno("fcntl F_DUPFD_CLOEXEC");
  fd_.reset(own);
}

std::size_t DirectInput::try_write(std::string_view data) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::size_t written = 0;
  if (handed_ == 0 && fd_.get() >= 0 && !data.empty()) {
    ssize_t result = write_without_sigpipe(fd_.get(), data.data(), data.size());
    // EAGAIN: the pipe is full; EPIPE and the others: the engine's write
    // meets them too, and deals with them as it does.
    if (result > 0) written = static_cast<std::size_t>(result);
  }
  handed_ += data.size() - written;
  return written;
}

void DirectInput::wrote(std::size_t count) {
  std::lock_guard<std::mutex> lock(mutex_);
  handed_ -= count < handed_ ? count : handed_;
}

void DirectInput::close() {
  std::lock_guard<std::mutex> lock(mutex_);
  fd_.reset();
}

std::uint64_t DirectInput::handed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return handed_;
}

}  // namespace fastrevert
