#include "core/process_output.h"

#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <utility>

namespace fastrevert {

namespace {

// A stream whose consumer took output this recently streams: what comes
// next is gathered into larger pieces.
constexpr auto kStreamingGap = std::chrono::milliseconds(20);
// A streaming child's consumer is told once this much waits...
constexpr std::uint64_t kBatchBytes = std::uint64_t{64} << 10;
// ...or this long after the first byte it was not told of.
constexpr auto kBatchDelay = std::chrono::milliseconds(5);
// Text goes on in a new segment past this size, so that the producer never
// grows (and copies) one string of the whole backlog under the lock.
constexpr std::size_t kSegmentBytes = std::size_t{1} << 20;

bool continuation(unsigned char byte) noexcept { return (byte & 0xC0) == 0x80; }

// The length of the UTF-8 sequence that LEAD begins, or 0 for a byte that
// begins none.
std::size_t sequence_length(unsigned char lead) noexcept {
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

// How many bytes at the end of BYTES begin a UTF-8 character that has not
// ended yet (0 to 3).
std::size_t unfinished_suffix(std::string_view bytes) noexcept {
  std::size_t size = bytes.size();
  for (std::size_t back = 1; back <= 3 && back <= size; ++back) {
    auto byte = static_cast<unsigned char>(bytes[size - back]);
    if (continuation(byte)) continue;
    std::size_t length = sequence_length(byte);
    return length > back ? back : 0;
  }
  return 0;
}

// Where a piece of BYTES of at most MAX bytes (MAX > 0) may end: where a
// UTF-8 character ends.  A first character longer than MAX goes whole.
std::size_t character_cut(std::string_view bytes, std::size_t max) noexcept {
  if (max >= bytes.size()) return bytes.size();
  for (std::size_t cut = max; cut > 0 && max - cut <= 3; --cut) {
    if (!continuation(static_cast<unsigned char>(bytes[cut]))) return cut;
  }
  // Bytes that are no UTF-8 (no character starts in the 3 before MAX, nor
  // at it) are cut at MAX, where no well-formed character goes on.
  if (max > 3) return max;
  std::size_t cut = 1;
  while (cut < bytes.size() && cut < 4 && continuation(static_cast<unsigned char>(bytes[cut]))) {
    ++cut;
  }
  return cut;
}

}  // namespace

ProcessOutput::ProcessOutput(Config config) : config_(config) {}

ProcessOutput::~ProcessOutput() = default;

std::uint64_t ProcessOutput::room() const noexcept {
  std::uint64_t waiting = waiting_.load(std::memory_order_relaxed);
  return waiting >= config_.backlog ? 0 : config_.backlog - waiting;
}

void ProcessOutput::add_waiting_locked(std::uint64_t size) {
  std::uint64_t waiting = waiting_.load(std::memory_order_relaxed) + size;
  waiting_.store(waiting, std::memory_order_relaxed);
  if (waiting > config_.backlog && waiting - config_.backlog > overrun_.load(std::memory_order_relaxed)) {
    overrun_.store(waiting - config_.backlog, std::memory_order_relaxed);
  }
}

void ProcessOutput::sub_waiting_locked(std::uint64_t size) {
  std::uint64_t waiting = waiting_.load(std::memory_order_relaxed);
  waiting_.store(waiting > size ? waiting - size : 0, std::memory_order_relaxed);
}

void ProcessOutput::append(int stream, std::string_view bytes) {
  if (bytes.empty()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Stream& target = streams_[stream];
  // The head the consumer reads without the lock is never written.
  bool tail_claimed = claimed_ == stream && target.segments.size() == 1;
  if (!target.segments.empty() && !target.segments.back().range && !tail_claimed &&
      target.segments.back().text.size() < kSegmentBytes) {
    target.segments.back().text.append(bytes);
  } else {
    Segment segment;
    segment.text.assign(bytes);
    target.segments.push_back(std::move(segment));
    target.arrivals.push_back(next_arrival_++);
  }
  add_waiting_locked(bytes.size());
}

void ProcessOutput::set_partial(int stream, std::uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  Stream& target = streams_[stream];
  if (bytes >= target.partial) {
    add_waiting_locked(bytes - target.partial);
  } else {
    sub_waiting_locked(target.partial - bytes);
  }
  target.partial = bytes;
}

void ProcessOutput::start_memfd(UniqueFd consumer_fd) {
  std::lock_guard<std::mutex> lock(mutex_);
  memfd_ = std::move(consumer_fd);
}

int ProcessOutput::memfd() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return memfd_.get();
}

void ProcessOutput::memfd_written(std::uint64_t from, std::uint64_t to, std::string_view last) {
  if (to <= from) return;
  std::lock_guard<std::mutex> lock(mutex_);
  Stream& target = streams_[kStdout];
  bool tail_claimed = claimed_ == kStdout && target.segments.size() == 1;
  Segment* segment = nullptr;
  if (!target.segments.empty() && target.segments.back().range && !tail_claimed &&
      target.segments.back().to == from) {
    segment = &target.segments.back();
    segment->to = to;
  } else {
    Segment fresh;
    fresh.range = true;
    fresh.from = from;
    fresh.to = to;
    target.segments.push_back(std::move(fresh));
    target.arrivals.push_back(next_arrival_++);
    segment = &target.segments.back();
  }
  std::size_t keep = std::min<std::size_t>(last.size(), sizeof segment->last);
  std::copy(last.end() - static_cast<std::ptrdiff_t>(keep), last.end(), segment->last);
  segment->last_size = static_cast<std::uint8_t>(keep);
  add_waiting_locked(to - from);
}

void ProcessOutput::end_stream(int stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  streams_[stream].ended = true;
}

void ProcessOutput::finish(const ExitStatus& status) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (finished_ || failed_) return;
  finished_ = true;
  status_ = status;
}

void ProcessOutput::fail(const char* reason) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  if (failed_) return;
  failed_ = true;
  try {
    reason_ = reason;
  } catch (...) {
    // Without memory for the words, the end still says that it failed.
  }
}

