// The last occurrence of a byte in a buffer: memrchr where the C library has
// it (glibc, musl, FreeBSD), a backward scan elsewhere (macOS).
#pragma once

#include <cstddef>
#include <cstring>

#include "core/platform.h"

namespace fastrevert {

// A pointer to the last BYTE among the SIZE bytes at DATA, or null.
inline const char* find_last(const char* data, char byte, std::size_t size) noexcept {
#if FASTREVERT_HAVE_MEMRCHR
  return static_cast<const char*>(memrchr(data, byte, size));
#else
  for (std::size_t left = size; left > 0; --left) {
    if (data[left - 1] == byte) return data + left - 1;
  }
  return nullptr;
#endif
}

}  // namespace fastrevert
