#include "core/framing.h"

#include <utility>

#include "core/find_last.h"

namespace fastrevert {

namespace {

bool equals_ignoring_ascii_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    unsigned char x = static_cast<unsigned char>(a[i]);
    unsigned char y = static_cast<unsigned char>(b[i]);
    if (x >= 'A' && x <= 'Z') x = static_cast<unsigned char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<unsigned char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

std::string_view trim_blanks(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

}  // namespace

void Framer::append(std::string_view bytes) {
  if (bytes.empty()) return;
  buffer_.append(bytes);
  if (broken()) {
    complete_end_ = buffer_.size();
    return;
  }
  scan();
}

std::string Framer::take() {
  std::string taken;
  if (complete_end_ == 0) return taken;
  if (complete_end_ == buffer_.size()) {
    // The common case of a stream cut at unit boundaries: hand over the
    // whole buffer without copying.
    taken.swap(buffer_);
    reset_offsets();
  } else {
    taken.assign(buffer_, 0, complete_end_);
    buffer_.erase(0, complete_end_);
    shift(complete_end_);
  }
  complete_end_ = 0;
  return taken;
}

std::string Framer::flush() {
  std::string taken;
  taken.swap(buffer_);
  complete_end_ = 0;
  reset_offsets();
  return taken;
}

std::string Framer::take_unfinished() {
  std::string taken;
  if (buffer_.empty() || broken() || !can_cut_unit()) return taken;
  taken.swap(buffer_);
  complete_end_ = 0;
  cut_unit(taken.size());
  return taken;
}

void Framer::mark_broken(std::string why) {
  error_ = std::move(why);
  complete_end_ = buffer_.size();
}

void RawFramer::scan() {
  complete_end_ = buffer_.size();
}

void LineFramer::scan() {
  std::size_t unscanned = buffer_.size() - scanned_;
  const char* newline = find_last(buffer_.data() + scanned_, '\n', unscanned);
  if (newline) complete_end_ = static_cast<std::size_t>(newline - buffer_.data()) + 1;
  scanned_ = buffer_.size();
}

void LineFramer::shift(std::size_t count) {
  scanned_ -= count;
}

void LineFramer::reset_offsets() {
  scanned_ = 0;
}

void LspFramer::scan() {
  while (!broken()) {
    if (!have_headers_) {
      // Resume the search a few bytes back, in case the terminator straddles
      // the previous append.
      std::size_t from = complete_end_;
      if (header_scanned_ > from + kLspHeaderEnd.size() - 1) {
        from = header_scanned_ - (kLspHeaderEnd.size() - 1);
      }
      std::size_t terminator = std::string_view(buffer_).find(kLspHeaderEnd, from);
      if (terminator == std::string_view::npos) {
        header_scanned_ = buffer_.size();
        if (buffer_.size() - complete_end_ > kMaxHeaderBlock) {
          mark_broken("LSP header block longer than 64 KiB");
        }
        return;
      }
      if (terminator + kLspHeaderEnd.size() - complete_end_ > kMaxHeaderBlock) {
        mark_broken("LSP header block longer than 64 KiB");
        return;
      }
      parse_headers(terminator);
      if (broken()) return;
    }
    if (buffer_.size() < body_end_) return;
    complete_end_ = body_end_;
    header_scanned_ = complete_end_;
    have_headers_ = false;
    body_end_ = 0;
  }
}

std::optional<std::size_t> lsp_content_length(std::string_view block, std::string& why) {
  bool have_length = false;
  std::size_t content_length = 0;
  while (true) {
    std::size_t line_end = block.find("\r\n");
    std::string_view line = block.substr(0, line_end);
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      why = "malformed LSP header line";
      return std::nullopt;
    }
    std::string_view name = line.substr(0, colon);
    if (equals_ignoring_ascii_case(name, "Content-Length")) {
      std::string_view value = trim_blanks(line.substr(colon + 1));
      if (value.empty()) {
        why = "empty LSP Content-Length";
        return std::nullopt;
      }
      std::size_t parsed = 0;
      for (char digit : value) {
        if (digit < '0' || digit > '9') {
          why = "non-numeric LSP Content-Length";
          return std::nullopt;
        }
        parsed = parsed * 10 + static_cast<std::size_t>(digit - '0');
        if (parsed > LspFramer::kMaxContentLength) {
          why = "LSP Content-Length above 1 GiB";
          return std::nullopt;
        }
      }
      if (have_length && parsed != content_length) {
        why = "conflicting LSP Content-Length headers";
        return std::nullopt;
      }
      have_length = true;
      content_length = parsed;
    }
    if (line_end == std::string_view::npos) break;
    block.remove_prefix(line_end + 2);
  }
  if (!have_length) {
    why = "LSP message without Content-Length";
    return std::nullopt;
  }
  return content_length;
}

void LspFramer::parse_headers(std::size_t header_block_end) {
  std::string why;
  std::optional<std::size_t> content_length = lsp_content_length(
      std::string_view(buffer_).substr(complete_end_, header_block_end - complete_end_), why);
  if (!content_length) {
    mark_broken(std::move(why));
    return;
  }
  have_headers_ = true;
  body_end_ = header_block_end + kLspHeaderEnd.size() + *content_length;
}

void LspFramer::shift(std::size_t count) {
  header_scanned_ -= count;
  if (have_headers_) body_end_ -= count;
}

void LspFramer::cut_unit(std::size_t count) {
  // The message's body goes on: its end moves back by what was handed over,
  // and the next header block is searched for from its end.
  body_end_ -= count;
  header_scanned_ = 0;
}

void LspFramer::reset_offsets() {
  header_scanned_ = 0;
  have_headers_ = false;
  body_end_ = 0;
}

std::unique_ptr<Framer> make_framer(Framing framing) {
  switch (framing) {
    case Framing::lines:
      return std::make_unique<LineFramer>();
    case Framing::lsp:
      return std::make_unique<LspFramer>();
    case Framing::none:
      break;
  }
  return std::make_unique<RawFramer>();
}

}  // namespace fastrevert