void ProcessOutput::note_throttled() {
  std::lock_guard<std::mutex> lock(mutex_);
  throttled_ = true;
}

bool ProcessOutput::claim_locked(int index, Piece& piece, std::size_t max_text,
                                 std::uint64_t max_range) {
  Stream& stream = streams_[index];
  if (stream.segments.empty()) return false;
  Segment& head = stream.segments.front();
  // Ranges that follow each other were kept apart only while the head was
  // claimed: joined, they are cut where a character ends, not between them.
  while (head.range && stream.segments.size() > 1 && stream.segments[1].range &&
         stream.segments[1].from == head.to) {
    Segment& next = stream.segments[1];
    head.to = next.to;
    std::copy(next.last, next.last + sizeof next.last, head.last);
    head.last_size = next.last_size;
    stream.segments.erase(stream.segments.begin() + 1);
    stream.arrivals.erase(stream.arrivals.begin() + 1);
  }
  bool last = stream.segments.size() == 1;
  bool hold = config_.decode == Decode::utf8 && !stream.ended;
  if (head.range) {
    std::uint64_t to = head.to;
    if (hold && last) {
      to -= std::min<std::uint64_t>(
          unfinished_suffix(std::string_view(head.last, head.last_size)), head.to - head.from);
    }
    if (to <= head.from) return false;
    if (to - head.from > max_range) to = range_cut(head.from, head.from + max_range, to);
    piece.kind = Piece::Kind::range;
    piece.stream = index;
    piece.memfd = memfd_.get();
    piece.from = head.from;
    piece.to = to;
    told_while_claimed_ = false;
    claimed_ = index;
    claimed_bytes_ = static_cast<std::size_t>(to - head.from);
    borrowed_ = 0;
    return true;
  }
  if (config_.decode == Decode::utf8 && !last && !stream.segments[1].range) {
    // A character left unfinished at the end of the head (a piece cut
    // short, or given back) goes on in the next segment: joined there, it
    // is delivered whole.  Nothing is claimed, so both may be written.
    std::size_t unfinished = unfinished_suffix(head.view());
    if (unfinished > 0) {
      Segment& next = stream.segments[1];
      next.text.insert(next.offset, head.text, head.text.size() - unfinished, unfinished);
      head.text.resize(head.text.size() - unfinished);
      if (head.size() == 0) {
        stream.segments.pop_front();
        stream.arrivals.pop_front();
        return claim_locked(index, piece, max_text, max_range);
      }
    }
  }
  std::string_view text = head.view();
  std::size_t size = text.size();
  std::size_t unfinished = config_.decode == Decode::utf8 ? unfinished_suffix(text) : 0;
  // A character that goes on at the start of stdout's memfd (the next
  // segment: text after text was joined above) is completed from there.
  bool borrow = unfinished > 0 && !last;
  if (unfinished > 0 && last && hold) size -= unfinished;
  std::size_t need = 0;
  if (borrow) {
    need = sequence_length(static_cast<unsigned char>(text[size - unfinished])) - unfinished;
    // Completed, the character would pass the cap: the piece ends before
    // it, which goes first next time.
    if (size + need > max_text && size > unfinished) {
      size -= unfinished;
      borrow = false;
    }
  }
  if (size > max_text && !config_.whole_units) {
    std::size_t cut = config_.decode == Decode::utf8
                          ? character_cut(text.substr(0, size), max_text)
                          : max_text;
    // A first character longer than the cap goes whole, completed from the
    // memfd when it ends there.
    borrow = borrow && cut == size;
    size = cut;
  }
  borrowed_ = 0;
  if (borrow) {
    const Segment& next = stream.segments[1];
    if (next.to - next.from < need) {
      // The rest of it is still to be written: what comes before it goes.
      if (hold && stream.segments.size() == 2) {
        if (size <= unfinished) return false;
        size -= unfinished;
      }
    } else {
      scratch_.assign(text);
      scratch_.resize(size + need);
      ssize_t got = pread(memfd_.get(), &scratch_[size], need, static_cast<off_t>(next.from));
      if (got == static_cast<ssize_t>(need)) {
        borrowed_ = need;
        text = scratch_;
      }
    }
  }
  if (size == 0) return false;
  piece.kind = Piece::Kind::text;
  piece.stream = index;
  piece.bytes = borrowed_ > 0 ? text : text.substr(0, size);
  told_while_claimed_ = false;
  claimed_ = index;
  claimed_bytes_ = size;
  return true;
}

