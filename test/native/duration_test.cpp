// Tests of the one conversion from Lisp seconds to a duration.
#include "core/duration.h"

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>

#include "catch_compat.h"

using namespace fastrevert;
using namespace std::chrono_literals;

TEST_CASE("seconds become nanoseconds and a tiny positive wait never becomes none", "[duration]") {
  CHECK(seconds_to_duration(0.0) == 0ns);
  CHECK(seconds_to_duration(1.5) == 1500ms);
  CHECK(seconds_to_duration(1e-12) == 1ns);
  CHECK(ceil_milliseconds(1ns) == 1ms);
  CHECK(ceil_milliseconds(0ns) == 0ms);
}

TEST_CASE("infinite and huge seconds saturate at kForever instead of overflowing", "[duration]") {
  for (double seconds : {std::numeric_limits<double>::infinity(), 1e13, 4.6e18, 2.0e21,
                         std::numeric_limits<double>::max()}) {
    INFO(seconds);
    CHECK(seconds_to_duration(seconds) == kForever);
  }
  // Just below the cap is kept as it is.
  CHECK(seconds_to_duration(3.0e9) == std::chrono::nanoseconds(3'000'000'000'000'000'000));
  // kForever can be added to the clocks in use without overflow.
  auto later = std::chrono::steady_clock::now() + kForever;
  CHECK(later > std::chrono::steady_clock::now());
  CHECK(ceil_milliseconds(kForever).count() < std::numeric_limits<std::int64_t>::max() / 1000);
}

TEST_CASE("NaN and negative seconds name no duration", "[duration]") {
  CHECK_FALSE(seconds_to_duration(std::nan("")));
  CHECK_FALSE(seconds_to_duration(-1.0));
  CHECK_FALSE(seconds_to_duration(-std::numeric_limits<double>::infinity()));
  CHECK_FALSE(seconds_to_duration(-1e-300));
  CHECK(seconds_to_duration(-0.0) == 0ns);
}
