// Tests of the runtime: the engine's life as the main thread owns it, the
// commands it takes, its waits and drains, and the children spawned for it.
#include "core/runtime.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "catch_compat.h"
#include "core/child.h"
#include "core/engine.h"
#include "core/handoff.h"
#include "core/process_table.h"
#include "engine_harness.h"
#include "support.h"

using namespace fastrevert;

using fastrevert::test::is_gone;
using fastrevert::test::never_exiting;
using fastrevert::test::shell;
using fastrevert::test::TestPipe;

namespace {

using Clock = std::chrono::steady_clock;
using Posted = Runtime::Posted;
using Stopped = Runtime::Stopped;

constexpr auto kForever = std::chrono::milliseconds::max();

bool never_quit() {
  return false;
}

// A runtime whose engine would adopt the children spawned for it only after
// a minute: whatever the engine's table holds sooner was handed to it.
Handoff::Tuning adopted_late() {
  Handoff::Tuning tuning;
  tuning.adoption_delay = std::chrono::minutes(1);
  return tuning;
}

std::unique_ptr<ProcessHandover> handover(const SpawnSpec& spec) {
  return std::make_unique<ProcessHandover>(spawn(spec), ProcessTable::Options{});
}

// Posts ASK to RUNTIME's engine and waits for its answer.
bool ask_engine(Runtime& runtime, std::function<bool(Engine&)> ask) {
  auto answered = std::make_shared<std::atomic<int>>(-1);
  REQUIRE(runtime.post([ask, answered](Engine& e) { answered->store(ask(e) ? 1 : 0); }) ==
          Posted::yes);
  auto deadline = Clock::now() + std::chrono::seconds(30);
  while (answered->load() < 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(answered->load() >= 0);
  return answered->load() == 1;
}

// Has RUNTIME's engine queue an echo record for each of IDS, and reads the
// wake byte that says so from WAKE_FD, as the drain's caller would.
void queue_echoes(Runtime& runtime, int wake_fd, std::vector<std::uint64_t> ids) {
  REQUIRE(ask_engine(runtime, [ids](Engine& e) {
    for (std::uint64_t id : ids) e.emit(Record{RecordKind::echo, id, 0, ""});
    return true;
  }));
  char bytes[16];
  REQUIRE(read(wake_fd, bytes, sizeof bytes) > 0);
}

// Waits on RUNTIME and drains it until a record of KIND for ID has come;
// returns every record drained.
std::vector<Record> drain_until(Runtime& runtime, RecordKind kind, std::uint64_t id) {
  std::vector<Record> records;
  auto deadline = Clock::now() + std::chrono::seconds(30);
  auto seen = [&] {
    for (const Record& record : records)
      if (record.kind == kind && record.id == id) return true;
    return false;
  };
  while (!seen() && Clock::now() < deadline) {
    runtime.wait(std::chrono::milliseconds(50), never_quit);
    runtime.drain([&records](const Record& record) {
      if (record.kind != RecordKind::process_ready) {
        records.push_back(record);
        return true;
      }
      test::deliver_output(record.id, *record.output,
                           [&records](Record& piece) { records.push_back(piece); });
      return true;
    });
  }
  return records;
}

bool is_open(int fd) {
  return fcntl(fd, F_GETFD) >= 0;
}

}  // namespace

TEST_CASE("runtime starts one engine at a time and stops it once", "[runtime]") {
  TestPipe wake;
  Runtime runtime;
  CHECK(runtime.engine() == nullptr);
  CHECK(runtime.can_post() == Posted::not_running);
  runtime.start(wake.release_writer());
  REQUIRE(runtime.engine() != nullptr);
  CHECK(runtime.can_post() == Posted::yes);
  CHECK(ask_engine(runtime, [](Engine&) { return true; }));
  CHECK_THROWS_AS(runtime.start(-1), std::logic_error);
  CHECK(runtime.stop(kForever) == Stopped::stopped);
  CHECK(runtime.engine() == nullptr);
  CHECK(runtime.stop(kForever) == Stopped::not_running);
}

TEST_CASE("runtime refuses commands and children once stopped", "[runtime]") {
  TestPipe wake;
  Runtime runtime;
  runtime.start(wake.release_writer());
  REQUIRE(runtime.stop(kForever) == Stopped::stopped);
  bool ran = false;
  CHECK(runtime.post([&ran](Engine&) { ran = true; }) == Posted::not_running);
  CHECK(runtime.post_for_process(1, [&ran](Engine&) { ran = true; }) == Posted::not_running);
  CHECK_FALSE(ran);
  Child child = spawn(never_exiting());
  pid_t pid = child.pid;
  CHECK(runtime.adopt(1, std::make_unique<ProcessHandover>(
                             std::move(child), ProcessTable::Options{})) == Posted::not_running);
  // Nobody would run it: it is killed and reaped at once.
  CHECK(is_gone(pid));
  CHECK_FALSE(runtime.wait(std::chrono::seconds(10), never_quit));
  CHECK(runtime.drain([](const Record&) { return true; }) == 0);
}

TEST_CASE("runtime leaves an engine whose thread does not finish in time behind", "[runtime]") {
  TestPipe wake;
  auto release = std::make_shared<std::atomic<bool>>(false);
  {
    Runtime runtime;
    runtime.start(wake.release_writer());
    // A command stuck as a stat on a dead network mount would be.
    REQUIRE(runtime.post([release](Engine&) {
      while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }) == Posted::yes);
    CHECK(runtime.stop(std::chrono::milliseconds(20)) == Stopped::abandoned);
    CHECK(runtime.engine() == nullptr);
    CHECK(runtime.post([](Engine&) {}) == Posted::not_running);
    // A new engine starts beside the one left behind.
    TestPipe second;
    runtime.start(second.release_writer());
    CHECK(ask_engine(runtime, [](Engine&) { return true; }));
    release->store(true);
    // The runtime's end waits for the thread left behind, which still uses
    // its engine (the sanitizers see a use after free otherwise).
  }
}

TEST_CASE("runtime hands a child to the engine before a command for it", "[runtime]") {
  TestPipe wake;
  Runtime runtime(adopted_late());
  runtime.start(wake.release_writer());
  REQUIRE(runtime.adopt(1, handover(never_exiting())) == Posted::yes);
  REQUIRE(runtime.adopt(2, handover(never_exiting())) == Posted::yes);
  // Waiting in the nursery, out of the engine's table.
  CHECK_FALSE(ask_engine(runtime, [](Engine& e) { return e.service<ProcessTable>().contains(1); }));
  auto found = std::make_shared<std::atomic<int>>(-1);
  REQUIRE(runtime.post_for_process(1, [found](Engine& e) {
    found->store(e.service<ProcessTable>().contains(1) ? 1 : 0);
  }) == Posted::yes);
  CHECK(ask_engine(runtime, [](Engine&) { return true; }));
  CHECK(found->load() == 1);
  // Only the child named: the other still waits in the nursery.
  CHECK_FALSE(ask_engine(runtime, [](Engine& e) { return e.service<ProcessTable>().contains(2); }));
  CHECK(runtime.stop(kForever) == Stopped::stopped);
}

TEST_CASE("runtime wait serves a child spawned for it and the drain hands its records in order",
          "[runtime]") {
  TestPipe wake;
  Runtime runtime(adopted_late());
  runtime.start(wake.release_writer());
  REQUIRE(runtime.adopt(7, handover(shell("printf one; printf two >&2; exit 3"))) == Posted::yes);
  std::vector<Record> records = drain_until(runtime, test::kExitKind, 7);
  REQUIRE_FALSE(records.empty());
  std::string out;
  std::string err;
  for (const Record& record : records) {
    if (record.kind == test::kOutputKind && record.code == 1) out += record.data;
    if (record.kind == test::kOutputKind && record.code == 2) err += record.data;
  }
  CHECK(out == "one");
  CHECK(err == "two");
  CHECK(records.back().kind == test::kExitKind);
  CHECK(records.back().code == 3);
  CHECK(runtime.engine()->stats().drain_ns.load() > 0);
}

TEST_CASE("runtime wait ends when the user quits", "[runtime]") {
  TestPipe wake;
  Runtime runtime(adopted_late());
  runtime.start(wake.release_writer());
  int asked = 0;
  auto quit_second_time = [&asked] { return ++asked >= 2; };
  auto start = Clock::now();
  CHECK_FALSE(runtime.wait(std::chrono::seconds(30), quit_second_time));
  REQUIRE(runtime.adopt(1, handover(never_exiting())) == Posted::yes);
  asked = 0;
  CHECK_FALSE(runtime.wait(std::chrono::seconds(30), quit_second_time));
  CHECK(Clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("runtime drain leaves the records after a failing handler queued and wakes again",
          "[runtime]") {
  TestPipe wake;
  Runtime runtime;
  runtime.start(wake.release_writer());
  queue_echoes(runtime, wake.read_end, {1, 2, 3});
  std::vector<std::uint64_t> handled;
  auto failing_on_2 = [&handled](const Record& record) {
    handled.push_back(record.id);
    if (record.id == 2) throw std::runtime_error("handler failed");
    return true;
  };
  CHECK_THROWS_AS(runtime.drain(failing_on_2), std::runtime_error);
  CHECK(handled == std::vector<std::uint64_t>{1, 2});
  pollfd readable = {wake.read_end, POLLIN, 0};
  CHECK(poll(&readable, 1, 10000) == 1);
  CHECK(runtime.drain(failing_on_2) == 1);
  CHECK(handled == std::vector<std::uint64_t>{1, 2, 3});
}

TEST_CASE("runtime drain stops after a handler that says so, and wakes for the rest",
          "[runtime]") {
  TestPipe wake;
  Runtime runtime;
  runtime.start(wake.release_writer());
  queue_echoes(runtime, wake.read_end, {1, 2, 3});
  std::vector<std::uint64_t> handled;
  auto stopping_at_2 = [&handled](const Record& record) {
    handled.push_back(record.id);
    return record.id != 2;
  };
  CHECK(runtime.drain(stopping_at_2) == 2);
  CHECK(handled == std::vector<std::uint64_t>{1, 2});
  pollfd readable = {wake.read_end, POLLIN, 0};
  CHECK(poll(&readable, 1, 10000) == 1);
  char bytes[16];
  REQUIRE(read(wake.read_end, bytes, sizeof bytes) > 0);
  CHECK(runtime.drain(stopping_at_2) == 1);
  CHECK(handled == std::vector<std::uint64_t>{1, 2, 3});
  // Nothing is left, so a stop at the last record wakes nobody.
  queue_echoes(runtime, wake.read_end, {2});
  CHECK(runtime.drain(stopping_at_2) == 1);
  CHECK(poll(&readable, 1, 0) == 0);
}

TEST_CASE("runtime drops the output nobody delivered when it stops, memfd and all",
          "[runtime]") {
  TestPipe wake;
  Runtime runtime;
  runtime.start(wake.release_writer());
  int memfd = memfd_create("runtime-test", MFD_CLOEXEC);
  REQUIRE(memfd >= 0);
  std::weak_ptr<ProcessOutput> watched;
  REQUIRE(runtime.post([memfd, &watched](Engine& e) {
    auto output = std::make_shared<ProcessOutput>(ProcessOutput::Config{});
    watched = output;
    output->start_memfd(UniqueFd(memfd));
    output->memfd_written(0, 1, "x");
    e.emit(Record{RecordKind::process_ready, 1, 0, {}, output});
  }) == Posted::yes);
  REQUIRE(runtime.wait(std::chrono::seconds(30), never_quit));
  CHECK(is_open(memfd));
  CHECK(runtime.stop(kForever) == Stopped::stopped);
  CHECK(watched.expired());
  CHECK_FALSE(is_open(memfd));
}
