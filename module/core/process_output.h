// The record of one asynchronous child's output: what was read from its
// pipes and what was delivered to Emacs.
//
// The thread that reads the child (the engine's, or the main thread while
// it serves a young child itself, see core/handoff.h) is the producer: it
// appends what it read (framed as the process asks) and, at the end, how the
// child ended.  Emacs's main thread is the consumer: it claims the next piece
// (text of one stream, a range of stdout's memfd, or the end), hands it to
// Lisp, and commits what Lisp took.  Bytes leave this object only when they
// are committed, so a delivery that Lisp abandons before the consumer got it
// (a quit, an error) leaves them here, at the head of their stream, for the
// next delivery.
//
// One bound, the backlog, covers everything that waits here: text, memfd
// ranges not yet delivered, and a framer's unfinished unit.  The producer
// reads no more once the backlog is full, so a child that outruns Emacs
// waits on its full pipe, as with stock Emacs; the consumer says when it
// has taken the backlog down far enough for reading to resume.
//
// Each stream's pieces come in the order they were read; the two streams
// are each claimed in the order their bytes arrived, except that a stream
// whose head is an unfinished character does not hold up the other.  The
// end comes after every byte of both streams.
//
// Thread-safety: every method may be called from any thread; the producer's
// are called by one thread at a time, and so are the consumer's.  A mutex
// guards the pieces; the producer appends only behind the piece the
// consumer has claimed, so the consumer reads a claimed piece without it.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include "core/child.h"
#include "core/fd.h"

namespace fastrevert {

// A process's backlog unless it asks for another: what the engine reads
// ahead of Emacs before the child waits on its full pipe.
inline constexpr std::uint64_t kDefaultBacklog = std::uint64_t{16} << 20;

class ProcessOutput {
 public:
  using Clock = std::chrono::steady_clock;

  // How the consumer turns the bytes into text, which decides where a piece
  // may end.
  enum class Decode : std::uint8_t {
    // UTF-8: a piece never ends inside a character while more may follow.
    utf8,
    // Raw bytes, or a coding Lisp decodes itself (holding back what it
    // must): a piece may end anywhere.
    bytes,
  };

  struct Config {
    std::uint64_t backlog = kDefaultBacklog;
    Decode decode = Decode::bytes;
    // The producer appends whole units (framed lines or LSP messages): a
    // piece of text is never cut inside one, whatever the cap.
    bool whole_units = false;
    // The consumer is told as soon as anything waits, even while the
    // stream streams: for requests and replies (LSP), where a batch's
    // delay would be added to every round trip.
    bool prompt = false;
  };

  // The streams, as the consumer numbers them for Lisp.
  static constexpr int kStdout = 0;
  static constexpr int kStderr = 1;

  // What the consumer delivers next.
  struct Piece {
    enum class Kind : std::uint8_t { none, text, range, end };
    Kind kind = Kind::none;
    int stream = kStdout;
    // Text: the bytes, valid until commit() or release().
    std::string_view bytes;
    // Range: bytes [from, to) of stdout's memfd, read through memfd.
    int memfd = -1;
    std::uint64_t from = 0;
    std::uint64_t to = 0;
    // End: how the child ended, or why the engine gave it up (failed).
    ExitStatus status;
    bool failed = false;
    std::string reason;
  };

  // When the consumer is to be told that something waits.
  enum class Notify : std::uint8_t { none, now, later };

  explicit ProcessOutput(Config config);
  ~ProcessOutput();

  ProcessOutput(const ProcessOutput&) = delete;
  ProcessOutput& operator=(const ProcessOutput&) = delete;

  const Config& config() const noexcept { return config_; }

  // ---- The producer ----

