// The synchronous runner behind `fastrevert-call-process': one child, run to
// completion on the calling thread (Emacs's main thread), with its output
// handed over in order and a quit that escalates from SIGINT to SIGKILL.
//
// run_to_completion() is the general loop: it multiplexes stdin, stdout,
// stderr and the child's exit with poll(), and hands each stream's bytes to a
// sink.  run_call() is what `call-process' needs: a small output reaches the
// caller as one string once the child has closed it; a larger one is read
// into a memfd (where there is none, a file removed as it is made:
// core/spill.h) and handed over as byte ranges of that file, each as soon
// as enough whole lines have arrived, so that the caller decodes straight
// from the file while the child writes the rest.  Only a child that writes
// faster than the caller inserts gets a MemfdCopier thread to drain its
// pipe.
//
// Nothing here calls Emacs: the caller passes what it needs as plain values
// and callbacks.  Callbacks may throw (a Lisp error in the inserter, a quit
// unwinding); the child is then killed and reaped and the exception goes on.
#pragma once

#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string_view>

#include "core/call_output.h"
#include "core/child.h"
#include "core/pipe.h"

namespace fastrevert {

struct Stats;

// Receives a stream's bytes in order.  May throw: the child is then killed and
// reaped and the exception propagates.
using ByteSink = std::function<void(std::string_view)>;

struct RunOptions {
  // Written to the child's stdin pipe (if Child::stdin_fd >= 0), which is then
  // closed.  The caller keeps the bytes alive for the call.
  std::string_view stdin_data;
  // First and largest read size (see AdaptiveReader).
  std::size_t initial_read_size = 65536;
  std::size_t max_read_size = kDefaultMaxReadSize;
  // Called after every wake-up, and at least every QUIT_POLL_MS while nothing
  // happens; true means the user quit.  The first quit sends QUIT_SIGNAL; a
  // second quit, or KILL_GRACE_MS passing without the child exiting, sends
  // SIGKILL.  After a quit, the run ends as soon as the child is reaped,
  // without waiting for output pipes that a grandchild may hold open.
  std::function<bool()> should_quit;
  int quit_poll_ms = 50;
  int quit_signal = SIGINT;
  int kill_grace_ms = 1000;
  // Signal the child's process group (kill(-pid)), for a child spawned with
  // SpawnSpec::new_session.
  bool signal_process_group = false;
};

struct RunResult {
  // The raw wait status (WIFEXITED...), or -1 when the child had already been
  // reaped by someone else (SIGCHLD set to SIG_IGN).
  int wait_status = -1;
  // Whether should_quit() returned true at some point.
  bool quit = false;
};

// Feeds STDIN_DATA, hands every byte of stdout and stderr, in order, to
// ON_STDOUT and ON_STDERR (either may be empty to discard), waits until both
// pipes reach end of file and the child has exited, and reaps it (waitpid on
// its pid only).  Without a quit, output is read to end of file even after the
// child exits, as `call-process' does.  On return, or on an exception, the
// child is reaped and all its descriptors are closed.
RunResult run_to_completion(Child& child, const ByteSink& on_stdout, const ByteSink& on_stderr,
                            const RunOptions& options = {});

// Output of up to this many bytes in all reaches run_call's caller as one
// string: below it, making a Lisp string and decoding it costs less than a
// memfd and `insert-file-contents' (measured: they cost the same at about
// 16 KiB of ASCII, the string path growing twice as fast per byte).
inline constexpr std::size_t kCallStringLimit = 16384;

// Once a streamed output has passed this many bytes and the child still
// fills the pipe faster than the caller inserts, a MemfdCopier thread takes
// the copying over, so that the caller inserts while the pipe is drained.
inline constexpr std::uint64_t kCallCopierThreshold = std::uint64_t{4} << 20;

// What run_call hands its output to.  The caller inserts each string and
// range it is handed whole, with quit inhibited: Emacs keeps nothing of an
// insert a quit stops half-way, and every hand-over is kept short enough
// for a quit to wait (see core/call_output.h).  A quit is asked for between
// hand-overs, and on a quit everything read is handed over, up to the last
// whole character, before the call ends.
struct CallHooks : OutputHooks {
  // Inherited: insert_bytes, bytes handed over as a string (all of an
  // output of up to string_limit bytes once the child has closed it, or a
  // part of one that a quit or a line's end cuts); insert_range, bytes
  // [FROM, TO) of a memfd, for a longer output.  The pieces follow each
  // other from 0 to the end; the memfd stays open until run_call returns.
  //
  // When set, and CHUNK is 0 or at least string_limit, an output longer
  // than string_limit that waits in a pipe with no writer left is not read
  // here: the caller reads the pipe PIPE_FD itself, to end of file,
  // straight into its buffer, with quit inhibited (the read is bounded by
  // what the pipe holds), and returns how many bytes it took.  PIPE_FD
  // stays open until run_call returns.
  std::function<std::uint64_t(int pipe_fd)> insert_pipe;
  // Where the caller's coding system lets an output be cut.
  OutputCut cut = OutputCut::ascii;
  // Whether the user asks to quit; looked at least every quit_poll_ms.
  // Each yes is one quit: the first gives the child QUIT_SIGNAL and a
  // second of grace before SIGKILL, as a single C-g gives it with stock
  // call-process; a second sends SIGKILL at once.
  std::function<bool()> should_quit;
  int quit_poll_ms = 50;
  // When set, a child whose output was read, and not quit, counts in
  // Stats::processes and its bytes in Stats::bytes_read.  The counters are
  // relaxed atomics, safe to bump from the calling thread.
  Stats* stats = nullptr;
  // The paths' thresholds; tests lower them to reach every path with small
  // outputs.  A copier_threshold of 0 starts the copy thread as soon as a
  // streamed output has been handed over once, whatever the child's pace.
  std::size_t string_limit = kCallStringLimit;
  std::uint64_t copier_threshold = kCallCopierThreshold;
};

struct CallResult {
  // How the child ended: its raw wait status, or -1 when someone else reaped it.
  int wait_status = -1;
  // The user quit: what had been read by then, and what waited in the
  // pipe, was handed over up to the last whole character (as CallHooks::cut
  // says where that is); then the child got SIGINT, a second of grace and
  // SIGKILL, and was reaped.
  bool quit = false;
  // How many bytes of output were read.
  std::uint64_t bytes = 0;
  // Whether a MemfdCopier thread copied part of the output (for tests).
  bool copier_used = false;
};

// Runs CHILD, spawned with its stdout a pipe (or not a pipe at all, for
// output to a file or /dev/null: the child is then just awaited), to
// completion, handing its output to HOOKS.  The path follows the size seen:
// - up to string_limit bytes come as one string at the end;
// - with an insert_pipe hook, a longer output that waits in a pipe whose
//   writers are all gone is left there, unread, and the caller reads it
//   straight into its buffer: nothing is copied on the way;
// - otherwise a longer output goes into a memfd, read on this thread, and
//   reaches the caller as ranges of it.  With CHUNK positive, each time at
//   least CHUNK bytes ending in a newline are waiting they are handed over
//   while the child runs, so that the caller inserts one part while the
//   child writes the next; the rest (all of it when CHUNK is 0) comes at the
//   end.  A streamed output past copier_threshold whose child outpaces the
//   caller is drained by a copy thread from then on.
// Whatever the path, a quit hands over everything read (CallResult::quit).
// The child is reaped on every way out; the process group is signalled on a
// quit.
CallResult run_call(Child& child, std::uint64_t chunk, const CallHooks& hooks);

}  // namespace fastrevert
