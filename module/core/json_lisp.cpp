#include "core/json_lisp.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/framing.h"

#if FASTREVERT_HAVE_RAPIDJSON
#include <rapidjson/reader.h>
#endif

namespace fastrevert {

#if FASTREVERT_HAVE_RAPIDJSON

namespace {

constexpr char kHex[] = "0123456789abcdef";

// Where a hash table's size goes, written once its members are counted:
// wide enough for any count a document can hold.
constexpr std::size_t kSizeWidth = 10;

// The deepest nesting converted.  Emacs 28's reader recurses once per
// level, on the main thread's stack; a deeper value is left to
// `json-parse-buffer' (whose jansson refuses past 2048 levels).
constexpr std::size_t kMaxDepth = 500;

// Writes the printed Lisp of the value that RapidJSON's reader reports.
class LispWriter {
 public:
  LispWriter(const JsonLisp& style, std::string& out) : style_(style), out_(out) {}

  bool Null() { return scalar(style_.null_form); }
  bool Bool(bool value) { return scalar(value ? std::string_view("t") : style_.false_form); }
  // With kParseNumbersAsStringsFlag every number comes through RawNumber.
  bool Int(int) { return false; }
  bool Uint(unsigned) { return false; }
  bool Int64(std::int64_t) { return false; }
  bool Uint64(std::uint64_t) { return false; }
  bool Double(double) { return false; }

  bool RawNumber(const char* text, rapidjson::SizeType length, bool) {
    separate();
    std::string_view number(text, length);
    if (number.find_first_of(".eE") == std::string_view::npos) return integer(number);
    return real(number);
  }

  bool String(const char* text, rapidjson::SizeType length, bool) {
    separate();
    return string(std::string_view(text, length));
  }

  bool StartObject() {
    if (++depth_ > kMaxDepth) return false;
    separate();
    if (style_.objects == JsonLisp::Objects::hash_table) {
      // With label_keys, the symbols of the form are labelled in the first
      // table and referred to in the others: read as names, they cost the
      // read of a table of strings a seventh of its time.
      bool first = !tables_labelled_;
      if (style_.label_keys) tables_labelled_ = true;
      out_ += !style_.label_keys ? "#s(hash-table size "
              : first            ? "#s(#1=hash-table #2=size "
                                 : "#s(#1# #2# ";
      objects_.push_back(Object{out_.size(), {}});
      out_.append(kSizeWidth, ' ');
      out_ += !style_.label_keys ? " test equal data ("
              : first            ? " #3=test #4=equal #5=data ("
                                 : " #3# #4# #5# (";
    } else {
      objects_.push_back(Object{0, {}});
      out_ += '(';
    }
    spaced_ = false;
    return true;
  }

  bool Key(const char* text, rapidjson::SizeType length, bool) {
    std::string_view key(text, length);
    std::vector<std::string>& keys = objects_.back().keys;
    for (const std::string& seen : keys) {
      if (seen == key) return false;
    }
    keys.emplace_back(key);
    separate();
    if (style_.objects == JsonLisp::Objects::hash_table) return string(key);
    return keyword(key);
  }

  bool EndObject(rapidjson::SizeType members) {
    if (style_.objects == JsonLisp::Objects::hash_table) {
      std::string count = std::to_string(members);
      out_.replace(objects_.back().size_at, count.size(), count);
      out_ += "))";
    } else {
      out_ += ')';
    }
    objects_.pop_back();
    --depth_;
    spaced_ = true;
    return true;
  }

  bool StartArray() {
    if (++depth_ > kMaxDepth) return false;
    separate();
    out_ += '[';
    spaced_ = false;
    return true;
  }

  bool EndArray(rapidjson::SizeType) {
    out_ += ']';
    --depth_;
    spaced_ = true;
    return true;
  }

 private:
  struct Object {
    // Where a hash table's size is written.
    std::size_t size_at;
    // Its keys so far, to refuse one that comes twice.  Objects in LSP
    // messages have a handful of members, so a scan beats hashing.
    std::vector<std::string> keys;
  };

  // A space between two elements.
  void separate() {
    if (spaced_) out_ += ' ';
    spaced_ = true;
  }

  bool scalar(std::string_view form) {
    separate();
    out_ += form;
    return true;
  }