  // How many more bytes may be read before the backlog is full (0 when it
  // is).  Lock-free: an estimate the producer checks before each read.
  std::uint64_t room() const noexcept;
  // BYTES of STREAM, framed as complete units (or passed through).
  void append(int stream, std::string_view bytes);
  // The size of STREAM's unfinished unit, held by its framer: it counts
  // towards the backlog.
  void set_partial(int stream, std::uint64_t bytes);
  // Stdout goes on through a memfd from now on; CONSUMER_FD is a descriptor
  // of it that this object owns and the consumer reads through.
  void start_memfd(UniqueFd consumer_fd);
  // The producer wrote memfd bytes [FROM, TO); LAST holds the final bytes
  // of the stream so far (up to 4), for the consumer to see whether a
  // character is unfinished without reading the file.
  void memfd_written(std::uint64_t from, std::uint64_t to, std::string_view last);
  // How far the consumer has delivered stdout's memfd, whose memory before
  // that may be given back.
  std::uint64_t memfd_delivered() const noexcept {
    return memfd_delivered_.load(std::memory_order_relaxed);
  }
  // The consumer's descriptor of stdout's memfd, or -1; it stays open as
  // long as this object lives.
  int memfd() const;
  // STREAM reached its end: what it holds may end in an unfinished
  // character now.
  void end_stream(int stream);
  // The child ended as STATUS, after all its output.
  void finish(const ExitStatus& status);
  // The engine gave the child up for REASON (and killed it); what was read
  // is still delivered first.  Never throws: it runs when memory ran out.
  void fail(const char* reason) noexcept;
  // The producer stopped reading because room() was 0; the consumer says
  // (commit() returns true) when reading should resume.
  void note_throttled();
  // Whether the producer stopped so and has not been told to resume.
  bool throttled() const;

  // Whether, and when, the consumer should be told now that something
  // waits.  `now' marks it told: the caller then tells it.  While the
  // consumer holds a claimed piece (its filter runs, and may wait for more),
  // what comes is told once at once, for it to learn that output came.  `later' sets
  // DEADLINE: the caller asks again then (notify_due).  A child whose
  // output streams (the consumer took some within the last moment) is told
  // once 64 KiB gather or 5 ms after its first byte waited, so that each
  // delivery carries much; its first bytes after a quiet spell, its end,
  // and a full backlog are told at once.
  Notify notify_decision(Clock::time_point now, Clock::time_point& deadline);
  // For a `later': whether the consumer should be told now (and then marks
  // it told).
  bool notify_due(Clock::time_point now);

  // ---- The consumer ----

  // Claims the next piece into PIECE, text of at most MAX_TEXT bytes
  // (where the bytes allow a cut: never inside a character, nor inside a
  // unit under Config::whole_units), and returns true; false when nothing is
  // ready (the end already delivered, or bytes still to come).  A range is
  // cut as text is, at MAX_RANGE bytes (MAX_RANGE > 0) or where the
  // character there began; it goes whole if its bytes cannot be read back
  // to find that.  Each claim is followed by commit() or release() before
  // the next.
  bool claim(Piece& piece, std::size_t max_text,
             std::uint64_t max_range = std::numeric_limits<std::uint64_t>::max());
  // The claimed piece was delivered.  Returns true when the producer
  // stopped for a full backlog and should read again now.
  bool commit();
  // Nothing of the claimed piece was delivered: it stays at the head.
  void release();
  // Called when claim() found nothing, or the consumer stops taking: the
  // consumer is no longer told, and is told of what comes next.  Returns
  // false, staying told, when something is ready (it came meanwhile, or
  // was left), for the consumer to claim again.
  bool settle();
  // Whether the end was delivered: nothing more will come.
  bool done() const;

  // ---- Files of LSP message bodies, printed as Lisp or JSON as they came
  // (see LispBodyFiler in core/json_lisp.h) ----

  // The producer keeps FD, a file of SIZE bytes that a message's body
  // stands for, for the consumer; returns its token (1, 2, ...).  Its bytes
  // count towards the backlog until the file is released.
  std::uint64_t add_lisp_file(UniqueFd fd, std::uint64_t size);
  // The descriptor of file TOKEN, open until it is released; -1 when it
  // was released or never was.
  int lisp_file(std::uint64_t token) const;
  // The consumer read file TOKEN: closes it and every file before it (whose
  // messages the client passed over).  Returns true when the producer
  // stopped for a full backlog and should read again now.
  bool release_lisp_files(std::uint64_t token);

