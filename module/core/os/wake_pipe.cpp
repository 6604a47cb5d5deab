// A wake signal anywhere: a pipe.  A signal writes one byte; a reset reads
// them all.  See core/wake_signal.h.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

#include "core/cloexec_pipe.h"
#include "core/errors.h"
#include "core/wake_signal.h"

namespace fastrevert {

PipeWakeSignal::PipeWakeSignal() {
  CloexecPipe ends = make_cloexec_pipe();
  // Both ends non-blocking: a writer facing a full pipe has nothing to add
  // (the pipe is readable already), and a reset stops where it is empty.
  for (int fd : {ends.read_end.get(), ends.write_end.get()}) {
    int flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) throw_errno("fcntl");
  }
  read_fd_ = ends.read_end.release();
  write_fd_ = ends.write_end.release();
}

void PipeWakeSignal::signal() noexcept {
  if (write_fd_ < 0) return;
  char byte = 1;
  ssize_t written;
  do {
    written = write(write_fd_, &byte, 1);
  } while (written < 0 && errno == EINTR);
  // EAGAIN means the pipe is full of unread bytes: readable already.
}

void PipeWakeSignal::reset() noexcept {
  if (read_fd_ < 0) return;
  char bytes[256];
  for (;;) {
    ssize_t got = read(read_fd_, bytes, sizeof bytes);
    if (got < 0 && errno == EINTR) continue;
    if (got < static_cast<ssize_t>(sizeof bytes)) break;
  }
}

void PipeWakeSignal::close() noexcept {
  if (read_fd_ >= 0) ::close(read_fd_);
  if (write_fd_ >= 0) ::close(write_fd_);
  read_fd_ = -1;
  write_fd_ = -1;
}

}  // namespace fastrevert
