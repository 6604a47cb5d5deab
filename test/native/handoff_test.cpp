// Tests of the hand-off: children served on the waiting thread, the nursery
// they wait in, and their adoption by the engine.
#include "core/handoff.h"

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
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
  // A child still waits: the timer comes due.
  CHECK(due(5000));
  nursery.acknowledge();
  CHECK_FALSE(due(0));
  auto rest = nursery.take_all();
  REQUIRE(rest.size() == 1);
  CHECK(rest[0].first == 2);
  CHECK(nursery.size() == 0);
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
