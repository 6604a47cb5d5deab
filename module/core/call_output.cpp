#include "core/call_output.h"

#include <unistd.h>

#include <algorithm>

#include "core/copier.h"
#include "core/errors.h"
#include "core/find_last.h"
#include "core/pipe.h"
#include "core/spill.h"

namespace fastrevert {

namespace {

// Whether a cut right after BYTE is a character boundary in every
// ASCII-compatible coding system (see OutputCut::ascii).
bool ends_a_character(unsigned char byte) {
  return byte < 0x80 && byte != '\r' && (byte < '0' || byte > '9');
}

// The length a UTF-8 sequence has that starts with LEAD; 1 for a byte that
// starts none (it decodes as a raw byte of its own).
std::size_t utf8_length(unsigned char lead) {
  if (lead >= 0xF0 && lead <= 0xF7) return 4;
  if (lead >= 0xE0) return lead <= 0xEF ? 3 : 1;
  if (lead >= 0xC0) return 2;
  return 1;
}

// The end of BYTES less an unfinished UTF-8 sequence at its end.
std::size_t utf8_end(std::string_view bytes) {
  std::size_t size = bytes.size();
  // A sequence is at most four bytes: its lead is among the last four.
  for (std::size_t back = 1; back <= std::min<std::size_t>(4, size); ++back) {
    auto byte = static_cast<unsigned char>(bytes[size - back]);
    if ((byte & 0xC0) == 0x80) continue;
    return utf8_length(byte) > back ? size - back : size;
  }
  // Only continuation bytes: raw bytes, each a character of its own.
  return size;
}

// The end of the longest prefix of output bytes [FROM, TO) that END_IN
// accepts, or FROM when there is none.  The bytes are in HEAD, or in MEMFD
// when it is open.  END_IN takes a window of them and returns the end of the
// longest prefix of it that it accepts, or 0; windows are read from the end
// backwards until one has such a prefix.
template <typename EndIn>
std::uint64_t last_end_in(const std::string& head, int memfd, std::uint64_t from, std::uint64_t to,
                          EndIn end_in) {
  if (memfd < 0) {
    return from + end_in(std::string_view(head).substr(static_cast<std::size_t>(from),
                                                       static_cast<std::size_t>(to - from)));
  }
  constexpr std::uint64_t kWindow = 65536;
  char window[kWindow];
  std::uint64_t end = to;
  while (end > from) {
    std::uint64_t start = end - from > kWindow ? end - kWindow : from;
    ssize_t got = pread(memfd, window, end - start, static_cast<off_t>(start));
    if (got <= 0) return from;
    if (std::size_t cut = end_in(std::string_view(window, static_cast<std::size_t>(got)))) {
      return start + cut;
    }
    end = start;
  }
  return from;
}

}  // namespace

std::size_t cut_end(std::string_view bytes, OutputCut rule) noexcept {
  std::size_t end = bytes.size();
  switch (rule) {
    case OutputCut::ascii:
      while (end > 0 && !ends_a_character(static_cast<unsigned char>(bytes[end - 1]))) --end;
      return end;
    case OutputCut::utf8:
      end = utf8_end(bytes);
      break;
    case OutputCut::bytes:
      break;
  }
  return end > 0 && bytes[end - 1] == '\r' ? end - 1 : end;
}

CallOutput::CallOutput(const OutputHooks& hooks, std::uint64_t step, OutputCut cut,
                       std::size_t string_limit)
    : hooks_(hooks), step_(step), cut_(cut), string_limit_(string_limit) {}

void CallOutput::take(const char* bytes, std::size_t size) {
  std::string_view view(bytes, size);
  if (!memfd_ && head_.size() + size <= string_limit_) {
    head_.append(view);
  } else {
    spill();
    if (int error = write_all_at(memfd_.get(), view, read_)) {
      throw SystemError(error, "write", "memfd");
    }
  }
  if (const char* newline = find_last(bytes, '\n', size)) {
    line_end_ = read_ + static_cast<std::uint64_t>(newline - bytes) + 1;
  }
  read_ += size;
  scanned_ = read_;
}

int CallOutput::spill() {
  if (!memfd_) {
    memfd_.reset(open_spill("fastrevert-call-process"));
    if (!memfd_) throw_errno(spill_call());
    if (int error = write_all_at(memfd_.get(), head_, 0)) {
      throw SystemError(error, "write", "memfd");
    }
    head_ = std::string();
  }
  return memfd_.get();
}

void CallOutput::copied_to(std::uint64_t end) {
  read_ = std::max(read_, end);
}

void CallOutput::read_by_caller(std::uint64_t bytes) noexcept {
  read_ += bytes;
  handed_ = read_;
  scanned_ = read_;
}

void CallOutput::scan_copied() {
  if (scanned_ >= read_) return;
  std::uint64_t end = last_line_end(scanned_, read_);
  if (end > scanned_) line_end_ = end;
  scanned_ = read_;
}

void CallOutput::hand_lines(bool gone_quiet) {
  if (step_ == 0) return;
  // Bytes a copy thread wrote are searched for lines once a step of them
  // has come, so that each byte is searched once however long a line is.
  if (read_ >= scanned_ + step_ || gone_quiet) scan_copied();
  if (line_end_ > handed_ && (line_end_ - handed_ >= step_ || gone_quiet)) hand_to(line_end_);
  // A stretch without a line's end is handed over by characters, so that
  // neither the caller's wait nor a quit's grows with it.
  if (read_ - handed_ >= kLargestHandOver) hand_to(last_cut(handed_, read_));
}

void CallOutput::hand_rest() {
  hand_to(read_);
}

void CallOutput::hand_on_quit() {
  hand_to(last_cut(handed_, read_));
}

void CallOutput::hand_to(std::uint64_t to) {
  while (handed_ < to) {
    std::uint64_t end = to;
    if (step_ > 0 && end - handed_ > kLargestHandOver) {
      std::uint64_t limit = handed_ + kLargestHandOver;
      end = last_line_end(handed_, limit);
      if (end == handed_) end = last_cut(handed_, limit);
      // Four MiB with no place to cut is not text in the caller's coding:
      // a cut anywhere costs no more than decoding it whole would.
      if (end == handed_) end = limit;
    }
    deliver(end);
  }
}

void CallOutput::deliver(std::uint64_t to) {
  std::uint64_t from = handed_;
  if (!memfd_) {
    hooks_.insert_bytes(std::string_view(head_).substr(static_cast<std::size_t>(from),
                                                       static_cast<std::size_t>(to - from)));
    handed_ = to;
    return;
  }
  hooks_.insert_range(memfd_.get(), from, to);
  handed_ = to;
  if (copier_) {
    copier_->release(to);
  } else if (handed_ - released_ >= (std::uint64_t{1} << 20)) {
    // A failure only leaves the memory in use until the memfd is closed.
    give_back_spilled(memfd_.get(), static_cast<off_t>(handed_));
    released_ = handed_;
  }
}

std::uint64_t CallOutput::last_cut(std::uint64_t from, std::uint64_t to) {
  return last_end_in(head_, memfd_.get(), from, to,
                     [this](std::string_view bytes) { return cut_end(bytes, cut_); });
}

std::uint64_t CallOutput::last_line_end(std::uint64_t from, std::uint64_t to) {
  return last_end_in(head_, memfd_.get(), from, to, [](std::string_view bytes) -> std::size_t {
    const char* newline = find_last(bytes.data(), '\n', bytes.size());
    return newline ? static_cast<std::size_t>(newline - bytes.data()) + 1 : 0;
  });
}

}  // namespace fastrevert
