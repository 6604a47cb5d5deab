// libFuzzer target for LspFramer.
//
// Input layout: byte 0 is a control byte; its low four bits say how many of
// the following bytes are chunk lengths (the stream is cut into chunks of
// those lengths, cycled), and bit 4 asks for a structured stream: the rest of
// the input is turned into well-formed messages (so the happy path is explored
// as deeply as the malformed ones) instead of being used raw.
//
// Invariants checked after every append:
// - everything taken, plus the pending bytes, equals everything appended, in
//   order (and at the end, takes plus flush equal the whole stream);
// - while the framer is not broken, every chunk taken is a sequence of
//   complete, well-formed messages by an independent reference parser, and
//   the pending tail does not start with a complete message;
// - a structured stream never breaks the framer, and is delivered whole
//   before flush.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "core/framing.h"

namespace {

void check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "lsp_framer_fuzz: invariant violated: %s\n", what);
    std::abort();
  }
}

enum class Parse { complete, incomplete, malformed };

// Parses one message at the front of TEXT, written independently of the
// framer from the rules in framing.h.  On Parse::complete, LENGTH is its size.
Parse parse_one(std::string_view text, std::size_t& length) {
  constexpr std::size_t kMaxBody = std::size_t{1} << 30;
  constexpr std::size_t kMaxHeaders = std::size_t{64} << 10;
  std::size_t header_end = text.find("\r\n\r\n");
  if (header_end == std::string_view::npos) {
    return text.size() > kMaxHeaders ? Parse::malformed : Parse::incomplete;
  }
  if (header_end + 4 > kMaxHeaders) return Parse::malformed;
  std::string_view headers = text.substr(0, header_end);
  bool have_length = false;
  std::size_t body_length = 0;
  for (;;) {
    std::size_t line_end = headers.find("\r\n");
    std::string_view line = headers.substr(0, line_end);
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) return Parse::malformed;
    std::string name;
    for (char c : line.substr(0, colon)) {
      name.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
    }
    if (name == "content-length") {
      std::string_view value = line.substr(colon + 1);
      while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) {
        value.remove_prefix(1);
      }
      while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) {
        value.remove_suffix(1);
      }
      if (value.empty()) return Parse::malformed;
      std::size_t parsed = 0;
      for (char c : value) {
        if (c < '0' || c > '9') return Parse::malformed;
        parsed = parsed * 10 + static_cast<std::size_t>(c - '0');
        if (parsed > kMaxBody) return Parse::malformed;
      }
      if (have_length && parsed != body_length) return Parse::malformed;
      have_length = true;
      body_length = parsed;
    }
    if (line_end == std::string_view::npos) break;
    headers.remove_prefix(line_end + 2);
  }
  if (!have_length) return Parse::malformed;
  if (text.size() < header_end + 4 + body_length) return Parse::incomplete;
  length = header_end + 4 + body_length;
  return Parse::complete;
}

bool is_whole_messages(std::string_view chunk) {
  while (!chunk.empty()) {
    std::size_t length = 0;
    if (parse_one(chunk, length) != Parse::complete) return false;
    chunk.remove_prefix(length);
  }
  return true;
}

std::string structured_stream(const std::uint8_t* data, std::size_t size) {
  std::string stream;
  std::size_t i = 0;
  while (i < size) {
    std::uint8_t shape = data[i++];
    std::size_t body_length = std::min<std::size_t>(shape % 40, size - i);
    std::string body(reinterpret_cast<const char*>(data + i), body_length);
    i += body_length;
    if (shape & 0x40) stream += "Content-Type: application/vscode-jsonrpc; charset=utf-8\r\n";
    stream += (shape & 0x80) ? "content-LENGTH:" : "Content-Length: ";
    stream += std::to_string(body_length);
    stream += "\r\n";
    if (shape & 0x40 && shape & 0x01) stream += "X-Other:\tvalue\r\n";
    stream += "\r\n";
    stream += body;
  }
  return stream;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  std::uint8_t control = data[0];
  std::size_t cut_count = control & 0x0f;
  bool structured = (control & 0x10) != 0;
  if (size < 1 + cut_count) return 0;
  std::vector<std::size_t> cut_lengths;
  for (std::size_t i = 0; i < cut_count; ++i) cut_lengths.push_back(data[1 + i]);
  const std::uint8_t* rest = data + 1 + cut_count;
  std::size_t rest_size = size - 1 - cut_count;
  std::string stream = structured ? structured_stream(rest, rest_size)
                                  : std::string(reinterpret_cast<const char*>(rest), rest_size);

  fastrevert::LspFramer framer;
  std::string delivered;
  std::size_t offset = 0;
  std::size_t cut_index = 0;
  while (offset < stream.size()) {
    std::size_t length = cut_lengths.empty() ? stream.size() : cut_lengths[cut_index++ % cut_count];
    if (length == 0) {
      // An empty append must be harmless; then move on by one byte.
      framer.append(std::string_view());
      length = 1;
    }
    length = std::min(length, stream.size() - offset);
    framer.append(std::string_view(stream).substr(offset, length));
    offset += length;
    std::string chunk = framer.take();
    check(framer.complete_size() == 0, "take() left complete bytes");
    if (!framer.broken()) {
      check(is_whole_messages(chunk), "a chunk taken is not whole well-formed messages");
      std::size_t tail_start = delivered.size() + chunk.size();
      std::string_view tail = std::string_view(stream).substr(tail_start, offset - tail_start);
      std::size_t next_length = 0;
      Parse next = parse_one(tail, next_length);
      check(next != Parse::complete, "a complete message was held back");
      check(next != Parse::malformed, "the framer accepted a malformed message");
    }
    delivered += chunk;
    check(delivered.size() + framer.pending_size() == offset, "bytes lost or duplicated");
    check(stream.compare(0, delivered.size(), delivered) == 0, "bytes reordered or altered");
  }
  if (structured) {
    check(!framer.broken(), "a well-formed stream broke the framer");
    check(framer.pending_size() == 0, "a well-formed stream was not delivered whole");
  }
  delivered += framer.flush();
  check(delivered == stream, "takes plus flush differ from the stream");
  return 0;
}
