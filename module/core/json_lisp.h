// JSON to printed Emacs Lisp, off Emacs's main thread.
//
// Emacs 28 and 29 parse JSON (`json-parse-buffer', through the jansson
// library) at about twice the cost of `read' on the same data printed as
// Lisp.  A language server's reply can be several megabytes, parsed on the
// main thread while the user waits.  So the engine, which frames the
// server's messages on its own thread anyway, can rewrite each body as the
// Lisp text of the object `json-parse-buffer' would return, for the client's
// parse to be a `read'.
//
// The text is exactly that object, for the settings in JsonLisp:
// - an object is a plist of keywords (`:key value ...') or a hash table
//   with `equal' test and string keys, its members in document order;
// - an array is a vector, true is t, null and false are printed as given;
// - a string is a string with the same characters; ASCII strings come out
//   unibyte, where `json-parse-buffer' makes them multibyte (they are
//   `equal');
// - an integer is an integer, a number with a fraction or an exponent a
//   float of the same value.
// The text is ASCII: other characters are written as \uXXXX or \UXXXXXXXX.
//
// Where the object would not be the same, nothing is converted, and the
// client parses the JSON as it would have: text that is not exactly one
// JSON value (with blanks around it), invalid UTF-8 or escapes, a NUL in a
// string, an object with a key twice, a plist key with a character that is
// not printable ASCII, an integer outside 64 bits or a float outside the
// double range (jansson refuses both).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace fastrevert {

// Whether this build has the converter (RapidJSON was found).
bool json_lisp_available() noexcept;

struct JsonLisp {
  enum class Objects : std::uint8_t { plist, hash_table };
  Objects objects = Objects::plist;
  // How null and false are printed: `nil', or a keyword such as
  // `:json-false'.
  std::string null_form = "nil";
  std::string false_form = ":json-false";
  // Whether a plist key is printed with a label where it first comes
  // (`#1=:key') and as a reference to it after (`#1#'), as `read' takes
  // with `read-circle' non-nil; for hash tables, the symbols of the `#s'
  // form are (string keys stay strings of their own).  The keys of a
  // reply recur on every element of its arrays, and Emacs 28 reads a
  // reference faster than it reads and interns the name again: on a
  // clangd completion reply of 3.8 MB, a fifth of the read of plists (55
  // to 43 ms of processor time) and a seventh of that of hash tables
  // (163 to 138 ms).
  bool label_keys = false;
};

// The JSON body this long or longer that lsp_bodies_to_lisp prints with
// labelled keys (JsonLisp::label_keys): short ones, a hover's reply, have
// few keys to share, and the reader makes a table for the labels.
inline constexpr std::size_t kLabelKeysFrom = 64 * 1024;

// What begins each converted LSP body: a comment line, which `read' skips
// and no JSON text can begin with.
inline constexpr std::string_view kLispBodyMarker = ";;fastrevert-lisp\n";

// What begins the body that stands for a converted body kept in a file (see
// LispBodyFiler), followed by what the filer wrote and a newline.
inline constexpr std::string_view kLispFileMarker = ";;fastrevert-lisp-file ";

// Keeps the printed Lisp of a large body (its marker line included) out of
// the message: stores LISP where the reader can fetch it, writes into NAME
// what names it there (no newline), and returns true; returns false to keep
// the text in the message.  A reply of megabytes then reaches the client's
// filter as a line, and Emacs reads the Lisp from the file into a buffer
// without making a string of it (which costs a garbage collection of its own).
using LispBodyFiler = std::function<bool(std::string_view lisp, std::string& name)>;

// What begins the body that stands for a JSON body kept in a file as it
// was (see lsp_bodies_to_files), followed by the filer's name and a newline.
inline constexpr std::string_view kJsonFileMarker = ";;fastrevert-json-file ";

// Appends to OUT the printed Lisp of the JSON value TEXT, as STYLE says,
// and returns true; returns false, with OUT as it was, where the value
// would not be the same (see above).
bool json_to_lisp(std::string_view text, const JsonLisp& style, std::string& out);

// UNITS is a run of whole LSP messages, as the LSP framer cuts them (header
// block, blank line, Content-Length bytes of body).  Returns them with each
// body that converts replaced by kLispBodyMarker and its Lisp (with labelled
// keys from kLabelKeysFrom bytes of JSON on), under a
// Content-Length header of the new size; the other headers go, and a body
// that does not convert stays as it was, with its own headers.  Returns
// UNITS unchanged if they are not such a run.  With FILER, a body whose Lisp
// is FILE_THRESHOLD bytes or more goes to FILER, and the message's body is
// kLispFileMarker, the name FILER gave and a newline (where FILER refuses,
// the Lisp stays in the message).
std::string lsp_bodies_to_lisp(std::string_view units, const JsonLisp& style,
                               const LispBodyFiler* filer = nullptr,
                               std::size_t file_threshold = 0);

// UNITS as above, returned with each body of FILE_THRESHOLD bytes or more
// handed to FILER as it is (JSON) and replaced by kJsonFileMarker, the name
// FILER gave and a newline, under a Content-Length of its own.  Needs no
// JSON parser: the client parses the file's text itself.
std::string lsp_bodies_to_files(std::string_view units, const LispBodyFiler& filer,
                                std::size_t file_threshold);

}  // namespace fastrevert
