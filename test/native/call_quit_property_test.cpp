// Property tests of what a quit keeps of a synchronous call's output.
//
// A child prints a seeded stream (tools/seeded_stream.h) at a seeded pace:
// it floods, trickles, stalls and resumes.  Once it has written a seeded
// number of bytes it tells the test, which then quits.  Each case forces one
// of the paths run_call takes output by, or the moves between them, over
// many seeded rounds.  After the quit:
// - what the caller was handed is a prefix of the stream;
// - it holds every byte run_call counted as read, and every byte the child
//   wrote before the quit, less an unfinished character;
// - the child is reaped.
//
// The cases are hidden from a plain run of the test program (ctest runs them
// on their own, with a longer time limit).  FASTREVERT_TEST_SEED sets the
// first round's seed (each round's is the one
// before plus one) and FASTREVERT_PROPERTY_ROUNDS the rounds per case
// (1,000); a failure names its round's seed, which replays it alone with
// FASTREVERT_PROPERTY_ROUNDS=1.
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>

#include "catch_compat.h"
#include "core/call.h"
#include "core/child.h"
#include "seeded_stream.h"
#include "support.h"

using namespace fastrevert;

using fastrevert::test::is_gone;
using fastrevert::test::SeededRandom;
using fastrevert::test::SeededStream;
using fastrevert::test::TempDir;

namespace {

// How one case reaches the path it tests.
struct PathCase {
  const char* name;
  std::uint64_t chunk;
  OutputCut cut;
  std::size_t min_length;
  std::size_t max_length;
  // A pace for every round, or null for a seeded one of all four.
  const char* pace = nullptr;
  // The child closes its output once it has written it all, and the quit
  // comes after that.
  bool close = false;
  bool caller_reads_pipe = true;
  std::size_t string_limit = kCallStringLimit;
  std::uint64_t copier_threshold = kCallCopierThreshold;
};

std::uint64_t first_seed() {
  if (const char* given = std::getenv("FASTREVERT_TEST_SEED")) {
    return std::strtoull(given, nullptr, 10);
  }
  return std::random_device()();
}

int rounds() {
  const char* given = std::getenv("FASTREVERT_PROPERTY_ROUNDS");
  return given ? std::max(1, std::atoi(given)) : 1000;
}

// The least a quit keeps of the first N bytes of STREAM, as the test sees
// the rule: N less an unfinished character in UTF-8 (the stream has no CR),
// all N in raw bytes, and up to the last byte below 0x80 that is neither a
// digit nor a CR under the ASCII-compatible rule.
std::size_t least_kept(const SeededStream& stream, std::size_t n, OutputCut cut) {
  n = std::min(n, stream.bytes.size());
  switch (cut) {
    case OutputCut::utf8:
      return *(std::upper_bound(stream.boundaries.begin(), stream.boundaries.end(), n) - 1);
    case OutputCut::bytes:
      return n;
    case OutputCut::ascii:
      break;
  }
  while (n > 0) {
    auto byte = static_cast<unsigned char>(stream.bytes[n - 1]);
    if (byte < 0x80 && byte != '\r' && (byte < '0' || byte > '9')) break;
    --n;
  }
  return n;
}

void sleep_ms(std::uint64_t milliseconds) {
  timespec wait = {0, static_cast<long>(milliseconds) * 1000000};
  nanosleep(&wait, nullptr);
}

// One round: true when every property held.
bool quit_round(const PathCase& path, std::uint64_t seed) {
  SeededRandom random(seed);
  std::size_t length = random.sized(path.min_length, path.max_length);
  SeededStream stream = fastrevert::test::seeded_stream(seed, length);
  static const char* const kPaces[] = {"flood", "trickle", "stall", "mixed"};
  std::string pace = path.pace ? path.pace : kPaces[random.between(0, 3)];
  // Past the end, with `close': the child marks once its output is closed.
  std::uint64_t quit_at =
      path.close ? stream.bytes.size() + 1 : random.between(0, stream.bytes.size());
  bool slow_caller = random.between(0, 3) == 0;

  TempDir dir;
  std::string marker = dir.file("quit");
  SpawnSpec spec;
  spec.program = FASTREVERT_TEST_WRITER;
  spec.argv = {spec.program,
               "write",
               std::to_string(seed),
               std::to_string(length),
               pace,
               std::to_string(quit_at),
               marker};
  if (path.close) spec.argv.emplace_back("close");
  spec.new_session = true;
  Child child = spawn(spec);
  pid_t pid = child.pid;

  std::string handed;
  bool in_order = true;
  CallHooks hooks;
  hooks.insert_bytes = [&](std::string_view bytes) { handed.append(bytes); };
  hooks.insert_range = [&](int memfd, std::uint64_t from, std::uint64_t to) {
    in_order = in_order && from == handed.size() && to > from;
    std::string part(static_cast<std::size_t>(to - from), '\0');
    in_order = in_order && pread(memfd, part.data(), part.size(), static_cast<off_t>(from)) ==
                               static_cast<ssize_t>(part.size());
    handed += part;
    // A caller that decodes slowly, at 256 KiB a millisecond, lets the
    // child outpace it.
    if (slow_caller) sleep_ms((to - from) >> 18);
  };
  if (path.caller_reads_pipe) {
    hooks.insert_pipe = [&](int pipe_fd) {
      std::uint64_t taken = 0;
      char buffer[65536];
      for (ssize_t got; (got = read(pipe_fd, buffer, sizeof buffer)) != 0;) {
        if (got < 0) {
          in_order = false;
          break;
        }
        handed.append(buffer, static_cast<std::size_t>(got));
        taken += static_cast<std::uint64_t>(got);
      }
      return taken;
    };
  }
  hooks.cut = path.cut;
  hooks.should_quit = [&marker] { return access(marker.c_str(), F_OK) == 0; };
  hooks.quit_poll_ms = 2;
  hooks.string_limit = path.string_limit;
  hooks.copier_threshold = path.copier_threshold;
  CallResult result = run_call(child, path.chunk, hooks);

  std::size_t read = static_cast<std::size_t>(result.bytes);
  std::size_t written_before_quit = std::min<std::size_t>(quit_at, stream.bytes.size());
  bool prefix = handed.size() <= stream.bytes.size() &&
                std::string_view(stream.bytes).substr(0, handed.size()) == handed;
  std::size_t mismatch = 0;
  while (mismatch < handed.size() && mismatch < stream.bytes.size() &&
         handed[mismatch] == stream.bytes[mismatch]) {
    ++mismatch;
  }
  bool kept_read = handed.size() >= least_kept(stream, read, path.cut);
  bool kept_written = handed.size() >= least_kept(stream, written_before_quit, path.cut);
  bool no_more_than_read = handed.size() <= read;
  bool reaped = is_gone(pid);
  bool held =
      result.quit && in_order && prefix && kept_read && kept_written && no_more_than_read && reaped;
  if (!held) {
    INFO("case: " << path.name << "; seed " << seed << " (replay: FASTREVERT_TEST_SEED=" << seed
                  << " FASTREVERT_PROPERTY_ROUNDS=1)");
    INFO("stream " << stream.bytes.size() << " bytes at pace " << pace << ", quit after " << quit_at
                   << ", slow caller " << slow_caller);
    INFO("handed " << handed.size() << " bytes, first mismatch at " << mismatch
                   << ", run_call read " << read << ", copy thread " << result.copier_used);
    CHECK(result.quit);
    CHECK(in_order);
    CHECK(prefix);
    CHECK(kept_read);
    CHECK(kept_written);
    CHECK(no_more_than_read);
    CHECK(reaped);
  }
  return held;
}

void check_quits(const PathCase& path) {
  std::uint64_t seed = first_seed();
  int count = rounds();
  INFO("case: " << path.name << ", first seed " << seed << ", " << count << " rounds");
  int held = 0;
  for (int round = 0; round < count; ++round) {
    if (!quit_round(path, seed + static_cast<std::uint64_t>(round))) break;
    ++held;
  }
  CHECK(held == count);
}

}  // namespace

