#include "core/utf8.h"

#include <cstdint>
#include <cstring>

namespace fastrevert {

bool valid_utf8(std::string_view bytes) noexcept {
  const auto* at = reinterpret_cast<const unsigned char*>(bytes.data());
  const unsigned char* end = at + bytes.size();
  while (at < end) {
    // Most output is ASCII: eight bytes at a time while no high bit is set.
    while (end - at >= 8) {
      std::uint64_t word;
      std::memcpy(&word, at, sizeof word);
      if (word & 0x8080808080808080ULL) break;
      at += 8;
    }
    if (at == end) break;
    unsigned char lead = *at;
    if (lead < 0x80) {
      ++at;
      continue;
    }
    // The second byte's range depends on the lead: it is where overlong
    // forms, surrogates and code points past U+10FFFF are told apart.
    unsigned char low = 0x80;
    unsigned char high = 0xBF;
    std::ptrdiff_t length;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;
      if (lead == 0xED) high = 0x9F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;
      if (lead == 0xF4) high = 0x8F;
    } else {
      return false;
    }
    if (end - at < length) return false;
    if (at[1] < low || at[1] > high) return false;
    for (std::ptrdiff_t i = 2; i < length; ++i) {
      if ((at[i] & 0xC0) != 0x80) return false;
    }
    at += length;
  }
  return true;
}

}  // namespace fastrevert
