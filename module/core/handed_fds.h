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

#include <cstddef>
#include <unordered_set>

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

 private:
  std::unordered_set<int> fds_;
};

}  // namespace fastrevert
