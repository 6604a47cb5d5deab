// Framers: cutting a byte stream into complete units before it reaches Lisp.
//
// A framer holds the bytes of one stream that have not been delivered yet.
// After each append() it knows the longest prefix made only of complete units
// (lines ending in "\n"; LSP messages with their headers), and take() hands
// that prefix over, keeping the incomplete tail for later.  Scanning is
// incremental: each appended byte is examined a bounded number of times, not
// once per append.  At end of stream, flush() hands over everything, complete
// or not, so no byte is ever lost.
//
// A framer never drops, duplicates or reorders bytes: the concatenation of
// everything take() and flush() return equals the concatenation of everything
// appended.  Framers are not thread-safe; each belongs to one stream.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace fastrevert {

enum class Framing : std::uint8_t {
  none,   // Every byte is complete as soon as it arrives.
  lines,  // Complete lines, each ending in "\n".
  lsp,    // Complete Language Server Protocol (JSON-RPC base protocol) messages.
};

class Framer {
 public:
  virtual ~Framer() = default;

  // Adds BYTES at the end of the pending data and scans them.
  void append(std::string_view bytes);

  // The number of pending bytes, at the front, that form complete units.
  std::size_t complete_size() const noexcept { return complete_end_; }
  // The number of bytes held, complete or not.
  std::size_t pending_size() const noexcept { return buffer_.size(); }

  // Removes and returns the complete prefix (empty when there is none).
  std::string take();

  // Removes and returns every pending byte, complete or not, for the end of
  // the stream.  The framer may be reused afterwards (still broken if it was).
  std::string flush();

  // Removes and returns every pending byte, the unfinished unit's too, and
  // goes on with that unit where it stopped, as if its bytes were still
  // held: for a unit too long to wait for whole (longer than the process's
  // backlog), which then reaches the consumer in pieces that join up to it.
  // Returns nothing while the unit cannot be cut yet (an LSP message whose
  // header block has not ended).
  std::string take_unfinished();

  // Right after take_unfinished(): how many more bytes the unit that was
  // cut has (0 where the framer cannot tell, or the unit has no set size).
  virtual std::size_t unit_rest() const { return 0; }

  // Whether the input stopped making sense.  A broken framer passes every
  // byte through as soon as it arrives, so the consumer sees the raw stream
  // from the point where framing failed (including the incomplete unit that
  // failed, and any complete units not taken yet).
  bool broken() const noexcept { return !error_.empty(); }
  // Why it broke, or empty.
  const std::string& error() const noexcept { return error_; }

 protected:
  // Advances complete_end_ (and the subclass's own offsets) over what was
  // appended since the last scan.
  virtual void scan() = 0;
  // Subtracts COUNT from every offset into buffer_, after the first COUNT
  // bytes were removed.
  virtual void shift(std::size_t count) = 0;
  // Forgets every offset (the buffer was emptied).
  virtual void reset_offsets() = 0;
  // Whether the unfinished unit may be handed over in pieces now.
  virtual bool can_cut_unit() const { return true; }
  // Goes on after the first COUNT bytes, the whole buffer, of an unfinished
  // unit were handed over.
  virtual void cut_unit(std::size_t count) = 0;

  // Puts the framer into the broken state with the reason WHY.
  void mark_broken(std::string why);

  std::string buffer_;
  // End of the complete prefix of buffer_.
  std::size_t complete_end_ = 0;

 private:
  std::string error_;
};

// Passes everything through: the common code path for Framing::none.
class RawFramer final : public Framer {
 protected:
  void scan() override;
  void shift(std::size_t) override {}
  void reset_offsets() override {}
  void cut_unit(std::size_t) override {}
};

// Complete lines: the prefix up to and including the last "\n".
class LineFramer final : public Framer {
 protected:
  void scan() override;
  void shift(std::size_t count) override;
  void reset_offsets() override;
  void cut_unit(std::size_t) override { scanned_ = 0; }

 private:
  // Bytes of buffer_ already searched for "\n".
  std::size_t scanned_ = 0;
};

// Complete LSP messages: a header block of "Name: value\r\n" lines ended by an
// empty "\r\n" line, then exactly Content-Length body bytes.  Header names are
// matched case-insensitively and headers other than Content-Length (such as
// Content-Type) are tolerated.  Each unit delivered includes its headers, so
// an existing client filter can parse it unchanged.  The framer breaks on a
// header block without a valid Content-Length, a length above
// kMaxContentLength, a header line without a colon, or a header block longer
// than kMaxHeaderBlock.
class LspFramer final : public Framer {
 public:
  static constexpr std::size_t kMaxContentLength = std::size_t{1} << 30;
  static constexpr std::size_t kMaxHeaderBlock = std::size_t{64} << 10;

  std::size_t unit_rest() const override {
    return have_headers_ && body_end_ > buffer_.size() ? body_end_ - buffer_.size() : 0;
  }

 protected:
  void scan() override;
  void shift(std::size_t count) override;
  void reset_offsets() override;
  bool can_cut_unit() const override { return have_headers_; }
  void cut_unit(std::size_t count) override;

 private:
  // Parses the header block buffer_[complete_end_, header_block_end) (which
  // excludes the final empty line) and sets body_end_, or breaks the framer.
  void parse_headers(std::size_t header_block_end);

  // Bytes of buffer_ already searched for the "\r\n\r\n" ending the current
  // message's header block.
  std::size_t header_scanned_ = 0;
  // Whether the current message's headers were parsed, and where its body
  // ends.
  bool have_headers_ = false;
  std::size_t body_end_ = 0;
};

// What ends an LSP header block.
inline constexpr std::string_view kLspHeaderEnd = "\r\n\r\n";

// The Content-Length that the LSP header block BLOCK (without the blank
// line that ends it) gives, or nothing, with WHY set, where it gives none
// that the LSP framer would take.
std::optional<std::size_t> lsp_content_length(std::string_view block, std::string& why);

// Returns a fresh framer for FRAMING.
std::unique_ptr<Framer> make_framer(Framing framing);

}  // namespace fastrevert
