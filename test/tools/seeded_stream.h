// A pseudo-random stream of text made from a seed, the same in the writer
// that prints it (stream_writer.cpp) and in the tests that check what
// reached the caller: ASCII and UTF-8 characters of two to four bytes, with
// a marker at each 4 KiB that names its offset, so that a mismatch says
// where it is.  The stream holds no CR: a CR ends no character in the cut
// rules (it may be half a CRLF), and none is needed to test them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace fastrevert::test {

// SplitMix64: small, fast, and the same sequence on every platform.
class SeededRandom {
 public:
  explicit SeededRandom(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
  }
  // A number in [LOW, HIGH].
  std::uint64_t between(std::uint64_t low, std::uint64_t high) {
    return low + next() % (high - low + 1);
  }
  // A number in [LOW, HIGH], as likely in each power of two (sizes).
  std::uint64_t sized(std::uint64_t low, std::uint64_t high) {
    int low_bits = 0, high_bits = 0;
    while ((std::uint64_t{1} << low_bits) < low) ++low_bits;
    while ((std::uint64_t{1} << high_bits) < high) ++high_bits;
    int bits = static_cast<int>(
        between(static_cast<std::uint64_t>(low_bits), static_cast<std::uint64_t>(high_bits)));
    std::uint64_t top = std::uint64_t{1} << bits;
    std::uint64_t value = between(top / 2, top);
    return value < low ? low : value > high ? high : value;
  }

 private:
  std::uint64_t state_;
};

struct SeededStream {
  std::string bytes;
  // Where each character starts, and the end, in order.
  std::vector<std::size_t> boundaries;
};

// Appends the UTF-8 encoding of CODE to OUT.
inline void append_utf8(std::string& out, std::uint32_t code) {
  if (code < 0x80) {
    out += static_cast<char>(code);
  } else if (code < 0x800) {
    out += static_cast<char>(0xC0 | (code >> 6));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else if (code < 0x10000) {
    out += static_cast<char>(0xE0 | (code >> 12));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code >> 18));
    out += static_cast<char>(0x80 | ((code >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code & 0x3F));
  }
}

// The stream of SEED: at least LENGTH bytes, ended at a character's end.
inline SeededStream seeded_stream(std::uint64_t seed, std::size_t length) {
  SeededRandom random(seed);
  SeededStream stream;
  stream.bytes.reserve(length + 32);
  std::size_t next_marker = 0;
  while (stream.bytes.size() < length) {
    if (stream.bytes.size() >= next_marker) {
      char marker[32];
      std::snprintf(marker, sizeof marker, "\n@%zx@\n", next_marker);
      for (const char* c = marker; *c; ++c) {
        stream.boundaries.push_back(stream.bytes.size());
        stream.bytes += *c;
      }
      next_marker += 4096;
      continue;
    }
    stream.boundaries.push_back(stream.bytes.size());
    std::uint64_t kind = random.between(0, 99);
    if (kind < 60) {
      append_utf8(stream.bytes, static_cast<std::uint32_t>(random.between('a', 'z')));
    } else if (kind < 68) {
      stream.bytes += ' ';
    } else if (kind < 72) {
      stream.bytes += '\n';
    } else if (kind < 78) {
      append_utf8(stream.bytes, static_cast<std::uint32_t>(random.between('0', '9')));
    } else if (kind < 88) {
      append_utf8(stream.bytes, static_cast<std::uint32_t>(random.between(0xC0, 0xFF)));
    } else if (kind < 96) {
      append_utf8(stream.bytes, static_cast<std::uint32_t>(random.between(0x4E00, 0x4FFF)));
    } else {
      append_utf8(stream.bytes, static_cast<std::uint32_t>(random.between(0x1F600, 0x1F64F)));
    }
  }
  stream.boundaries.push_back(stream.bytes.size());
  return stream;
}

}  // namespace fastrevert::test
