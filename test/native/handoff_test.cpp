// Tests of the hand-off: children served on the waiting thread, the nursery
// they wait in, and their adoption by the engine.
#include "core/handoff.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "core/child.h"
#include "core/engine.h"
#include "core/process_table.h"
#include "engine_harness.h"
#include "support.h"

using namespace fastrevert;

using fastrevert::test::Clock;
using fastrevert::test::EngineHarness;
using fastrevert::test::is_gone;
using fastrevert::test::never_exiting;
using fastrevert::test::pattern_bytes;
using fastrevert::test::shell;
using fastrevert::test::TempDir;
using fastrevert::test::write_file;

namespace {

// Has the engine's table of HARNESS adopt NURSERY's children when due.
void attend(EngineHarness& harness, std::shared_ptr<Nursery> nursery) {
  harness.with_table([&](ProcessTable& table) {
    (void)table;
    harness.engine().service<NurseryAdoption>().attend(nursery);
  });
}

}  // namespace

TEST_CASE("nursery hands out each child once and arms its timer only while it holds one",
          "[process]") {
  Nursery nursery(std::chrono::milliseconds(20));
  auto due = [&](int timeout_ms) {
    pollfd timer = {nursery.timer_fd(), POLLIN, 0};
    return poll(&timer, 1, timeout_ms) == 1;
  };
  CHECK_FALSE(due(50));
  Child first = spawn(never_exiting());
  pid_t first_pid = first.pid;
  nursery.put(1, std::make_unique<ProcessHandover>(std::move(first), ProcessTable::Options{}));
  nursery.put(2,
              std::make_unique<ProcessHandover>(spawn(never_exiting()), ProcessTable::Options{}));
  CHECK(nursery.size() == 2);
  CHECK(nursery.take(3) == nullptr);
  std::unique_ptr<ProcessHandover> taken = nursery.take(1);
  CHECK(taken != nullptr);
  CHECK(nursery.take(1) == nullptr);
  // A child still waits: the timer comes due, until the engine takes it.
  CHECK(due(5000));
  auto rest = nursery.take_due();
  CHECK_FALSE(due(0));
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].first == 2);
  CHECK(nursery.size() == 0);
  // A child put right after the engine took the others comes due in its
  // turn: taking the due children made the timer ready to be armed again.
  nursery.put(3,
              std::make_unique<ProcessHandover>(spawn(never_exiting()), ProcessTable::Options{}));
  CHECK(due(5000));
  auto next = nursery.take_due();
  REQUIRE(next.size() == 1);
  CHECK(next[0].first == 3);
  CHECK_FALSE(due(0));
  // A child taken before the delay leaves the timer disarmed.
  nursery.put(4,
              std::make_unique<ProcessHandover>(spawn(never_exiting()), ProcessTable::Options{}));
  CHECK(nursery.take(4) != nullptr);
  CHECK_FALSE(due(100));
  // A handover nobody adopts kills and reaps its child.
  taken.reset();
  CHECK(is_gone(first_pid));
  // So does a nursery dropped with children in it.
  pid_t left_pid;
  {
    Nursery dropped(std::chrono::seconds(10));
    Child left = spawn(never_exiting());
    left_pid = left.pid;
    dropped.put(1, std::make_unique<ProcessHandover>(std::move(left), ProcessTable::Options{}));
  }
  CHECK(is_gone(left_pid));
}

TEST_CASE("the engine's table adopts the children the nursery keeps past its delay", "[process]") {
  pid_t waiting_pid;
  {
    EngineHarness harness;
    auto nursery = std::make_shared<Nursery>(std::chrono::milliseconds(5));
    attend(harness, nursery);
    nursery->put(
        1, std::make_unique<ProcessHandover>(spawn(shell("echo hi")), ProcessTable::Options{}));
    REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
    CHECK(harness.output_of(1, 1) == "hi\n");
    CHECK(nursery->size() == 0);
  }
  {
    // Children still in the nursery when the engine stops die with it.
    EngineHarness harness;
    auto nursery = std::make_shared<Nursery>(std::chrono::seconds(60));
    attend(harness, nursery);
    Child waiting = spawn(never_exiting());
    waiting_pid = waiting.pid;
    nursery->put(1, std::make_unique<ProcessHandover>(std::move(waiting), ProcessTable::Options{}));
  }
  CHECK(is_gone(waiting_pid));
}

