// Tests of MemfdCopier: a pipe copied into a memfd, or the file that stands
// in for one (FASTREVERT_TEST_SPILL=file, a portable build), on a thread of
// its own.
#include "core/copier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>

#include "catch_compat.h"
#include "core/spill.h"
#include "support.h"

using fastrevert::MemfdCopier;
using fastrevert::test::pattern_bytes;
using fastrevert::test::TestPipe;

namespace {

struct Memfd {
  int fd = fastrevert::open_spill("fastrevert-copier-test");
  Memfd() { REQUIRE(fd >= 0); }
  ~Memfd() { close(fd); }
  std::string read_all(std::size_t size) const {
    std::string bytes(size, '\0');
    std::size_t done = 0;
    while (done < size) {
      ssize_t got = pread(fd, bytes.data() + done, size - done, static_cast<off_t>(done));
      REQUIRE(got > 0);
      done += static_cast<std::size_t>(got);
    }
    return bytes;
  }
  // Bytes of memory the file holds.
  long long allocated() const {
    struct stat status;
    REQUIRE(fstat(fd, &status) == 0);
    return static_cast<long long>(status.st_blocks) * 512;
  }
};

// Writes BYTES to FD in pieces from another thread, then closes FD.
std::thread write_then_close(int fd, const std::string& bytes) {
  return std::thread([fd, &bytes] {
    std::size_t done = 0;
    while (done < bytes.size()) {
      std::size_t piece = std::min<std::size_t>(bytes.size() - done, 100000);
      ssize_t put = write(fd, bytes.data() + done, piece);
      if (put <= 0) break;
      done += static_cast<std::size_t>(put);
    }
    close(fd);
  });
}

// Waits until COPIER reports the end of the copy; returns the bytes written.
std::uint64_t wait_until_done(MemfdCopier& copier) {
  bool done = false;
  std::uint64_t written = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done && std::chrono::steady_clock::now() < deadline) {
    written = copier.wait(UINT64_MAX, std::chrono::milliseconds(100), done);
  }
  REQUIRE(done);
  return written;
}

}  // namespace

TEST_CASE("MemfdCopier copies every byte in order, by splice and by read and pwrite", "[copier]") {
  bool without_splice = GENERATE(false, true);
  INFO("without splice: " << without_splice);
  const std::string bytes = pattern_bytes(9 * 1024 * 1024 + 7, 42);
  TestPipe pipe;
  Memfd memfd;
  // Bytes already in the file stay, and the copy continues after them.
  const std::string head = "head";
  REQUIRE(pwrite(memfd.fd, head.data(), head.size(), 0) == static_cast<ssize_t>(head.size()));
  MemfdCopier::Options options;
  options.without_splice = without_splice;
  MemfdCopier copier(pipe.read_end, memfd.fd, head.size(), options);
  int writer_fd = pipe.release_writer();
  std::thread writer = write_then_close(writer_fd, bytes);
  std::uint64_t written = wait_until_done(copier);
  writer.join();
  copier.stop();
  CHECK(copier.error() == 0);
  REQUIRE(written == head.size() + bytes.size());
  CHECK(memfd.read_all(written) == head + bytes);
}

TEST_CASE("MemfdCopier gives back the memory of released bytes and keeps the rest", "[copier]") {
  const std::string bytes = pattern_bytes(8 * 1024 * 1024, 7);
  TestPipe pipe;
  Memfd memfd;
  MemfdCopier copier(pipe.read_end, memfd.fd, 0);
  int writer_fd = pipe.release_writer();
  std::thread writer = write_then_close(writer_fd, bytes);
  REQUIRE(wait_until_done(copier) == bytes.size());
  writer.join();
  long long before = memfd.allocated();
  // A file on disk may not be written out yet; a memfd holds every byte.
  if (fastrevert::spill_mechanism() == fastrevert::SpillMechanism::memfd) {
    REQUIRE(before >= static_cast<long long>(bytes.size()));
  }

  // Released after the copy ended: the thread stays to give memory back.
  const std::uint64_t half = bytes.size() / 2;
  copier.release(half);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (copier.released() < half && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(copier.released() == half);
  // Where no hole can be punched the memory stays until the file is
  // closed; the bytes kept are the same either way.
  if (fastrevert::kSpillGivesBackMemory &&
      fastrevert::spill_mechanism() == fastrevert::SpillMechanism::memfd) {
    CHECK(memfd.allocated() <= before - static_cast<long long>(half) + 65536);
  }
  struct stat status;
  REQUIRE(fstat(memfd.fd, &status) == 0);
  CHECK(static_cast<std::uint64_t>(status.st_size) == bytes.size());
  std::string rest(bytes.size() - half, '\0');
  REQUIRE(pread(memfd.fd, rest.data(), rest.size(), static_cast<off_t>(half)) ==
          static_cast<ssize_t>(rest.size()));
  CHECK(rest == bytes.substr(half));

  // A release asked for just before stopping is still done.
  copier.release(bytes.size());
  copier.stop();
  CHECK(copier.released() == bytes.size());
}

TEST_CASE("MemfdCopier stops without waiting for end of file", "[copier]") {
  TestPipe pipe;
  Memfd memfd;
  MemfdCopier copier(pipe.read_end, memfd.fd, 0);
  REQUIRE(write(pipe.write_end, "partial", 7) == 7);
  bool done = false;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  std::uint64_t written = 0;
  while (written < 7 && std::chrono::steady_clock::now() < deadline) {
    written = copier.wait(7, std::chrono::milliseconds(100), done);
  }
  CHECK(written == 7);
  CHECK_FALSE(done);
  // The writer keeps the pipe open, as a grandchild may.
  auto start = std::chrono::steady_clock::now();
  copier.stop();
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  CHECK(copier.wait(0, std::chrono::milliseconds(0), done) == 7);
  CHECK(done);
  CHECK(memfd.read_all(7) == "partial");
}
