// The process table: asynchronous children whose output the engine reads.
//
// Every method runs on the engine thread (post a command to reach it).  The
// table watches each child's stdout and stderr with uv_poll, its exit with a
// uv_poll on its pidfd (or, on kernels without pidfd_open, a uv_timer that
// calls waitpid(pid, WNOHANG) on that pid only), and feeds its stdin without
// ever blocking.  It installs no signal handler and never waits on any pid but
// its own children's, so Emacs keeps SIGCHLD and its own subprocesses.
//
// Records, per process ID:
// - process_output (code 1 stdout, 2 stderr): the bytes of one stream, framed
//   as Options say (only complete units, and the tail at end of file).  Each
//   stream's records are in stream order.  Coalescing: a stream's poll
//   callback runs once per loop iteration in which the pipe is readable,
//   reads until the pipe is empty (or 16 reads were done, so that one
//   firehose cannot starve the rest of the loop), and emits at most one
//   record; a stream therefore costs at most one record per loop iteration
//   however small its writes, and a burst that outruns the reader arrives in
//   large records.  Records go out with Engine::emit_coalesced, so a record
//   the main thread has not drained yet is extended instead.
// - process_output with code kStdoutRangeCode, instead of code 1, when
//   Options::stdout_memfd is set: stdout's bytes (framed as Options say) are
//   appended to that file, and the record says how far it is now written.
//   Its data is one or more 12-byte entries, the newest last (coalescing
//   appends): the file's new size as 8 bytes little-endian, then the last 4
//   bytes of the stream so far (zeros in front while it is shorter), so that
//   the reader can tell an unfinished character at the end without reading
//   the file.  If a write to the file fails, a notice says so and the rest
//   of stdout comes as ordinary code 1 records.
// - process_exit (code: the raw wait status, or -1 when someone else reaped
//   the child): exactly one, after both output pipes reached end of file (or
//   were closed) and the child was reaped, so it follows all output.
// A removed process emits nothing more.
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/engine.h"
#include "core/framing.h"
#include "core/reader.h"
#include "core/spawn.h"

namespace fastrevert {

class ProcessTable : public Service {
 public:
  struct Options {
    // The first read size (Emacs's `read-process-output-max') and the cap
    // the adaptive reader doubles up to.
    std::size_t initial_read_size = 65536;
    std::size_t max_read_size = kDefaultMaxReadSize;
    // How stdout and stderr are cut into records.
    Framing framing = Framing::none;
    Framing stderr_framing = Framing::none;
    // signal() and remove() signal the child's whole process group; for
    // children spawned with SpawnSpec::new_session.
    bool signal_process_group = false;
    // Watch the exit with the waitpid timer even when a pidfd exists.  For
    // tests of the fallback path.
    bool poll_exit_with_waitpid = false;
    // When >= 0, a file (a memfd) that receives stdout instead of records,
    // see above.  The table owns it from the call to start() or adopt() on,
    // whether that succeeds or throws, and closes it once stdout has reached
    // end of file or the process is removed; the caller keeps a descriptor
    // of its own (a dup) to read it.  Writes go at explicit offsets, so the
    // shared file offset is never used.
    int stdout_memfd = -1;
    // Fill the memfd with read and pwrite from the start, as after a failed
    // splice.  For tests of that path.
    bool memfd_without_splice = false;
  };

  // The record code of stdout ranges written to Options::stdout_memfd.
  static constexpr int kStdoutRangeCode = 3;
  // The size of one entry of such a record's data.
  static constexpr std::size_t kRangeEntrySize = 12;

  explicit ProcessTable(Engine& engine);
  ~ProcessTable() override;

  ProcessTable(const ProcessTable&) = delete;
  ProcessTable& operator=(const ProcessTable&) = delete;

  // Spawns SPEC and adopts the child as ID.  Throws SystemError when the
  // spawn fails (nothing is recorded then), or std::invalid_argument when ID
  // is in use.  Either way OPTIONS.stdout_memfd is closed.
  void start(std::uint64_t id, const SpawnSpec& spec, const Options& options);

  // Takes over CHILD, already spawned (for example by the main thread, so
  // that a spawn error reaches Lisp synchronously; post it in a shared_ptr,
  // since a Command must be copyable), as ID.  Throws std::invalid_argument
  // when ID is in use, or std::logic_error after shutdown(), having killed
  // and reaped CHILD, so that nothing leaks.
  void adopt(std::uint64_t id, Child child, const Options& options);

