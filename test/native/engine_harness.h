// An Engine for tests of the process table and the hand-off, with helpers
// to run code on the engine thread and to wait for records with a deadline.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "catch_compat.h"
#include "core/engine.h"
#include "core/process_table.h"

namespace fastrevert::test {

using Clock = std::chrono::steady_clock;

// An Engine with the main thread's side of the wake pipe, and helpers to run
// code on the engine thread and to wait for records with a deadline.
class EngineHarness {
 public:
  EngineHarness() {
    int ends[2];
    REQUIRE(pipe2(ends, O_CLOEXEC | O_NONBLOCK) == 0);
    wake_read_ = ends[0];
    engine_ = std::make_unique<Engine>(ends[1]);
  }
  ~EngineHarness() {
    engine_->stop();
    close(wake_read_);
  }

  Engine& engine() { return *engine_; }

  // Runs ACTION on the engine thread with the process table and waits for it.
  void with_table(std::function<void(ProcessTable&)> action) {
    auto done = std::make_shared<std::atomic<bool>>(false);
    auto error = std::make_shared<std::string>();
    bool posted = engine_->post([action, done, error](Engine& engine) {
      try {
        action(engine.service<ProcessTable>());
      } catch (const std::exception& caught) {
        *error = caught.what();
      }
      // Release pairs with the acquire below, publishing ERROR.
      done->store(true, std::memory_order_release);
    });
    // No Catch2 assertion may run here while ACTION (which may assert) runs
    // on the engine thread: Catch2 is not thread-safe.
    auto deadline = Clock::now() + std::chrono::seconds(30);
    while (posted && !done->load(std::memory_order_acquire) && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    REQUIRE(posted);
    REQUIRE(done->load(std::memory_order_acquire));
    if (!error->empty()) FAIL("engine command failed: " << *error);
  }

  // Drains records into ON_RECORD (or records()) until PREDICATE holds or
  // TIMEOUT passes; returns whether it held.
  bool wait_until(const std::function<bool()>& predicate,
                  std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      for (auto& record : engine_->drain()) {
        if (on_record) {
          on_record(record);
        } else {
          records_.push_back(std::move(record));
        }
      }
      if (predicate()) return true;
      if (Clock::now() >= deadline) return false;
      pollfd wake = {wake_read_, POLLIN, 0};
      poll(&wake, 1, 10);
      char bytes[64];
      while (read(wake_read_, bytes, sizeof bytes) > 0) {
      }
    }
  }

  std::vector<Record>& records() { return records_; }

  // When set, wait_until hands records here instead of keeping them.
  std::function<void(Record&)> on_record;

  int exits_of(std::uint64_t id) const {
    int count = 0;
    for (const auto& record : records_)
      if (record.kind == RecordKind::process_exit && record.id == id) ++count;
    return count;
  }
  const Record* exit_of(std::uint64_t id) const {
    for (const auto& record : records_)
      if (record.kind == RecordKind::process_exit && record.id == id) return &record;
    return nullptr;
  }
  std::string output_of(std::uint64_t id, int code) const {
    std::string all;
    for (const auto& record : records_)
      if (record.kind == RecordKind::process_output && record.id == id && record.code == code)
        all += record.data;
    return all;
  }

 private:
  int wake_read_ = -1;
  std::unique_ptr<Engine> engine_;
  std::vector<Record> records_;
};

}  // namespace fastrevert::test
