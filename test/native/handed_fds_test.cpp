// Tests of the list of descriptors handed over to Lisp: which numbers it
// accepts, the memfds records hand over, and their release.
#include "core/handed_fds.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <deque>
#include <string>
#include <thread>

#include "catch_compat.h"
#include "core/engine.h"
#include "core/process_table.h"
#include "core/spill.h"
#include "engine_harness.h"

using fastrevert::Engine;
using fastrevert::HandedFds;
using fastrevert::OutputCode;
using fastrevert::Record;
using fastrevert::RecordKind;

namespace {

// A memfd holding SIZE bytes.
int memfd_of_size(std::size_t size) {
  int fd = memfd_create("handed-fds-test", MFD_CLOEXEC);
  REQUIRE(fd >= 0);
  std::string bytes(size, 'x');
  REQUIRE(write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  return fd;
}

bool is_open(int fd) {
  return fcntl(fd, F_GETFD) >= 0;
}

blkcnt_t blocks_of(int fd) {
  struct stat status;
  REQUIRE(fstat(fd, &status) == 0);
  return status.st_blocks;
}

Record memfd_record(int fd) {
  return Record{RecordKind::process_output, 1, static_cast<int>(OutputCode::stdout_memfd),
                std::to_string(fd)};
}

}  // namespace

TEST_CASE("a descriptor handed over is accepted until given back and never again", "[handed-fds]") {
  HandedFds handed;
  CHECK_FALSE(handed.contains(0));
  handed.add(12);
  CHECK(handed.contains(12));
  CHECK_FALSE(handed.contains(13));
  CHECK(handed.remove(12));
  // A second close of the same number is refused: the system may have
  // given the number to something else meanwhile.
  CHECK_FALSE(handed.remove(12));
  CHECK_FALSE(handed.contains(12));
}

TEST_CASE("only a record that hands over a memfd lists its descriptor", "[handed-fds]") {
  HandedFds handed;
  handed.note_delivery(
      Record{RecordKind::process_output, 1, static_cast<int>(OutputCode::stdout_bytes), "7"});
  handed.note_delivery(Record{RecordKind::notice, 1, 4, "8"});
  CHECK(handed.size() == 0);
  handed.note_delivery(memfd_record(9));
  CHECK(handed.contains(9));
  CHECK(handed.size() == 1);
}

TEST_CASE("discarded records close the memfds they hand over and nothing else", "[handed-fds]") {
  int memfd = memfd_of_size(1);
  int other = memfd_of_size(1);
  std::deque<Record> records{
      Record{RecordKind::process_output, 1, static_cast<int>(OutputCode::stdout_bytes),
             std::to_string(other)},
      memfd_record(memfd)};
  HandedFds::discard(records);
  CHECK_FALSE(is_open(memfd));
  CHECK(is_open(other));
  close(other);
}

TEST_CASE("a small memfd is released and closed at once, with or without an engine",
          "[handed-fds]") {
  fastrevert::test::EngineHarness harness;
  for (Engine* engine : {static_cast<Engine*>(nullptr), &harness.engine()}) {
    HandedFds handed;
    int fd = memfd_of_size(8192);
    handed.add(fd);
    handed.release(fd, 8192, false, engine);
    // Where no hole can be punched, the memory goes with the close.
    CHECK((blocks_of(fd) == 0) == fastrevert::kSpillGivesBackMemory);
    CHECK(handed.contains(fd));
    handed.release(fd, 0, true, engine);
    CHECK_FALSE(handed.contains(fd));
    CHECK_FALSE(is_open(fd));
  }
}

TEST_CASE("a large memfd is released on the engine thread, and later releases follow it",
          "[handed-fds]") {
  fastrevert::test::EngineHarness harness;
  // The engine thread is held in a command until the checks below are done.
  auto held = std::make_shared<std::atomic<bool>>(true);
  REQUIRE(harness.engine().post([held](Engine&) {
    while (held->load(std::memory_order_acquire)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }));
  HandedFds handed;
  int large = memfd_of_size(1024 * 1024);
  int small = memfd_of_size(4096);
  handed.add(large);
  handed.add(small);
  handed.release(large, 1024 * 1024, true, &harness.engine());
  // Refused from now on, though the engine has not closed it yet.
  CHECK_FALSE(handed.contains(large));
  CHECK(is_open(large));
  // A small release behind a posted one waits its turn, so that its close
  // cannot hand the number on before the engine is done with the large one.
  handed.release(small, 0, true, &harness.engine());
  CHECK(is_open(small));
  held->store(false, std::memory_order_release);
  harness.with_table([](fastrevert::ProcessTable&) {});
  CHECK_FALSE(is_open(large));
  CHECK_FALSE(is_open(small));
}