  // Queues DATA for the child's stdin and writes what the pipe takes now; the
  // rest goes out as the child reads.  Never blocks.  Returns false (dropping
  // DATA) when ID is unknown, has no stdin pipe, or its stdin was closed
  // (by close_stdin or because the child closed its end).
  bool write_stdin(std::uint64_t id, std::string data);

  // Closes the child's stdin once every queued byte is written (end of file
  // for the child).  Returns false when ID is unknown.
  bool close_stdin(std::uint64_t id);

  // Sends SIGNAL_NUMBER to the child (or its group, see Options).  Returns
  // false when ID is unknown or the child was already reaped.
  bool signal(std::uint64_t id, int signal_number);

  // Stops or resumes reading the child's output.  A stopped child blocks once
  // its pipes fill: flow control for a consumer that falls behind.  Returns
  // false when ID is unknown.
  bool set_reading(std::uint64_t id, bool reading);

  // Forgets ID: SIGKILLs the child if it is still running, closes its pipes,
  // and reaps it in the background.  No further record is emitted for it, and
  // ID may be reused at once.  Returns false when ID is unknown.
  bool remove(std::uint64_t id);

  // Whether ID is in the table (started and its exit record not yet emitted).
  bool contains(std::uint64_t id) const { return processes_.count(id) != 0; }
  // The number of processes in the table.
  std::size_t size() const noexcept { return processes_.size(); }
  // The child's pid (for `process-id'), or -1 when ID is unknown.
  pid_t pid(std::uint64_t id) const;
  // The number of stdin bytes queued for ID, or 0.
  std::size_t queued_stdin_bytes(std::uint64_t id) const;

  // SIGKILLs every child not yet reaped, reaps them all (blocking briefly: a
  // SIGKILLed child dies at once), and closes every handle and descriptor.
  void shutdown() override;

  struct Process;
  struct Stream;

 private:
  static void on_stream_readable(uv_poll_t* handle, int status, int events);
  static void on_stdin_writable(uv_poll_t* handle, int status, int events);
  static void on_pidfd_readable(uv_poll_t* handle, int status, int events);
  static void on_exit_timer(uv_timer_t* handle);
  static void on_handle_closed(uv_handle_t* handle);

  void read_stream(Process& process, Stream& stream);
  void deliver(Process& process, Stream& stream, bool at_eof);
  // Appends BYTES to STREAM's memfd and emits the range record.  Returns
  // false, having closed the memfd and emitted a notice, when the write
  // fails; BYTES must then go out as an ordinary record.
  bool append_to_memfd(Process& process, Stream& stream, std::string_view bytes);
  // Moves what the pipe holds into STREAM's memfd and announces it.  Returns
  // 1 when bytes moved, 0 when the pipe is empty, -1 at end of file, -2 when
  // splicing failed (the read path takes over).
  int splice_to_memfd(Process& process, Stream& stream);
  // Records ADDED more bytes in STREAM's memfd, of which LAST are the final
  // ones (up to 4), and emits the range record.
  void announce_memfd(Process& process, Stream& stream, std::string_view last, std::uint64_t added);
  void close_stream(Process& process, Stream& stream);
  void write_queued_stdin(Process& process);
  void close_stdin_now(Process& process);
  void try_reap(Process& process);
  void stop_exit_watch(Process& process);
  void send_signal(Process& process, int signal_number);
  // Emits the exit record and retires PROCESS once it is reaped and both
  // pipes are closed.
  void maybe_finish(Process& process);
  // Moves PROCESS out of processes_ into retiring_, closing its handles; it is
  // freed once the last close callback has run.
  void retire(Process& process);
  void close_handle(Process& process, uv_handle_t* handle);
  void free_if_closed(Process& process);

  Engine& engine_;
  // One scratch buffer for every stream's reads: the engine thread reads one
  // stream at a time and copies the bytes out before the next read.
  std::shared_ptr<ReadScratch> read_scratch_;
  // Live processes by id.  Engine thread only.
  std::unordered_map<std::uint64_t, std::unique_ptr<Process>> processes_;
  // Processes that were removed or finished but still have handles closing
  // (or, once removed, a child not yet reaped).  Engine thread only.
  std::unordered_map<Process*, std::unique_ptr<Process>> retiring_;
  bool shutting_down_ = false;
};

}  // namespace fastrevert
