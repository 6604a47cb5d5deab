// Tests of pipe work: the adaptive reader, pipe sizing and writes without SIGPIPE.
#include "core/pipe.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "catch_compat.h"
#include "core/errors.h"
#include "core/platform.h"
#include "core/spill.h"
#include "support.h"

using namespace fastrevert;

using fastrevert::test::never_exiting;
using fastrevert::test::pattern_bytes;
using fastrevert::test::shell;
using fastrevert::test::TestPipe;

TEST_CASE("adaptive reader doubles its read size while reads come back full, up to the cap",
          "[pipe]") {
  TestPipe pipe;
  pipe.write_all(std::string(65536, 'x'));  // A default pipe holds 64 KiB.
  AdaptiveReader reader(4096, 16384, nullptr, 0);
  std::size_t total = 0;
  std::size_t largest_read = 0;
  for (;;) {
    ReadResult result = reader.read(pipe.read_end);
    if (result.status != ReadResult::Status::data) {
      CHECK(result.status == ReadResult::Status::would_block);
      break;
    }
    total += result.bytes.size();
    largest_read = std::max(largest_read, result.bytes.size());
  }
  CHECK(total == 65536);
  CHECK(largest_read == 16384);
  CHECK(reader.read_size() == 16384);
}

TEST_CASE("adaptive reader keeps its size when reads come back short", "[pipe]") {
  TestPipe pipe;
  AdaptiveReader reader(4096);
  for (int i = 0; i < 10; ++i) {
    pipe.write_all("short");
    ReadResult result = reader.read(pipe.read_end);
    REQUIRE(result.status == ReadResult::Status::data);
    CHECK(result.bytes == "short");
  }
  CHECK(reader.read_size() == 4096);
}

TEST_CASE("adaptive reader reports end of file and would-block", "[pipe]") {
  TestPipe pipe;
  AdaptiveReader reader(4096);
  CHECK(reader.read(pipe.read_end).status == ReadResult::Status::would_block);
  pipe.write_all("last");
  close(pipe.write_end);
  pipe.write_end = -1;
  std::string collected;
  CHECK(reader.read_append(pipe.read_end, collected).bytes == "last");
  CHECK(reader.read(pipe.read_end).status == ReadResult::Status::eof);
  CHECK(collected == "last");
}

TEST_CASE("adaptive reader enlarges a pipe that a single read found full", "[pipe]") {
  TestPipe pipe;
  pipe.write_all(std::string(65536, 'x'));
  AdaptiveReader reader(65536, kDefaultMaxReadSize, nullptr, std::size_t{1} << 20);
  REQUIRE(reader.read(pipe.read_end).bytes.size() == 65536);
#if FASTREVERT_HAVE_PIPE_SIZE
  CHECK(reader.pipe_capacity() == std::min<std::size_t>(std::size_t{1} << 20, pipe_max_size()));
  CHECK(static_cast<std::size_t>(fcntl(pipe.read_end, F_GETPIPE_SZ)) == reader.pipe_capacity());
#else
  // Where pipes cannot be sized, nothing is asked of the pipe and its
  // capacity stays unknown; the reads still grow.
  CHECK(reader.pipe_capacity() == 0);
  CHECK(fcntl(pipe.read_end, F_GETPIPE_SZ) == 65536);
#endif
  CHECK(reader.read_size() == 131072);
}

TEST_CASE("readers sharing one scratch buffer stop allocating once it is large enough", "[pipe]") {
  auto scratch = std::make_shared<ReadScratch>();
  TestPipe first;
  TestPipe second;
  AdaptiveReader first_reader(4096, 65536, scratch, 0);
  AdaptiveReader second_reader(4096, 65536, scratch, 0);
  first.write_all(std::string(65536, 'a'));
  while (first_reader.read(first.read_end).status == ReadResult::Status::data) {
  }
  std::size_t capacity = scratch->capacity();
  CHECK(capacity >= 65536);
  second.write_all(std::string(65536, 'b'));
  while (second_reader.read(second.read_end).status == ReadResult::Status::data) {
  }
  CHECK(scratch->capacity() == capacity);
}


TEST_CASE("a reader given another scratch reads into it alone and keeps its read size",
          "[pipe]") {
  auto left = std::make_shared<ReadScratch>();
  auto joined = std::make_shared<ReadScratch>();
  TestPipe pipe;
  AdaptiveReader reader(4096, 65536, left, 0);
  pipe.write_all(std::string(8192, 'a'));
  while (reader.read(pipe.read_end).status == ReadResult::Status::data) {
  }
  std::size_t grown = reader.read_size();
  CHECK(grown > 4096);
  reader.use_scratch(joined);
  pipe.write_all("bytes");
  ReadResult result = reader.read(pipe.read_end);
  REQUIRE(result.status == ReadResult::Status::data);
  CHECK(result.bytes == "bytes");
  // The bytes are in the new scratch, and the readers left behind can
  // reuse the old one at once without touching them.
  CHECK(result.bytes.data() == joined->reserve(0));
  std::memset(left->reserve(grown), 'x', grown);
  CHECK(result.bytes == "bytes");
  CHECK(reader.read_size() == grown);
}
TEST_CASE("write_without_sigpipe reports EPIPE and leaves no SIGPIPE pending", "[pipe]") {
  int ends[2];
  REQUIRE(pipe2(ends, O_CLOEXEC) == 0);
  close(ends[0]);
  errno = 0;
  CHECK(write_without_sigpipe(ends[1], "x", 1) == -1);
  CHECK(errno == EPIPE);
  // Again, as a caller writing on does: each failed write takes its own.
  errno = 0;
  CHECK(write_without_sigpipe(ends[1], "y", 1) == -1);
  CHECK(errno == EPIPE);
  close(ends[1]);
  sigset_t pending;
  sigpending(&pending);
  CHECK_FALSE(sigismember(&pending, SIGPIPE));
}

