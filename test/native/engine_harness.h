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
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "catch_compat.h"
#include "core/engine.h"
#include "core/pipe.h"
#include "core/process_output.h"
#include "core/process_table.h"

namespace fastrevert::test {

using Clock = std::chrono::steady_clock;

// What the harness records of a process's delivered output, in the form of
// records of kinds the engine never emits: kOutputKind, code 1 for stdout
// and 2 for stderr, data the bytes (a range read from the memfd); then
// kExitKind, code and data as exit_how_name() says how it ended, or
// kErrorKind, data why the engine gave the child up.
inline constexpr RecordKind kOutputKind = static_cast<RecordKind>(200);
inline constexpr RecordKind kExitKind = static_cast<RecordKind>(201);
inline constexpr RecordKind kErrorKind = static_cast<RecordKind>(202);

// Delivers what waits in OUTPUT of process ID to ON_PIECE, as the glue
// delivers it to Lisp, as records of the kinds above, and calls ON_RESUME
// when the producer should read again; returns how many pieces were ranges
// of the memfd.
inline int deliver_output(std::uint64_t id, ProcessOutput& output,
                          const std::function<void(Record&)>& on_piece,
                          const std::function<void()>& on_resume = {},
                          std::size_t max_text = std::size_t{4} << 20) {
  int ranges = 0;
  for (;;) {
    ProcessOutput::Piece piece;
    if (!output.claim(piece, max_text)) {
      if (output.settle()) break;
      continue;
    }
    Record record;
    record.id = id;
    switch (piece.kind) {
      case ProcessOutput::Piece::Kind::text:
        record = Record{kOutputKind, id, piece.stream + 1, std::string(piece.bytes)};
        break;
      case ProcessOutput::Piece::Kind::range:
        ++ranges;
        record = Record{kOutputKind, id, 1, read_at(piece.memfd, piece.from, piece.to)};
        break;
      case ProcessOutput::Piece::Kind::end:
        record = piece.failed ? Record{kErrorKind, id, 0, piece.reason}
                              : Record{kExitKind, id, piece.status.code,
                                       exit_how_name(piece.status)};
        break;
      case ProcessOutput::Piece::Kind::none:
        break;
    }
    if (output.commit() && on_resume) on_resume();
    on_piece(record);
  }
  return ranges;
}

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
  // TIMEOUT passes; returns whether it held.  A process's output is
  // delivered as records (see deliver_output), and any resume it asks for
  // is posted to the engine's table.
  bool wait_until(const std::function<bool()>& predicate,
                  std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    auto deadline = Clock::now() + timeout;
    auto keep = [this](Record& record) {
      if (on_record) {
        on_record(record);
      } else {
        records_.push_back(std::move(record));
      }
    };
    for (;;) {
      for (auto& record : engine_->drain()) {
        if (record.kind != RecordKind::process_ready) {
          keep(record);
          continue;
        }
        ranges_[record.id] += deliver_output(record.id, *record.output, keep,
                                             resumer(record.id));
        ++readies_[record.id];
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
  // Drains what waits now into INTO, a process's output delivered as
  // records (see deliver_output), without waiting.
  void take(std::vector<Record>& into) {
    for (auto& record : engine_->drain()) {
      if (record.kind != RecordKind::process_ready) {
        into.push_back(std::move(record));
        continue;
      }
      ranges_[record.id] += deliver_output(
          record.id, *record.output, [&into](Record& piece) { into.push_back(std::move(piece)); },
          resumer(record.id));
    }
  }
  // How many pieces of ID's stdout came as ranges of its memfd, and how
  // many times its consumer was told.
  int ranges_of(std::uint64_t id) const {
    auto found = ranges_.find(id);
    return found == ranges_.end() ? 0 : found->second;
  }
  int readies_of(std::uint64_t id) const {
    auto found = readies_.find(id);
    return found == readies_.end() ? 0 : found->second;
  }

  // When set, wait_until hands records here instead of keeping them.
  std::function<void(Record&)> on_record;

  int exits_of(std::uint64_t id) const {
    int count = 0;
    for (const auto& record : records_)
      if ((record.kind == kExitKind || record.kind == kErrorKind) && record.id == id) ++count;
    return count;
  }
  const Record* exit_of(std::uint64_t id) const {
    for (const auto& record : records_)
      if ((record.kind == kExitKind || record.kind == kErrorKind) && record.id == id) return &record;
    return nullptr;
  }
  std::string output_of(std::uint64_t id, int code) const {
    std::string all;
    for (const auto& record : records_)
      if (record.kind == kOutputKind && record.id == id && record.code == code)
        all += record.data;
    return all;
  }

 private:
  // Reads ID's output again in the engine's table.
  std::function<void()> resumer(std::uint64_t id) {
    return [this, id] {
      engine_->post([id](Engine& engine) { engine.service<ProcessTable>().resume(id); });
    };
  }

  int wake_read_ = -1;
  std::unique_ptr<Engine> engine_;
  std::vector<Record> records_;
  std::map<std::uint64_t, int> ranges_;
  std::map<std::uint64_t, int> readies_;
};

}  // namespace fastrevert::test
