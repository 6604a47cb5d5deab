// The descriptors the engine has handed over to Lisp.
//
// A process's output memfd reaches Lisp as a descriptor number, which Lisp
// then reads, frees pages of, and closes through the module's primitives.
// Those primitives accept only the numbers listed here: any other (Emacs's
// own descriptors, a file the user has open) is refused before anything is
// done to it, and a number closed once cannot be closed again after the
// system has given it to something else.
//
// Main thread only, like the primitives that consult it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <unordered_set>

#include "core/engine.h"

namespace fastrevert {

class HandedFds {
 public:
  HandedFds() = default;
  HandedFds(const HandedFds&) = delete;
  HandedFds& operator=(const HandedFds&) = delete;

  // Lists FD as handed to Lisp.
  void add(int fd) { fds_.insert(fd); }
  // Whether FD was handed to Lisp and not given back.
  bool contains(int fd) const { return fds_.count(fd) != 0; }
  // Takes FD off the list; returns whether it was listed.  The caller then
  // closes it.
  bool remove(int fd) { return fds_.erase(fd) != 0; }
  std::size_t size() const noexcept { return fds_.size(); }

  // Lists the memfd that RECORD hands to Lisp, if it hands one (see
  // OutputCode::stdout_memfd); for each record as Lisp is given it.
  void note_delivery(const Record& record);

  // Closes the memfds that RECORDS hand over: records of a stopped engine,
  // which Lisp will never see.
  static void discard(const std::deque<Record>& records) noexcept;

  // Gives back the memory of bytes [0, LENGTH) of the listed FD (the file
  // keeps its size, so later offsets stay valid) and, with CLOSE, takes FD
  // off the list at once and closes it.  When the file holds more than a
  // few pages, the work goes to ENGINE's thread (unless ENGINE is null or
  // stopping), so that Emacs does not wait while the kernel frees them;
  // otherwise it is done here.  Either way it follows every release posted
  // before it, so that a close here never gives the number to a new file
  // before the engine has punched holes in the old one.
  void release(int fd, off_t length, bool close, Engine* engine);

 private:
  std::unordered_set<int> fds_;
  // Releases posted to an engine and not yet run; shared with the posted
  // commands, which may run after this list is gone.  The engine thread
  // counts down what the main thread counted up, hence an atomic.
  std::shared_ptr<std::atomic<int>> releases_posted_ = std::make_shared<std::atomic<int>>(0);
};

}  // namespace fastrevert
