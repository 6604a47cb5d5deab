// The process table: asynchronous children whose output the engine reads.
//
// Every method runs on the thread that runs the table: the engine thread for
// the engine's table (post a command to reach it).  The table watches each
// child's stdout and stderr with uv_poll, its exit with a uv_poll on its
// exit descriptor (core/child_exit.h: a pidfd, or a kqueue; where there is
// none, a uv_timer that calls waitpid(pid, WNOHANG) on that pid only), and
// feeds its stdin without ever blocking; a table without a loop leaves the
// watching to its thread (see core/handoff.h).  It installs no signal handler and never waits on
// any pid but its own children's, so Emacs keeps SIGCHLD and its own subprocesses.
//
// What a child's pipes give goes into its ProcessOutput (see
// core/process_output.h), the one record of what was read and what Emacs
// took, shared with the main thread.  A stream's poll callback runs once per
// loop iteration in which the pipe is readable and reads until the pipe is
// empty (or 16 reads were done, so that one firehose cannot starve the rest
// of the loop).  Before each read it asks the output for room: once the
// process's backlog is full the stream is no longer polled, so the child
// waits on its full pipe, as with stock Emacs, until Emacs has taken the
// backlog down (resume()).
// - With Options::framing, only complete units reach the output, and the
//   framer's unfinished unit counts towards the backlog; a unit longer than
//   the backlog goes on in pieces instead of waiting whole.
// - With Options::stdout_to_memfd, once more than Options::memfd_threshold
//   bytes of stdout were read, stdout goes to a memfd (an anonymous
//   in-memory file; where there is none, a file removed as it is made:
//   core/spill.h), by splice(2) where it can, and the output gets ranges of
//   it instead of bytes.  The memory of what Emacs has delivered is given
//   back as the file grows.  If the memfd cannot be made or written, a
//   notice says so and the rest goes as bytes.  A small output thus never
//   costs a file.
// - Exactly once, after both pipes reached end of file (or were closed) and
//   the child was reaped, the output learns how it ended; or, when the table
//   cannot go on with the child (memory ran out while its output was read),
//   why it gave the child up, having killed it.  No exception leaves a
//   callback of the table: libuv cannot unwind one, and std::terminate would
//   end Emacs.
// - The consumer is told through a process_ready record, one at a time per
//   process, when the output says so: at once for the first bytes after a
//   quiet spell and for the end, and for a child that streams, once 64 KiB
//   gather or after 5 ms (a timer of the table's).
// A removed process tells nothing more.
//
// A table runs on one loop and one thread at a time.  The engine's table runs
// on the engine thread; the main thread may run a table of its own while it
// waits (see core/handoff.h).  A child moves between them as a
// ProcessHandover, which carries everything read and framed so far, so that
// no byte is lost or reordered on the way.  What it does not carry is memory
// of the table it left: a table's reads all go into that table's one scratch
// buffer, which only its own thread touches.
#pragma once

#include <poll.h>
#include <sys/types.h>
#include <uv.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/child.h"
#include "core/engine.h"
#include "core/direct_input.h"
#include "core/framing.h"
#include "core/json_lisp.h"
#include "core/pipe.h"
#include "core/process_output.h"

namespace fastrevert {

class ProcessHandover;

// How many bytes of a child's stdout go to Emacs as bytes before a memfd
// takes over (Options::memfd_threshold): a small output is cheaper as a
// string than as a file, and a large one makes no garbage through the file.
inline constexpr std::size_t kMemfdThreshold = 16384;

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
    // Unframed stdout goes to a memfd once more than memfd_threshold bytes
    // of it were read, see above.  The table closes its own descriptor of
    // the memfd once stdout has reached end of file or the process is
    // removed.  Writes go at explicit offsets, so the shared file offset is
    // never used.
    bool stdout_to_memfd = false;
    std::size_t memfd_threshold = 0;
    // With Framing::lsp on stdout: each message's JSON body is turned into
    // printed Lisp as this says, where it converts (see core/json_lisp.h).
    std::shared_ptr<const JsonLisp> lisp_replies;
    // With Framing::lsp on stdout: a body this long or longer (with
    // lisp_replies, whose Lisp is) goes to a file of its own
    // (core/spill.h), which the output keeps, and the message's body names
    // it instead (see LispBodyFiler, lsp_bodies_to_files); 0 never does.
    std::size_t lisp_file_threshold = 0;
    // Where Lisp writes the child's input itself while the engine has none
    // of it left to write (see core/direct_input.h); the table tells it what
    // it wrote of what it was handed, and when the input closes.
    std::shared_ptr<DirectInput> direct_input;
    // Where the output goes; a table makes one with the default backlog
    // when this is null.
    std::shared_ptr<ProcessOutput> output;