  bool integer(std::string_view number) {
    // jansson keeps integers in 64 bits and refuses the others.
    std::string_view digits = number;
    bool negative = !digits.empty() && digits.front() == '-';
    if (negative) digits.remove_prefix(1);
    std::uint64_t limit = negative ? std::uint64_t{1} << 63 : (std::uint64_t{1} << 63) - 1;
    std::uint64_t value = 0;
    for (char digit : digits) {
      auto d = static_cast<std::uint64_t>(digit - '0');
      if (value > (limit - d) / 10) return false;
      value = value * 10 + d;
    }
    out_ += number;
    return true;
  }

  bool real(std::string_view number) {
    std::string text(number);
    double value = std::strtod(text.c_str(), nullptr);
    if (!std::isfinite(value)) return false;
    char printed[40];
    int length = std::snprintf(printed, sizeof printed, "%.17g", value);
    if (length <= 0 || static_cast<std::size_t>(length) >= sizeof printed) return false;
    std::string_view form(printed, static_cast<std::size_t>(length));
    out_ += form;
    // "%g" leaves a whole number without a point, which `read' takes for
    // an integer.
    if (form.find_first_of(".e") == std::string_view::npos) out_ += ".0";
    return true;
  }

  // A keyword for the plist key KEY: `intern' of ":" and KEY, or, with
  // label_keys, a reference to the label it got where it first came.
  bool keyword(std::string_view key) {
    if (style_.label_keys) {
      scratch_.assign(key);
      auto [label, fresh] = labels_.try_emplace(scratch_, labels_.size() + 1);
      out_ += '#';
      out_ += std::to_string(label->second);
      if (!fresh) {
        out_ += '#';
        return true;
      }
      out_ += '=';
    }
    out_ += ':';
    for (char c : key) {
      auto byte = static_cast<unsigned char>(c);
      if (byte < 0x20 || byte >= 0x7f) return false;
      bool plain = (byte >= 'a' && byte <= 'z') || (byte >= 'A' && byte <= 'Z') ||
                   (byte >= '0' && byte <= '9') || byte == '-' || byte == '_';
      if (!plain) out_ += '\\';
      out_ += c;
    }
    return true;
  }

  bool string(std::string_view text) {
    out_ += '"';
    std::size_t i = 0;
    while (i < text.size()) {
      auto byte = static_cast<unsigned char>(text[i]);
      if (byte < 0x80) {
        // A NUL: jansson's documents in Emacs refuse it.
        if (byte == 0) return false;
        if (byte == '"' || byte == '\\') out_ += '\\';
        out_ += text[i];
        ++i;
        continue;
      }
      std::uint32_t code = 0;
      std::size_t count = 0;
      if (byte >= 0xc2 && byte <= 0xdf) {
        code = byte & 0x1fu;
        count = 1;
      } else if (byte >= 0xe0 && byte <= 0xef) {
        code = byte & 0x0fu;
        count = 2;
      } else if (byte >= 0xf0 && byte <= 0xf4) {
        code = byte & 0x07u;
        count = 3;
      } else {
        return false;
      }
      if (text.size() - i <= count) return false;
      for (std::size_t k = 1; k <= count; ++k) {
        auto next = static_cast<unsigned char>(text[i + k]);
        if ((next & 0xc0u) != 0x80u) return false;
        code = (code << 6) | (next & 0x3fu);
      }
      // Overlong forms, surrogates and what lies past Unicode are not
      // characters UTF-8 may carry.
      if ((count == 2 && code < 0x800) || (count == 3 && code < 0x10000) || code > 0x10ffff ||
          (code >= 0xd800 && code <= 0xdfff)) {
        return false;
      }
      i += count + 1;
      int digits = code <= 0xffff ? 4 : 8;
      out_ += '\\';
      out_ += digits == 4 ? 'u' : 'U';
      for (int shift = (digits - 1) * 4; shift >= 0; shift -= 4) out_ += kHex[(code >> shift) & 0xfu];
    }
    out_ += '"';
    return true;
  }

