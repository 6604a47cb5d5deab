// The native tests' one way into Catch2, version 2 or 3, whichever CMake
// found (it defines FASTREVERT_CATCH2_MAJOR).  Catch2 2 is a single header;
// Catch2 3 splits it into parts and renames the substring matcher, so the
// tests include this file and name that matcher through contains_text().
#pragma once

#include <string>

#if FASTREVERT_CATCH2_MAJOR >= 3
#include <catch2/catch_template_test_macros.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#else
#include <catch2/catch.hpp>
#endif

namespace fastrevert::test {

// Matches a string that contains `part`, case-sensitively.
inline auto contains_text(const std::string& part) {
#if FASTREVERT_CATCH2_MAJOR >= 3
  return Catch::Matchers::ContainsSubstring(part);
#else
  return Catch::Matchers::Contains(part);
#endif
}

}  // namespace fastrevert::test