namespace {

// A hand-off whose nursery the engine would adopt from only after a minute:
// whatever a test sees served was served by the waiting thread.
Handoff::Tuning served_here() {
  Handoff::Tuning tuning;
  tuning.adoption_delay = std::chrono::minutes(1);
  return tuning;
}

bool never_quit() {
  return false;
}

// Serves HANDOFF and drains HARNESS until ID's exit record has come, or
// TIMEOUT passes; returns whether it came.
bool serve_until_exit(EngineHarness& harness, Handoff& handoff, std::uint64_t id,
                      std::chrono::seconds timeout = std::chrono::seconds(20)) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    handoff.serve(std::chrono::milliseconds(50), never_quit);
    if (harness.wait_until([&] { return harness.exits_of(id) > 0; },
                           std::chrono::milliseconds(0))) {
      return true;
    }
  }
  return false;
}

}  // namespace

TEST_CASE("handoff serves a short-lived child on the waiting thread with its output and exit",
          "[handoff]") {
  EngineHarness harness;
  Handoff handoff(harness.engine(), served_here());
  handoff.put(1, std::make_unique<ProcessHandover>(spawn(shell("echo out; echo err >&2; exit 5")),
                                                   ProcessTable::Options{}));
  REQUIRE(serve_until_exit(harness, handoff, 1));
  CHECK(harness.output_of(1, 1) == "out\n");
  CHECK(harness.output_of(1, 2) == "err\n");
  REQUIRE(harness.exits_of(1) == 1);
  CHECK(harness.exit_of(1)->data == "exited");
  CHECK(harness.exit_of(1)->code == 5);
}

