// A pipe copied into a memfd on a thread of its own.
//
// A synchronous caller (fastrevert-call-process) wants three things to run at
// once: the child writing, the copy out of the pipe, and Emacs decoding what
// has already arrived.  MemfdCopier is the copy: its thread moves the pipe's
// bytes into the memfd, or the file that stands in for one (core/spill.h),
// with splice, which moves pipe pages without a copy through user space, or
// with read and pwrite where the kernel refuses splice into the file or has
// none.  It tells the caller how far the file is written.  It also gives
// back the memory of bytes the caller has consumed (a hole punched in the
// file, where the kernel can), so that neither the caller's thread nor the
// memory peak pays for output already decoded.  The thread blocks every
// signal and never calls Emacs.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "core/wake_signal.h"

namespace fastrevert {

class MemfdCopier {
 public:
  struct Options {
    // Test hook: copy with read and pwrite from the start, as after a
    // refused splice.
    bool without_splice = false;
  };

  // Starts copying PIPE_FD (non-blocking) into MEMFD, of which WRITTEN bytes
  // are already written.  Neither descriptor is owned.  Throws SystemError
  // when the thread cannot start.
  MemfdCopier(int pipe_fd, int memfd, std::uint64_t written, Options options);
  MemfdCopier(int pipe_fd, int memfd, std::uint64_t written)
      : MemfdCopier(pipe_fd, memfd, written, Options()) {}
  ~MemfdCopier();

  MemfdCopier(const MemfdCopier&) = delete;
  MemfdCopier& operator=(const MemfdCopier&) = delete;

  // Waits up to TIMEOUT for the file to hold at least WANTED bytes or for
  // the copy to end (end of file, or an error); returns the bytes written so
  // far and sets DONE when the copy has ended.
  std::uint64_t wait(std::uint64_t wanted, std::chrono::milliseconds timeout, bool& done);

  // Asks the copy thread to give back the memory of bytes [0, END) of the
  // file.  The file keeps its size, so later offsets stay valid.
  void release(std::uint64_t end);

  // Ends the thread without waiting for end of file (a grandchild may hold
  // the pipe open) and joins it, after it has done the releases asked for.
  // Idempotent.
  void stop() noexcept;

  // The errno that ended the copy early, or 0.
  int error();

  // Test hook: how many bytes were given back so far.
  std::uint64_t released();

 private:
  void run() noexcept;
  void wake() noexcept;
  // Copies what the pipe holds now; returns false at end of file or on an
  // error (recorded in error_).
  bool copy_available() noexcept;

  int pipe_fd_;
  int memfd_;
  // Wakes the copy thread for a release or a stop.  Declared before the
  // thread, so that it exists before the thread starts and after it ends.
  WakeSignal wake_;
  bool use_splice_;
  std::thread thread_;

  // Guards everything below, shared by the copy thread and the caller.
  std::mutex mutex_;
  std::condition_variable changed_;
  std::uint64_t written_;
  bool done_ = false;
  int error_ = 0;
  std::uint64_t release_to_ = 0;
  std::uint64_t released_ = 0;
  bool stop_requested_ = false;
};

}  // namespace fastrevert