TEST_CASE(
    "write_without_sigpipe leaves a SIGPIPE that was already pending, and the mask, as they were",
    "[pipe]") {
  sigset_t sigpipe_only;
  sigset_t previous;
  sigemptyset(&sigpipe_only);
  sigaddset(&sigpipe_only, SIGPIPE);
  REQUIRE(pthread_sigmask(SIG_BLOCK, &sigpipe_only, &previous) == 0);
  // Someone else's SIGPIPE, pending for this thread.
  REQUIRE(pthread_kill(pthread_self(), SIGPIPE) == 0);
  int ends[2];
  REQUIRE(pipe2(ends, O_CLOEXEC) == 0);
  close(ends[0]);
  CHECK(write_without_sigpipe(ends[1], "x", 1) == -1);
  close(ends[1]);
  sigset_t pending;
  sigpending(&pending);
  CHECK(sigismember(&pending, SIGPIPE) == 1);
  // Taken here, so that it never reaches a handler or ends the tests.
  int taken = 0;
  REQUIRE(sigwait(&sigpipe_only, &taken) == 0);
  CHECK(taken == SIGPIPE);
  sigset_t mask;
  REQUIRE(pthread_sigmask(SIG_SETMASK, &previous, &mask) == 0);
  // Still blocked, as this test had it when it called.
  CHECK(sigismember(&mask, SIGPIPE) == 1);
}

TEST_CASE("adaptive reader caps its first read size at its largest", "[pipe]") {
  TestPipe pipe;
  pipe.write_all("bytes");
  // An enormous `read-process-output-max' must cost a buffer of the cap,
  // not an allocation that cannot succeed.
  AdaptiveReader reader(std::size_t{1} << 40, 65536, nullptr, 0);
  CHECK(reader.read_size() == 65536);
  CHECK(reader.max_size() == 65536);
  ReadResult result = reader.read(pipe.read_end);
  REQUIRE(result.status == ReadResult::Status::data);
  CHECK(result.bytes == "bytes");
  AdaptiveReader defaulted(std::size_t{1} << 40, 0, nullptr, 0);
  CHECK(defaulted.read_size() == kDefaultMaxReadSize);
}

TEST_CASE("grow_pipe enlarges a pipe up to pipe-max-size and ignores non-pipes", "[pipe]") {
  int ends[2];
  REQUIRE(pipe2(ends, O_CLOEXEC) == 0);
#if FASTREVERT_HAVE_PIPE_SIZE
  CHECK(pipe_capacity(ends[0]) == 65536);
  std::size_t grown = grow_pipe(ends[0], std::size_t{1} << 30);
  CHECK(grown > 65536);
  CHECK(grown <= pipe_max_size());
  CHECK(pipe_capacity(ends[0]) == grown);
#else
  // Where pipes cannot be sized: unknown, and left as the system made them.
  CHECK(pipe_capacity(ends[0]) == 0);
  CHECK(grow_pipe(ends[0], std::size_t{1} << 30) == 0);
  CHECK(fcntl(ends[0], F_GETPIPE_SZ) == 65536);
#endif
  close(ends[0]);
  close(ends[1]);
  int file = open("/dev/null", O_RDONLY | O_CLOEXEC);
  CHECK(grow_pipe(file, 1 << 20) == 0);
  CHECK(pipe_capacity(file) == 0);
  close(file);
}

TEST_CASE("read_at returns the bytes a file holds and nothing past its end", "[pipe]") {
  fastrevert::test::TempDir dir;
  fastrevert::test::write_file(dir / "file", "0123456789");
  int fd = open(dir.file("file").c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  CHECK(read_at(fd, 2, 5) == "234");
  CHECK(read_at(fd, 8, std::uint64_t{1} << 40) == "89");
  CHECK(read_at(fd, 12, 20).empty());
  close(fd);
}

TEST_CASE("write_all_at writes every byte at its offset and splice_into moves a pipe's bytes",
          "[pipe]") {
  int memfd = open_spill("fastrevert-test");
  REQUIRE(memfd >= 0);
  CHECK(write_all_at(memfd, "head", 0) == 0);
  TestPipe pipe;
  pipe.write_all("tail");
#if !FASTREVERT_HAVE_SPLICE
  // No splice: refused, with nothing taken from the pipe, so that the
  // caller reads and writes instead.
  SpliceResult refused = splice_into(pipe.read_end, memfd, 4, 1024);
  CHECK(refused.status == SpliceResult::Status::refused);
  CHECK(refused.error == ENOSYS);
  CHECK(refused.moved == 0);
  char bytes[8];
  REQUIRE(read(pipe.read_end, bytes, sizeof bytes) == 4);
  CHECK(write_all_at(memfd, std::string_view(bytes, 4), 4) == 0);
#else
  SpliceResult moved = splice_into(pipe.read_end, memfd, 4, 1024);
  REQUIRE(moved.status == SpliceResult::Status::moved);
  CHECK(moved.moved == 4);
  CHECK(splice_into(pipe.read_end, memfd, 8, 1024).status == SpliceResult::Status::would_block);
  close(pipe.release_writer());
  CHECK(splice_into(pipe.read_end, memfd, 8, 1024).status == SpliceResult::Status::eof);
#endif
  CHECK(read_at(memfd, 0, 100) == "headtail");
  close(memfd);
}
