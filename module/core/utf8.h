// Strict UTF-8 (RFC 3629): what Emacs's `utf-8' coding system decodes into
// the same characters that the module API's make_string makes.
#pragma once

#include <string_view>

namespace fastrevert {

// Whether BYTES are well-formed UTF-8: no overlong form, no surrogate, no
// code point above U+10FFFF, no sequence cut short.  Emacs decodes anything
// else to raw bytes (or, past U+10FFFF, to characters of its own), which
// make_string would not.
bool valid_utf8(std::string_view bytes) noexcept;

}  // namespace fastrevert