  const JsonLisp& style_;
  std::string& out_;
  std::vector<Object> objects_;
  // With label_keys, each key's label so far, and the key being looked up.
  std::unordered_map<std::string, std::size_t> labels_;
  std::string scratch_;
  // With label_keys, whether a hash table's symbols have their labels.
  bool tables_labelled_ = false;
  std::size_t depth_ = 0;
  bool spaced_ = false;
};

}  // namespace

bool json_lisp_available() noexcept {
  return true;
}

bool json_to_lisp(std::string_view text, const JsonLisp& style, std::string& out) {
  std::size_t start = out.size();
  try {
    LispWriter writer(style, out);
    rapidjson::Reader reader;
    rapidjson::MemoryStream stream(text.data(), text.size());
    // Iterative: the engine thread's stack does not grow with the nesting.
    constexpr unsigned kFlags = rapidjson::kParseValidateEncodingFlag |
                                rapidjson::kParseNumbersAsStringsFlag |
                                rapidjson::kParseIterativeFlag;
    if (reader.Parse<kFlags>(stream, writer).IsError()) {
      out.resize(start);
      return false;
    }
    return true;
  } catch (const std::bad_alloc&) {
    out.resize(start);
    return false;
  }
}

#else

bool json_lisp_available() noexcept {
  return false;
}

bool json_to_lisp(std::string_view, const JsonLisp&, std::string&) {
  return false;
}

#endif

namespace {

// Walks UNITS, a run of whole LSP messages (header block, blank line,
// Content-Length bytes of body), calling REWRITE with each body and an
// empty string.  Where REWRITE returns true, having put the new body in the
// string, the message becomes that body under a Content-Length of its own
// (the other headers go); else it stays as it was.  Returns UNITS unchanged
// if they are not such a run.  RESERVE is the room the result is given.
template <typename Rewrite>
std::string rewrite_bodies(std::string_view units, std::size_t reserve, Rewrite&& rewrite) {
  std::string out;
  out.reserve(reserve);
  std::string rewritten;
  std::string why;
  std::size_t at = 0;
  while (at < units.size()) {
    std::size_t block_end = units.find(kLspHeaderEnd, at);
    if (block_end == std::string_view::npos) return std::string(units);
    std::optional<std::size_t> length = lsp_content_length(units.substr(at, block_end - at), why);
    std::size_t body_at = block_end + kLspHeaderEnd.size();
    if (!length || units.size() - body_at < *length) return std::string(units);
    rewritten.clear();
    if (rewrite(units.substr(body_at, *length), rewritten)) {
      out += "Content-Length: ";
      out += std::to_string(rewritten.size());
      out += kLspHeaderEnd;
      out += rewritten;
    } else {
      out.append(units.substr(at, body_at + *length - at));
    }
    at = body_at + *length;
  }
  return out;
}

// Hands TEXT to FILER if it is FILE_THRESHOLD bytes or more; where FILER
// takes it, sets BODY to MARKER, FILER's name for it and a newline, and
// returns true.
bool file_body(std::string_view text, const LispBodyFiler& filer, std::size_t file_threshold,
               std::string_view marker, std::string& body) {
  std::string name;
  if (text.size() < file_threshold || !filer(text, name)) return false;
  body.assign(marker);
  body += name;
  body += '\n';
  return true;
}

}  // namespace

std::string lsp_bodies_to_lisp(std::string_view units, const JsonLisp& style,
                               const LispBodyFiler* filer, std::size_t file_threshold) {
  if (!json_lisp_available()) return std::string(units);
  std::string lisp;
  JsonLisp labelled = style;
  labelled.label_keys = true;
  return rewrite_bodies(units, units.size() + units.size() / 8,
                        [&](std::string_view json, std::string& body) {
                          lisp.assign(kLispBodyMarker);
                          const JsonLisp& use = json.size() >= kLabelKeysFrom ? labelled : style;
                          if (!json_to_lisp(json, use, lisp)) return false;
                          if (!filer || !file_body(lisp, *filer, file_threshold, kLispFileMarker, body)) {
                            body.swap(lisp);
                          }
                          return true;
                        });
}

std::string lsp_bodies_to_files(std::string_view units, const LispBodyFiler& filer,
                                std::size_t file_threshold) {
  return rewrite_bodies(units, units.size(), [&](std::string_view json, std::string& body) {
    return file_body(json, filer, file_threshold, kJsonFileMarker, body);
  });
}

}  // namespace fastrevert