std::uint64_t ProcessOutput::range_cut(std::uint64_t from, std::uint64_t cut,
                                       std::uint64_t to) const {
  if (config_.decode != Decode::utf8) return cut;
  // The bytes around the cut: up to 3 before it, where a character that
  // goes on past it began, and up to 4 from it.
  std::uint64_t low = std::max(from, cut - std::min<std::uint64_t>(cut, 3));
  std::uint64_t high = std::min(to, cut + 4);
  unsigned char bytes[7];
  ssize_t got = pread(memfd_.get(), bytes, static_cast<std::size_t>(high - low),
                      static_cast<off_t>(low));
  // Unreadable, the range goes whole, as it would uncut.
  if (got != static_cast<ssize_t>(high - low)) return to;
  for (std::uint64_t at = cut; at > from && at >= low; --at) {
    if (!continuation(bytes[at - low])) return at;
  }
  // No character starts in the 3 bytes before the cut, nor at it: the bytes
  // there are no UTF-8, and none that is well-formed goes on past the cut.
  if (low > from) return cut;
  // A first character longer than the cap goes whole.
  std::uint64_t at = from + 1;
  while (at < high && continuation(bytes[at - low])) ++at;
  return at;
}

bool ProcessOutput::claim(Piece& piece, std::size_t max_text, std::uint64_t max_range) {
  std::lock_guard<std::mutex> lock(mutex_);
  return claim_next_locked(piece, max_text, max_range);
}

bool ProcessOutput::claim_next_locked(Piece& piece, std::size_t max_text,
                                      std::uint64_t max_range) {
  piece = Piece();
  if (end_delivered_ || claimed_ != -1) return false;
  // The stream whose head came first goes first, if it can.
  int first = kStdout;
  int second = kStderr;
  if (streams_[kStdout].arrivals.empty() ||
      (!streams_[kStderr].arrivals.empty() &&
       streams_[kStderr].arrivals.front() < streams_[kStdout].arrivals.front())) {
    std::swap(first, second);
  }
  if (claim_locked(first, piece, max_text, max_range) ||
      claim_locked(second, piece, max_text, max_range)) {
    return true;
  }
  for (const Stream& stream : streams_) {
    if (!stream.segments.empty() || stream.partial > 0) return false;
  }
  if (!finished_ && !failed_) return false;
  piece.kind = Piece::Kind::end;
  piece.failed = failed_;
  piece.status = status_;
  piece.reason = reason_;
  claimed_ = 2;
  return true;
}

bool ProcessOutput::throttled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return throttled_;
}

std::uint64_t ProcessOutput::add_lisp_file(UniqueFd fd, std::uint64_t size) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t token = ++last_lisp_file_;
  lisp_files_.emplace(token, std::make_pair(std::move(fd), size));
  add_waiting_locked(size);
  return token;
}

int ProcessOutput::lisp_file(std::uint64_t token) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = lisp_files_.find(token);
  return found == lisp_files_.end() ? -1 : found->second.first.get();
}