    // Test hooks: paths the tests reach on purpose.  No caller outside the
    // tests sets them.
    // Watch the exit with the waitpid timer even when an exit descriptor
    // exists, as where there is none.
    bool poll_exit_with_waitpid = false;
    // Fill the memfd with read and pwrite from the start, as after a failed
    // splice.
    bool memfd_without_splice = false;
    // The first read of the child's output throws std::bad_alloc, as a read
    // buffer that cannot be allocated would.
    bool test_fail_first_read = false;
    // When not 0, a write that would take the memfd past this many bytes
    // fails with EFBIG, as past a file size limit.  Only the read and pwrite
    // path checks it (see memfd_without_splice).
    std::uint64_t test_memfd_size_limit = 0;
  };

  // The engine's table: on the engine's loop, its records wake Emacs.
  explicit ProcessTable(Engine& engine);
  // A table on LOOP, run by whichever thread runs LOOP, whose records go to
  // ENGINE's outbox; WAKE says whether they wake the consumer (see
  // Engine::Wake).  With LOOP null the table has no loop and no handle: its
  // thread polls the descriptors that watched() names and hands what is
  // ready to serve().  Such a table writes a child's queued input only as
  // far as the pipe takes it at once; the rest waits for the next table.
  ProcessTable(Engine& engine, uv_loop_t* loop, Engine::Wake wake);

  // What a descriptor of a table without a loop stands for.
  enum class Watch : std::uint8_t { out, err, exit };
  using Clock = std::chrono::steady_clock;
  // Appends to FDS a pollfd (POLLIN) for every descriptor of the table's
  // children that waits for an event, and to OWNERS who it is for.  The
  // output of a child younger than QUIET (since it was spawned) is not
  // watched, only its exit: a child that ends that soon is then read and
  // reaped after one wake-up instead of one per event, and any other has its
  // first output read QUIET after its start at the latest.  Returns when
  // the set of watched descriptors changes next (a child coming of age), or
  // Clock::time_point::max().
  Clock::time_point watched(std::vector<pollfd>& fds,
                            std::vector<std::pair<std::uint64_t, Watch>>& owners,
                            Clock::time_point now, Clock::duration quiet) const;
  // Serves the events poll(2) reported in FDS, as watched() filled them and
  // OWNERS; an exit also reads what the child left in its pipes.  A child
  // without an exit descriptor is looked at each time.
  void serve(const std::vector<pollfd>& fds,
             const std::vector<std::pair<std::uint64_t, Watch>>& owners);
  ~ProcessTable() override;

  ProcessTable(const ProcessTable&) = delete;
  ProcessTable& operator=(const ProcessTable&) = delete;

  // Spawns SPEC and adopts the child as ID.  Throws SystemError when the
  // spawn fails (nothing is recorded then), or std::invalid_argument when ID
  // is in use.
  void start(std::uint64_t id, const SpawnSpec& spec, const Options& options);

  // Takes over CHILD, already spawned (for example by the main thread, so
  // that a spawn error reaches Lisp synchronously; post it in a shared_ptr,
  // since a Command must be copyable), as ID.  Throws std::invalid_argument
  // when ID is in use, or std::logic_error after shutdown(), having killed
  // and reaped CHILD, so that nothing leaks.  A CHILD whose pid is -1 is
  // descriptors alone, with no process of ours behind them (named pipes to
  // a process someone else started): it is never waited for or signalled,
  // and it ends, as exited with code 0, once its output reached end of file.
  void adopt(std::uint64_t id, Child child, const Options& options);

  // Takes over the child in HANDOVER as ID, going on from where its last
  // table left it.  On failure throws as adopt() above, having killed and
  // reaped the child.
  void adopt(std::uint64_t id, std::unique_ptr<ProcessHandover> handover);

  // Like adopt(), but reports a failure as records instead of throwing: a
  // notice, then the child's process_exit with code -1, so that its owner
  // learns that it is gone.
  void adopt_or_report(std::uint64_t id, std::unique_ptr<ProcessHandover> handover);

  // Takes ID out of the table, alive and with all it has not yet emitted
  // (framed bytes held back, its stdin queue, whether it was reaped), for
  // another table to adopt.  Reading resumes there, even if set_reading()
  // stopped it here.  Returns nullptr when ID is unknown.
  std::unique_ptr<ProcessHandover> hand_over(std::uint64_t id);

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

  // Reads ID's output again if it stopped for a full backlog: Emacs has
  // taken it down.  Returns false when ID is unknown.
  bool resume(std::uint64_t id);

  // Forgets ID: SIGKILLs the child if it is still running, closes its pipes,
  // and reaps it in the background (a table without a loop: at once).  No
  // further record is emitted for it, and ID may be reused at once.  Returns
  // false when ID is unknown.
  bool remove(std::uint64_t id);

  // Whether ID is in the table (started and its exit record not yet emitted).
  bool contains(std::uint64_t id) const { return processes_.count(id) != 0; }
  // The number of processes in the table.
  std::size_t size() const noexcept { return processes_.size(); }
  // The ids in the table.
  std::vector<std::uint64_t> ids() const;
  // How many bytes of ID's stdout and stderr were read so far, or 0.
  std::uint64_t bytes_read(std::uint64_t id) const;
  // Whether some child has had more than BYTES of output read.
  bool streams(std::uint64_t bytes) const;
  // The child's pid (for `process-id'), or -1 when ID is unknown.
  pid_t pid(std::uint64_t id) const;
  // The number of stdin bytes queued for ID, or 0.
  std::size_t queued_stdin_bytes(std::uint64_t id) const;
  // ID's output, or null when ID is unknown.
  std::shared_ptr<ProcessOutput> output(std::uint64_t id) const;

  // SIGKILLs every child not yet reaped, reaps them all (blocking briefly: a
  // SIGKILLed child dies at once), and closes every handle and descriptor.
  void shutdown() override;

  struct Process;
  struct Stream;

 private:
  static void on_stream_readable(uv_poll_t* handle, int status, int events);
  static void on_stdin_writable(uv_poll_t* handle, int status, int events);
  static void on_exit_readable(uv_poll_t* handle, int status, int events);
  static void on_exit_timer(uv_timer_t* handle);
  static void on_batch_timer(uv_timer_t* handle);
  static void on_pause_timer(uv_timer_t* handle);
  static void on_handle_closed(uv_handle_t* handle);

  friend class ProcessHandover;
  // A Process for CHILD, which gives it its descriptors, with no handle yet.
  static std::unique_ptr<Process> process_from_child(Child& child, const Options& options);
  // Moves the child and all state but the handles from FROM to TO.
  static void move_state(Process& from, Process& to) noexcept;
  // Kills and reaps the child of a Process that no table runs, and closes its
  // descriptors.
  static void discard(Process& process) noexcept;
  // Runs STEP, the work of a callback for PROCESS, so that no exception
  // leaves it: a failure becomes fail().
  template <typename Step>
  void guarded(Process& process, Step&& step) noexcept;
  // Gives PROCESS up after WHAT went wrong: reports a process_error record
  // (once), kills the child and closes its pipes.
  void fail(Process& process, const char* what) noexcept;
  // Puts PROCESS in the table as ID and starts watching it.
  void install(std::uint64_t id, std::unique_ptr<Process> owned);

  void read_stream(Process& process, Stream& stream);
  // Hands what STREAM read to the output, framed; AT_EOF flushes the
  // framer.
  void deliver(Process& process, Stream& stream, bool at_eof);
  // UNITS, whole LSP messages that STREAM's framer handed over, with their
  // bodies printed as Lisp, or put in files, as PROCESS's options say.
  static std::string rewrite_lsp(Process& process, Stream& stream, std::string units);
  // Makes STREAM's memfd once more than the threshold was read, gives the
  // output a descriptor of it and moves there what this wake-up has read.
  // Returns whether the stream now writes to a memfd.
  bool start_memfd(Process& process, Stream& stream);
  // Appends BYTES to STREAM's memfd and tells the output.  Returns false,
  // having closed the memfd and emitted a notice, when the write fails;
  // BYTES must then go as bytes.
  bool append_to_memfd(Process& process, Stream& stream, std::string_view bytes);
  // Moves what the pipe holds, at most MAX bytes, into STREAM's memfd.
  // Returns 1 when bytes moved, 0 when the pipe is empty, -1 at end of file,
  // -2 when splicing failed (the read path takes over).
  int splice_to_memfd(Process& process, Stream& stream, std::size_t max);
  // Records ADDED more bytes in STREAM's memfd, of which LAST are the final
  // ones (up to 4), and tells the output.
  void announce_memfd(Process& process, Stream& stream, std::string_view last, std::uint64_t added);
  void close_stream(Process& process, Stream& stream);
  // Starts or stops STREAM's poll as its reading_stopped, throttled and
  // paused say.
  void update_polling(Stream& stream);
  // Stops polling STREAM, which streams in small pieces, until the pause
  // timer runs (see kPauseMs in process_table.cpp), having grown its pipe;
  // not for an output whose consumer is told at once.
  void pause(Process& process, Stream& stream);
  // Stops reading STREAM, and returns true, when the process's backlog is
  // full; reading resumes with resume().
  bool throttle(Process& process, Stream& stream);
  // Tells the consumer of PROCESS's output that something waits, now or
  // (for a child that streams) once the batch timer says.
  void notify(Process& process);
  // Tells the consumers whose batch time has come.
  void notify_due();
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
  uv_loop_t* loop_;
  Engine::Wake wake_;
  // One scratch buffer for every stream's reads: the table's thread reads one
  // stream at a time and copies the bytes out before the next read.  A
  // child adopted from another table reads into it from then on (see
  // install()), never into that table's, which another thread uses.
  std::shared_ptr<ReadScratch> read_scratch_;
  // Live processes by id.  Engine thread only.
  std::unordered_map<std::uint64_t, std::unique_ptr<Process>> processes_;
  // Processes that were removed or finished but still have handles closing
  // (or, once removed, a child not yet reaped).  Engine thread only.
  std::unordered_map<Process*, std::unique_ptr<Process>> retiring_;
  bool shutting_down_ = false;
  // Processes whose consumer is to be told once their batch time comes, by
  // batch_timer_ (a table with a loop only).
  std::vector<std::pair<Clock::time_point, std::uint64_t>> deferred_;
  uv_timer_t batch_timer_{};
  bool batch_timer_open_ = false;
  Clock::time_point batch_timer_due_ = Clock::time_point::max();
  // Processes with a paused stream, polled again when pause_timer_ runs.
  std::vector<std::uint64_t> paused_;
  uv_timer_t pause_timer_{};
  bool pause_timer_open_ = false;
};

// A child between tables (see above): made from a freshly spawned Child, or
// by ProcessTable::hand_over().  Destroying one that no table adopted kills
// and reaps its child and closes its descriptors.
class ProcessHandover {
 public:
  // Takes CHILD's descriptors, whatever happens.
  ProcessHandover(Child child, const ProcessTable::Options& options);
  ~ProcessHandover();

  ProcessHandover(const ProcessHandover&) = delete;
  ProcessHandover& operator=(const ProcessHandover&) = delete;

 private:
  friend class ProcessTable;
  ProcessHandover() = default;
  std::unique_ptr<ProcessTable::Process> process_;
};

}  // namespace fastrevert
