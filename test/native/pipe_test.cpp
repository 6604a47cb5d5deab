// Tests of pipe work: the adaptive reader, pipe sizing and writes without SIGPIPE.
#include "core/pipe.h"

#include <fcntl.h>
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
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "catch_compat.h"
#include "core/errors.h"
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
  CHECK(reader.pipe_capacity() == std::min<std::size_t>(std::size_t{1} << 20, pipe_max_size()));
  CHECK(static_cast<std::size_t>(fcntl(pipe.read_end, F_GETPIPE_SZ)) == reader.pipe_capacity());
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

TEST_CASE("write_without_sigpipe reports EPIPE and leaves no SIGPIPE pending", "[pipe]") {
  int ends[2];
  REQUIRE(pipe2(ends, O_CLOEXEC) == 0);
  close(ends[0]);
  errno = 0;
  CHECK(write_without_sigpipe(ends[1], "x", 1) == -1);
  CHECK(errno == EPIPE);
  close(ends[1]);
  sigset_t pending;
  sigpending(&pending);
  CHECK_FALSE(sigismember(&pending, SIGPIPE));
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
  std::size_t grown = grow_pipe(ends[0], std::size_t{1} << 30);
  CHECK(grown > 65536);
  CHECK(grown <= pipe_max_size());
  close(ends[0]);
  close(ends[1]);
  int file = open("/dev/null", O_RDONLY | O_CLOEXEC);
  CHECK(grow_pipe(file, 1 << 20) == 0);
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
  int memfd = memfd_create("fastrevert-test", MFD_CLOEXEC);
  REQUIRE(memfd >= 0);
  CHECK(write_all_at(memfd, "head", 0) == 0);
  TestPipe pipe;
  pipe.write_all("tail");
  SpliceResult moved = splice_into(pipe.read_end, memfd, 4, 1024);
  REQUIRE(moved.status == SpliceResult::Status::moved);
  CHECK(moved.moved == 4);
  CHECK(splice_into(pipe.read_end, memfd, 8, 1024).status == SpliceResult::Status::would_block);
  close(pipe.release_writer());
  CHECK(splice_into(pipe.read_end, memfd, 8, 1024).status == SpliceResult::Status::eof);
  CHECK(read_at(memfd, 0, 100) == "headtail");
  close(memfd);
}
