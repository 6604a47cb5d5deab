// Seconds, as Lisp gives them, turned into a duration that is safe to use.
//
// Every primitive that takes a number of seconds converts it here, and only
// here.  A double that is infinite, or larger than any clock can add, would
// overflow the integer arithmetic of std::chrono and of libuv; NaN and
// negative numbers name no duration at all.
#pragma once

#include <chrono>
#include <optional>

namespace fastrevert {

// The longest duration fastrevert waits, sleeps or sets a timer for: one
// hundred years of 365 days.  It is forever to a user, and it can still be
// added to a reading of any clock (steady_clock in nanoseconds, libuv's
// uv_now() in milliseconds) without overflow.
inline constexpr std::chrono::nanoseconds kForever = std::chrono::hours(24 * 365 * 100);

// SECONDS as a duration, rounded up to the next nanosecond so that a tiny
// positive wait never becomes no wait, and capped at kForever (infinity
// included).  Returns std::nullopt for NaN and for negative SECONDS.
std::optional<std::chrono::nanoseconds> seconds_to_duration(double seconds) noexcept;

// DURATION in whole milliseconds, rounded up: a wait of 0.1 ms still waits.
std::chrono::milliseconds ceil_milliseconds(std::chrono::nanoseconds duration) noexcept;

}  // namespace fastrevert
