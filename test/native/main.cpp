// Catch2 2's main is compiled here; Catch2 3 brings its own in the
// Catch2::Catch2WithMain library, and CMake leaves this file out then.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