TEST_CASE("handoff has nothing to serve when no child waits", "[handoff]") {
  EngineHarness harness;
  Handoff handoff(harness.engine(), served_here());
  auto start = Clock::now();
  CHECK_FALSE(handoff.serve(std::chrono::seconds(10), never_quit).has_value());
  CHECK(Clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("handoff gives a running child back when the wait ends and hands it to the engine",
          "[handoff]") {
  EngineHarness harness;
  Handoff handoff(harness.engine(), served_here());
  handoff.put(1,
              std::make_unique<ProcessHandover>(spawn(never_exiting()), ProcessTable::Options{}));
  std::optional<bool> served = handoff.serve(std::chrono::milliseconds(30), never_quit);
  REQUIRE(served.has_value());
  CHECK_FALSE(*served);
  // Back in the nursery: the next wait serves it again.
  CHECK(handoff.serve(std::chrono::milliseconds(1), never_quit).has_value());
  handoff.hand_to_engine(1);
  harness.with_table([](ProcessTable& table) {
    CHECK(table.contains(1));
    table.remove(1);
  });
  // Gone from the nursery: nothing is left to serve.
  CHECK_FALSE(handoff.serve(std::chrono::milliseconds(1), never_quit).has_value());
}

TEST_CASE("handoff ends its wait when the user quits", "[handoff]") {
  pid_t pid;
  {
    EngineHarness harness;
    Handoff handoff(harness.engine(), served_here());
    Child child = spawn(never_exiting());
    pid = child.pid;
    handoff.put(1, std::make_unique<ProcessHandover>(std::move(child), ProcessTable::Options{}));
    int asked = 0;
    auto start = Clock::now();
    std::optional<bool> served =
        handoff.serve(std::chrono::seconds(30), [&asked] { return ++asked >= 2; });
    CHECK(Clock::now() - start < std::chrono::seconds(10));
    REQUIRE(served.has_value());
    CHECK_FALSE(*served);
    CHECK(asked >= 2);
    CHECK(kill(pid, 0) == 0);
  }
  // The engine's shutdown kills the children left waiting.
  CHECK(is_gone(pid));
}

TEST_CASE("handoff sends a child whose output streams to the engine when the wait ends",
          "[handoff]") {
  EngineHarness harness;
  Handoff::Tuning tuning = served_here();
  tuning.streaming_bytes = 1000;
  Handoff handoff(harness.engine(), tuning);
  handoff.put(
      1, std::make_unique<ProcessHandover>(spawn(shell("head -c 5000 /dev/zero; exec sleep 1000")),
                                           ProcessTable::Options{}));
  // Served until its output is in; the wait ends with results.
  auto deadline = Clock::now() + std::chrono::seconds(20);
  bool ready = false;
  while (!ready && Clock::now() < deadline) {
    ready = handoff.serve(std::chrono::milliseconds(50), never_quit).value_or(false);
  }
  REQUIRE(ready);
  // Not given back to wait: the engine has it without being asked.
  CHECK_FALSE(handoff.serve(std::chrono::milliseconds(1), never_quit).has_value());
  harness.with_table([](ProcessTable& table) {
    CHECK(table.contains(1));
    table.remove(1);
  });
}

TEST_CASE("a child served partly while waiting and partly by the engine loses no byte",
          "[handoff]") {
  EngineHarness harness;
  Handoff::Tuning tuning;
  tuning.adoption_delay = std::chrono::milliseconds(5);
  Handoff handoff(harness.engine(), tuning);
  std::string expected;
  for (int i = 0; i < 3000; ++i) expected += "line" + std::to_string(i) + "\n";
  // Pauses in the output let waits end, the engine adopt the child, and the
  // next waits find the nursery empty or not, in whatever order they come.
  handoff.put(1, std::make_unique<ProcessHandover>(
                     spawn(shell("i=0; while [ $i -lt 3000 ]; do echo line$i; i=$((i+1)); "
                                 "[ $((i % 300)) = 0 ] && sleep 0.01; done; exit 0")),
                     ProcessTable::Options{}));
  REQUIRE(serve_until_exit(harness, handoff, 1));
  CHECK(harness.output_of(1, 1).size() == expected.size());
  CHECK(harness.output_of(1, 1) == expected);
  CHECK(harness.exits_of(1) == 1);
}

namespace {

// The seed of a seeded test: FASTREVERT_TEST_SEED when set (test/stress.sh
// sets it for every run), else random.  The tests print it when they fail.
std::uint32_t test_seed() {
  const char* given = std::getenv("FASTREVERT_TEST_SEED");
  if (given && *given) return static_cast<std::uint32_t>(std::strtoul(given, nullptr, 10));
  return std::random_device()();
}

// Draws for a seeded round.  Only the generator's raw output is used, which
// the standard fixes, so that a seed draws the same rounds with every
// standard library.
class Draw {
 public:
  explicit Draw(std::uint32_t seed) : generator_(seed) {}
  // A number in [LOW, HIGH].
  std::uint64_t between(std::uint64_t low, std::uint64_t high) {
    return low + generator_() % (high - low + 1);
  }
  bool chance(int percent) { return static_cast<int>(generator_() % 100) < percent; }

 private:
  std::mt19937 generator_;
};

// A child of a round of the order test: what it runs, what it must write,
// and, for one that writes back its stdin, what is still to send.
struct OrderChild {
  std::uint64_t id = 0;
  SpawnSpec spec;
  std::string expected;
  std::vector<std::string> input;
  bool started = false;
};

// A child drawn from DRAW: a burst of megabytes, slices of PATTERN_FILE
// (whose bytes are PATTERN) with pauses, short lines with pauses, or cat
// fed on its stdin.
OrderChild draw_child(Draw& draw, std::uint64_t id, const std::string& pattern_file,
                      const std::string& pattern) {
  OrderChild child;
  child.id = id;
  auto slice = [&](std::uint64_t size) {
    std::uint64_t start = draw.between(0, pattern.size() - size);
    child.expected += pattern.substr(start, size);
    return "tail -c +" + std::to_string(start + 1) + " '" + pattern_file + "' | head -c " +
           std::to_string(size);
  };
  switch (draw.between(0, 3)) {
    case 0:
      // Past the streaming threshold at once: the waiting thread reads it
      // first, and the engine takes it over when the wait ends.
      child.spec = shell(slice(draw.between(100000, 900000)));
      break;
    case 1: {
      std::string script;
      for (std::uint64_t i = draw.between(1, 6); i > 0; --i) {
        script += slice(draw.between(1, draw.chance(50) ? 150000 : 3000));
        if (i > 1) script += "; sleep 0.00" + std::to_string(draw.between(1, 4)) + "; ";
      }
      child.spec = shell(script);
      break;
    }
    case 2: {
      std::uint64_t lines = draw.between(2, 20);
      std::string tag = "c" + std::to_string(id) + "-";
      for (std::uint64_t i = 0; i < lines; ++i) child.expected += tag + std::to_string(i) + "\n";
      child.spec = shell("i=0; while [ $i -lt " + std::to_string(lines) + " ]; do echo " + tag +
                         "$i; i=$((i+1)); sleep 0.00" + std::to_string(draw.between(1, 3)) +
                         "; done");
      break;
    }
    default:
      child.spec.program = "/bin/cat";
      child.spec.argv = {"cat"};
      child.spec.stdin_mode = SpawnSpec::Stdin::pipe;
      for (std::uint64_t i = draw.between(1, 4); i > 0; --i) {
        std::uint64_t size = draw.between(1, draw.chance(30) ? 60000 : 500);
        std::string piece = pattern.substr(draw.between(0, pattern.size() - size), size);
        child.expected += piece;
        child.input.push_back(std::move(piece));
      }
      break;
  }
  return child;
}

// Hands CHILD to the engine, as a command for it does, and sends it its
// next piece of input, closing its stdin after the last.
void feed(Engine& engine, Handoff& handoff, OrderChild& child) {
  if (child.input.empty()) return;
  handoff.hand_to_engine(child.id);
  std::string piece = std::move(child.input.front());
  child.input.erase(child.input.begin());
  bool last = child.input.empty();
  std::uint64_t id = child.id;
  engine.post([id, piece = std::move(piece), last](Engine& e) mutable {
    ProcessTable& table = e.service<ProcessTable>();
    table.write_stdin(id, std::move(piece));
    if (last) table.close_stdin(id);
  });
}

// BYTES with every byte that is not printable ASCII as \ooo.
std::string printable(const std::string& bytes) {
  std::string text;
  for (unsigned char byte : bytes) {
    if (byte >= 0x20 && byte < 0x7f && byte != '\\' && byte != '"') {
      text += static_cast<char>(byte);
    } else {
      text += '\\';
      text += static_cast<char>('0' + (byte >> 6));
      text += static_cast<char>('0' + ((byte >> 3) & 7));
      text += static_cast<char>('0' + (byte & 7));
    }
  }
  return text;
}

// What went wrong with ID's records in HARNESS, or "" when its stdout is
// EXPECTED, all of it before its one exit record, which says it exited 0.
std::string order_fault(EngineHarness& harness, std::uint64_t id, const std::string& expected) {
  std::string output;
  int exits = 0;
  for (const Record& record : harness.records()) {
    if (record.id != id) continue;
    if (record.kind == test::kExitKind) {
      ++exits;
      if (record.data != "exited" || record.code != 0) {
        return "it ended as " + record.data + " " + std::to_string(record.code);
      }
    } else if (record.kind == test::kOutputKind) {
      if (exits > 0) return "output came after its exit record";
      if (record.code != 1) {
        return "output on stream " + std::to_string(record.code);
      }
      output += record.data;
    } else {
      return std::string("a record of kind ") + record_kind_name(record.kind);
    }
  }
  if (exits != 1) return std::to_string(exits) + " exit records";
  if (output.size() != expected.size()) {
    return std::to_string(output.size()) + " bytes of stdout, not " +
           std::to_string(expected.size());
  }
  for (std::size_t i = 0; i < output.size(); ++i) {
    if (output[i] != expected[i]) {
      return "stdout differs at byte " + std::to_string(i) + ": got \"" +
             printable(output.substr(i, 24)) + "\", expected \"" +
             printable(expected.substr(i, 24)) + "\"";
    }
  }
  return "";
}

}  // namespace

TEST_CASE(
    "every stream stays whole and in order however its child moves between the waiting thread "
    "and the engine",
    "[handoff]") {
  const std::uint32_t seed = test_seed();
  INFO("FASTREVERT_TEST_SEED=" << seed);
  TempDir dir;
  const std::string pattern_file = dir / "pattern";
  const std::string pattern = pattern_bytes(std::size_t{1} << 20, seed);
  write_file(pattern_file, pattern);
  std::unique_ptr<EngineHarness> harness;
  std::unique_ptr<Handoff> handoff;
  std::uint64_t next_id = 1;
  int fresh_engines = 0;
  // 150 rounds, or as many past the first 20 as 40 seconds allow: under a
  // sanitizer on a loaded machine a round takes many times as long.
  const auto budget = Clock::now() + std::chrono::seconds(40);
  std::uint32_t round = 0;
  for (; round < 150 && (round < 20 || Clock::now() < budget); ++round) {
    Draw draw(seed * 7919u + round);
    // Some rounds start on a new engine, whose first child is theirs.
    if (round % 7 == 0 || draw.chance(10)) {
      handoff.reset();
      harness.reset();
      harness = std::make_unique<EngineHarness>();
      // The hand-off's own tuning, as the module runs it.
      handoff = std::make_unique<Handoff>(harness->engine());
      ++fresh_engines;
    }
    harness->records().clear();
    std::vector<OrderChild> children;
    for (std::uint64_t i = draw.between(2, 6); i > 0; --i) {
      children.push_back(draw_child(draw, next_id++, pattern_file, pattern));
    }
    auto start = [&](OrderChild& child) {
      handoff->put(child.id, std::make_unique<ProcessHandover>(spawn(child.spec),
                                                               ProcessTable::Options{}));
      child.started = true;
    };
    for (std::size_t i = 0, at_once = draw.between(1, children.size()); i < at_once; ++i) {
      start(children[i]);
    }
    auto all_ended = [&] {
      for (const OrderChild& child : children) {
        if (harness->exits_of(child.id) == 0) return false;
      }
      return true;
    };
    // The main thread as Lisp drives it: waits of every length, which
    // serve the children waiting to be served; filters that take their
    // time, while the engine adopts those children; children started and
    // fed meanwhile.
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (!harness->wait_until(all_ended, std::chrono::milliseconds(0)) &&
           Clock::now() < deadline) {
      OrderChild& some = children[draw.between(0, children.size() - 1)];
      switch (draw.between(0, 9)) {
        case 0:
        case 1:
          std::this_thread::sleep_for(std::chrono::microseconds(draw.between(0, 4000)));
          break;
        case 2:
          if (!some.started) start(some);
          break;
        case 3:
          if (some.started) feed(harness->engine(), *handoff, some);
          break;
        default:
          if (!handoff->serve(std::chrono::microseconds(draw.between(0, 15000)), never_quit)) {
            harness->engine().wait_for_records(std::chrono::milliseconds(draw.between(0, 10)));
          }
          break;
      }
    }
    INFO("round " << round);
    for (OrderChild& child : children) {
      INFO("child " << child.id << ", " << child.spec.argv.back());
      CHECK(child.started);
      CHECK(child.input.empty());
      CHECK(order_fault(*harness, child.id, child.expected) == "");
    }
    if (!all_ended()) break;
  }
  INFO(round << " rounds");
  CHECK(fresh_engines > 1);
}
