#include "core/duration.h"

#include <chrono>
#include <cmath>
#include <optional>

namespace fastrevert {

std::optional<std::chrono::nanoseconds> seconds_to_duration(double seconds) noexcept {
  if (std::isnan(seconds) || seconds < 0) return std::nullopt;
  // Compared as doubles before any conversion to an integer, which would be
  // undefined behaviour for a value out of range.
  constexpr double kForeverSeconds = static_cast<double>(kForever.count()) / 1e9;
  if (seconds >= kForeverSeconds) return kForever;
  return std::chrono::nanoseconds(
      static_cast<std::chrono::nanoseconds::rep>(std::ceil(seconds * 1e9)));
}

std::chrono::milliseconds ceil_milliseconds(std::chrono::nanoseconds duration) noexcept {
  return std::chrono::ceil<std::chrono::milliseconds>(duration);
}

}  // namespace fastrevert
