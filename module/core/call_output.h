// The record of one synchronous call's output: what was read from the
// child's stdout and what was handed to the caller.
//
// run_call() takes output by several paths (a string, ranges of a memfd read
// on the calling thread, a copy thread past a few MiB, a caller that reads a
// pipe whose writers are gone), and the child's pace moves a call from one to
// another while it runs.  Every path writes through this object and every
// byte handed over leaves through it, so that one rule holds whichever path
// ran: on a quit, everything read reaches the caller, up to the last whole
// character (hand_on_quit).
//
// Each hand-over is at most kLargestHandOver bytes, cut where a line or at
// least a character ends, for output that can be cut: the caller inserts
// each with quit inhibited (an insert stopped half-way keeps nothing in
// Emacs), so a hand-over must be short enough for a quit to wait for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "core/fd.h"

namespace fastrevert {

class MemfdCopier;

// Where a cut of an output may fall, so that a prefix decodes as the start
// of the whole would: the caller knows the coding system and says which.
enum class OutputCut {
  // After any byte below 0x80 but an ASCII digit (maybe the second byte of a
  // four-byte GB18030 character) or a CR (maybe half a CRLF): a character
  // ends there in every ASCII-compatible coding system (Shift-JIS, Big5,
  // GB18030, the EUCs, UTF-8, single-byte charsets).
  ascii,
  // After any byte but one that leaves a UTF-8 sequence unfinished, or a CR.
  utf8,
  // After any byte but a CR: raw bytes, where every byte is a character.
  bytes,
};

// The end of the longest prefix of BYTES after which RULE allows a cut, or 0.
std::size_t cut_end(std::string_view bytes, OutputCut rule) noexcept;

// A hand-over's largest size, for output that can be cut.
inline constexpr std::uint64_t kLargestHandOver = std::uint64_t{4} << 20;

struct OutputHooks {
  // Bytes handed over as a string (while they fit one).
  std::function<void(std::string_view bytes)> insert_bytes;
  // Bytes [FROM, TO) of MEMFD.
  std::function<void(int memfd, std::uint64_t from, std::uint64_t to)> insert_range;
};

class CallOutput {
 public:
  // STEP is the caller's chunk: 0 for output that cannot be cut (it is
  // handed over whole, at the end or at a quit), else the least a
  // hand-over of whole lines gathers while the child runs.  Up to
  // STRING_LIMIT bytes are kept in a string, the rest in a memfd.
  CallOutput(const OutputHooks& hooks, std::uint64_t step, OutputCut cut, std::size_t string_limit);

  CallOutput(const CallOutput&) = delete;
  CallOutput& operator=(const CallOutput&) = delete;

  // Bytes just read from the pipe on the calling thread.
  void take(const char* bytes, std::size_t size);
  // The memfd, made now if it was not (the string moves into it), for a
  // copy thread to write into from read().
  int spill();
  // A copy thread has written the memfd up to END, and gives back the
  // memory of what is handed over while COPIER is set.
  void copied_to(std::uint64_t end);
  void set_copier(MemfdCopier* copier) noexcept { copier_ = copier; }
  // The caller read BYTES straight from the pipe into its buffer.
  void read_by_caller(std::uint64_t bytes) noexcept;

  // While the child runs: hands over the whole lines read so far, when
  // they come to the step or when the child has gone quiet (as stock would
  // have inserted them by then), and anything past kLargestHandOver.
  void hand_lines(bool gone_quiet);
  // At the end of the output: hands over everything not handed yet.
  void hand_rest();
  // On a quit: hands over everything read, up to the last whole character.
  void hand_on_quit();

  std::uint64_t read() const noexcept { return read_; }
  std::uint64_t handed() const noexcept { return handed_; }
  bool spilled() const noexcept { return static_cast<bool>(memfd_); }

 private:
  // Hands over [handed_, TO), in pieces of at most kLargestHandOver when
  // the output can be cut.
  void hand_to(std::uint64_t to);
  void deliver(std::uint64_t to);
  // Where the last cut that CUT_ allows falls in [FROM, TO), or FROM.
  std::uint64_t last_cut(std::uint64_t from, std::uint64_t to);
  // Where the last line ends in [FROM, TO), or FROM.
  std::uint64_t last_line_end(std::uint64_t from, std::uint64_t to);
  // Brings line_end_ up to date with bytes a copy thread wrote.
  void scan_copied();

  const OutputHooks& hooks_;
  const std::uint64_t step_;
  const OutputCut cut_;
  const std::size_t string_limit_;
  // The output while it fits a string and no copy thread needs a file.
  std::string head_;
  UniqueFd memfd_;
  std::uint64_t read_ = 0;
  std::uint64_t handed_ = 0;
  // Where the last newline read ends (0 when none was), as far as bytes up
  // to scanned_ tell.
  std::uint64_t line_end_ = 0;
  std::uint64_t scanned_ = 0;
  std::uint64_t released_ = 0;
  MemfdCopier* copier_ = nullptr;
};

}  // namespace fastrevert
