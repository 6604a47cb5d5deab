// A child's input written by Emacs's main thread when it can be, without a
// trip through the engine.
//
// What Lisp sends a process is queued for the engine thread, which writes
// it as the pipe takes it, so that a send never blocks Emacs.  For a
// request and its reply (a language server) the trip to the engine thread
// and back is added to every round trip, and a client that sends a last
// message and kills the server at once (eglot's `exit' before its
// `delete-process') kills it before the engine has written the message.
// Stock Emacs writes at once.  So, while nothing that was handed to the
// engine waits to be written, the main thread writes a send itself, as far
// as the pipe takes it now; what it does not take goes to the engine,
// behind which every later send goes too, until the engine has written all
// it was given.  The order of the bytes is the order of the sends.
//
// The object holds a descriptor of its own for the pipe (a duplicate of
// the engine's), closed when the engine closes the child's input or when
// Lisp asks for its end: the child sees end of file as before.
//
// Thread-safety: try_write() is the main thread's, wrote() the engine's,
// close() either's; a mutex orders them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string_view>

#include "core/fd.h"

namespace fastrevert {

class DirectInput {
 public:
  // FD is the write end of the child's input (non-blocking), which this
  // object duplicates.  Throws SystemError when it cannot.
  explicit DirectInput(int fd);

  DirectInput(const DirectInput&) = delete;
  DirectInput& operator=(const DirectInput&) = delete;

  // Writes what of DATA the pipe takes now, if nothing handed to the engine
  // waits, and returns how many bytes that was.  The rest (all of DATA when
  // the engine has some left, or the input has ended) is the caller's to
  // hand to the engine, and counts as handed from now on.
  std::size_t try_write(std::string_view data);

  // The engine wrote COUNT bytes of what it was handed.
  void wrote(std::size_t count);
  // No more direct writes, and this object's descriptor is closed: Lisp
  // asked for the input's end (which goes through the engine, behind what
  // waits there), or the engine closed the child's input or gave it up.
  void close();

  // Bytes handed to the engine and not yet written by it; for the tests.
  std::uint64_t handed() const;

 private:
  mutable std::mutex mutex_;
  UniqueFd fd_;
  std::uint64_t handed_ = 0;
};

}  // namespace fastrevert