TEST_CASE("call_quit_property: a string, while the output fits one", "[call][.quit]") {
  PathCase path{"string", 65536, OutputCut::utf8, 1, kCallStringLimit};
  path.pace = "stall";
  check_quits(path);
}

TEST_CASE("call_quit_property: the caller's read of a pipe its child closed", "[call][.quit]") {
  PathCase path{"pipe", 65536, OutputCut::utf8, kCallStringLimit + 1, 60000};
  path.pace = "flood";
  path.close = true;
  check_quits(path);
}

TEST_CASE("call_quit_property: ranges of a spilled output, read on the calling thread",
          "[call][.quit]") {
  PathCase path{"memfd", 65536, OutputCut::utf8, kCallStringLimit, std::size_t{1} << 20};
  path.copier_threshold = ~std::uint64_t{0};
  check_quits(path);
}

TEST_CASE("call_quit_property: the copy thread", "[call][.quit]") {
  PathCase path{"copier", 4096, OutputCut::utf8, 65536, std::size_t{1} << 20};
  path.copier_threshold = 0;
  check_quits(path);
}

TEST_CASE("call_quit_property: an output that cannot be cut", "[call][.quit]") {
  PathCase path{"uncut", 0, OutputCut::ascii, 1024, std::size_t{1} << 20};
  check_quits(path);
}

TEST_CASE("call_quit_property: moves between paths as the pace changes", "[call][.quit]") {
  PathCase path{"moves", 65536, OutputCut::utf8, 4096, std::size_t{2} << 20};
  path.pace = "mixed";
  path.string_limit = 4096;
  path.copier_threshold = 256 * 1024;
  check_quits(path);
}

TEST_CASE("call_quit_property: raw bytes, cut anywhere", "[call][.quit]") {
  PathCase path{"bytes", 65536, OutputCut::bytes, 1024, std::size_t{1} << 20};
  path.string_limit = 4096;
  path.copier_threshold = 256 * 1024;
  check_quits(path);
}