  // What waits here now, and the most that ever waited beyond the backlog.
  std::uint64_t waiting() const noexcept { return waiting_.load(std::memory_order_relaxed); }
  std::uint64_t overrun() const noexcept { return overrun_.load(std::memory_order_relaxed); }

 private:
  struct Segment {
    bool range = false;
    // Text: the bytes from OFFSET on wait; those before it were delivered.
    std::string text;
    std::size_t offset = 0;
    std::uint64_t from = 0;
    std::uint64_t to = 0;
    // For a range: the last bytes of the stream up to TO (4 at most).
    char last[4] = {0, 0, 0, 0};
    std::uint8_t last_size = 0;

    std::uint64_t size() const noexcept { return range ? to - from : text.size() - offset; }
    std::string_view view() const noexcept { return std::string_view(text).substr(offset); }
  };
  struct Stream {
    std::deque<Segment> segments;
    // Arrival numbers of the segments, for the order between streams.
    std::deque<std::uint64_t> arrivals;
    std::uint64_t partial = 0;
    bool ended = false;
  };

  // Adds SIZE (or takes it away) from what waits; mutex_ held.
  void add_waiting_locked(std::uint64_t size);
  void sub_waiting_locked(std::uint64_t size);
  // Whether the head of STREAM can be delivered now, and how much of it.
  // mutex_ held.
  bool ready_locked(int stream);
  // Fills PIECE from the head of STREAM; mutex_ held.
  bool claim_locked(int stream, Piece& piece, std::size_t max_text, std::uint64_t max_range);
  // claim() and release() with mutex_ held.
  bool claim_next_locked(Piece& piece, std::size_t max_text, std::uint64_t max_range);
  void release_locked();
  // Where a range [FROM, TO) of stdout's memfd cut at CUT (FROM < CUT < TO)
  // may end: where a character ends, for UTF-8.
  std::uint64_t range_cut(std::uint64_t from, std::uint64_t cut, std::uint64_t to) const;
  // Borrows the rest of an unfinished character from the segment after the
  // head of STREAM into scratch_; mutex_ held.  Returns whether it could.
  bool borrow_locked(Stream& stream, std::size_t cut);

  const Config config_;
  mutable std::mutex mutex_;
  Stream streams_[2];
  std::uint64_t next_arrival_ = 0;
  // The consumer's descriptor of stdout's memfd.
  UniqueFd memfd_;
  // Files of message bodies by token, with their sizes.
  std::map<std::uint64_t, std::pair<UniqueFd, std::uint64_t>> lisp_files_;
  std::uint64_t last_lisp_file_ = 0;
  bool finished_ = false;
  bool failed_ = false;
  ExitStatus status_;
  std::string reason_;
  bool end_delivered_ = false;

  // What the consumer has claimed: which stream's head (-1 none, 2 the end),
  // and for text, how many bytes of it (the piece may be shorter than the
  // segment); borrowed continuation bytes of a character live in scratch_.
  int claimed_ = -1;
  std::size_t claimed_bytes_ = 0;
  std::size_t borrowed_ = 0;
  std::string scratch_;

  // Whether the consumer has been told, and when the first byte not yet
  // told of arrived.
  bool notified_ = false;
  // Whether the consumer was told of output that came while it held a
  // claimed piece (see notify_decision).
  bool told_while_claimed_ = false;
  bool untold_ = false;
  Clock::time_point untold_since_{};
  Clock::time_point last_commit_{};
  bool throttled_ = false;

  // Mirrors of the counts above, for the lock-free room() and the stats.
  std::atomic<std::uint64_t> waiting_{0};
  std::atomic<std::uint64_t> overrun_{0};
  std::atomic<std::uint64_t> memfd_delivered_{0};
};

}  // namespace fastrevert
