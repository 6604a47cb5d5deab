// Named pipes to a process that someone else starts: the engine's end of a
// language server's standard input and output when Emacs owns the server.
//
// Emacs starts the server, so that it is a real Emacs process (its pid, its
// signals, its sentinel), but the server's stdin and stdout are named pipes
// that the engine holds, so that the engine reads and frames its output and
// writes its input without ever blocking Emacs.  Named pipes work the same
// on Linux, macOS and the BSDs.
//
// Every function may be called from any thread, and none keeps global state.
#pragma once

#include <string>

#include "core/fd.h"

namespace fastrevert {

// The engine's ends of the pipes in one directory.  Every descriptor is
// close-on-exec and non-blocking.
struct NamedPipes {
  // Read end of DIRECTORY/out, the server's standard output.
  UniqueFd output;
  // A write end of DIRECTORY/out that keeps the pipe from reaching end of
  // file before the server opened it, or while it runs: some systems report
  // end of file on a named pipe that no writer has opened yet.  Close it
  // once the server is known to have ended; the pipe then ends once the
  // server's own descriptors are closed.
  UniqueFd output_keeper;
  // Write end of DIRECTORY/in, the server's standard input.  It is opened
  // for reading and writing, so that the open never waits for the server,
  // and a write never raises SIGPIPE should the server close its end: the
  // pipe then fills, and writes wait, until the process is removed.
  UniqueFd input;
};

// Makes the named pipes DIRECTORY/in and DIRECTORY/out (mode 0600) in
// DIRECTORY, which the caller made and keeps private, and opens the
// engine's ends.  The server opens "in" for reading and "out" for writing,
// in that order or the other, and neither open waits.  Throws SystemError
// ("mkfifo" or "open" and the path) when a pipe cannot be made or opened,
// having removed nothing and closed what it opened.
NamedPipes open_named_pipes(const std::string& directory);

}  // namespace fastrevert