bool ProcessOutput::release_lisp_files(std::uint64_t token) {
  std::map<std::uint64_t, std::pair<UniqueFd, std::uint64_t>> released;
  bool resume = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto end = lisp_files_.upper_bound(token);
    for (auto it = lisp_files_.begin(); it != end; ++it) sub_waiting_locked(it->second.second);
    released.insert(std::make_move_iterator(lisp_files_.begin()), std::make_move_iterator(end));
    lisp_files_.erase(lisp_files_.begin(), end);
    if (throttled_ && waiting_.load(std::memory_order_relaxed) <= config_.backlog / 2) {
      throttled_ = false;
      resume = true;
    }
  }
  // Closed outside the lock.
  released.clear();
  return resume;
}

bool ProcessOutput::commit() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (claimed_ == 2) {
    end_delivered_ = true;
    claimed_ = -1;
    return false;
  }
  if (claimed_ < 0) return false;
  Stream& stream = streams_[claimed_];
  Segment& head = stream.segments.front();
  if (head.range) {
    head.from += claimed_bytes_;
    memfd_delivered_.store(head.from, std::memory_order_relaxed);
  } else {
    // Taken from the front by moving past it: erasing would move the rest.
    head.offset += claimed_bytes_;
  }
  sub_waiting_locked(claimed_bytes_ + borrowed_);
  if (head.size() == 0) {
    stream.segments.pop_front();
    stream.arrivals.pop_front();
  }
  if (borrowed_ > 0) {
    Segment& next = stream.segments.front();
    next.from += borrowed_;
    memfd_delivered_.store(next.from, std::memory_order_relaxed);
    if (next.size() == 0) {
      stream.segments.pop_front();
      stream.arrivals.pop_front();
    }
  }
  claimed_ = -1;
  claimed_bytes_ = 0;
  borrowed_ = 0;
  last_commit_ = Clock::now();
  if (throttled_ && waiting_.load(std::memory_order_relaxed) <= config_.backlog / 2) {
    throttled_ = false;
    return true;
  }
  return false;
}

void ProcessOutput::release() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_locked();
}

void ProcessOutput::release_locked() {
  claimed_ = -1;
  claimed_bytes_ = 0;
  borrowed_ = 0;
}

bool ProcessOutput::settle() {
  std::lock_guard<std::mutex> lock(mutex_);
  // A piece still claimed is the consumer's to deliver first.
  if (claimed_ != -1) return false;
  // A dry claim, released at once, tells whether anything is ready; under
  // the same lock as the consumer stops being told, so that what comes
  // after it is told.
  Piece probe;
  if (claim_next_locked(probe, SIZE_MAX, std::numeric_limits<std::uint64_t>::max())) {
    release_locked();
    return false;
  }
  notified_ = false;
  untold_ = false;
  return true;
}

bool ProcessOutput::done() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return end_delivered_;
}

ProcessOutput::Notify ProcessOutput::notify_decision(Clock::time_point now,
                                                     Clock::time_point& deadline) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (end_delivered_) return Notify::none;
  if (claimed_ >= 0 && !told_while_claimed_) {
    // The consumer is handing a piece on: its filter may wait for this
    // output, which it must learn has come though it cannot take it yet.
    told_while_claimed_ = true;
    return Notify::now;
  }
  if (notified_) return Notify::none;
  std::uint64_t pending = 0;
  for (const Stream& stream : streams_) {
    for (const Segment& segment : stream.segments) pending += segment.size();
  }
  bool ended = streams_[kStdout].ended && streams_[kStderr].ended;
  bool at_end = finished_ || failed_;
  if (pending == 0 && !at_end) return Notify::none;
  bool streaming = last_commit_ != Clock::time_point{} && now - last_commit_ < kStreamingGap;
  if (!untold_) {
    untold_ = true;
    untold_since_ = now;
  }
  if (at_end || ended || !streaming || config_.prompt || pending >= kBatchBytes ||
      waiting_.load(std::memory_order_relaxed) >= config_.backlog ||
      now >= untold_since_ + kBatchDelay) {
    notified_ = true;
    untold_ = false;
    return Notify::now;
  }
  deadline = untold_since_ + kBatchDelay;
  return Notify::later;
}

bool ProcessOutput::notify_due(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (notified_ || !untold_ || now < untold_since_ + kBatchDelay) return false;
  notified_ = true;
  untold_ = false;
  return true;
}

}  // namespace fastrevert
