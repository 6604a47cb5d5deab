// Tests of the adaptive reader and of run_to_completion().
#include "core/reader.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
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
#include "core/spawn.h"
#include "support.h"

using namespace fastrevert;

using fastrevert::test::pattern_bytes;
using fastrevert::test::never_exiting;
using fastrevert::test::shell;
using fastrevert::test::TestPipe;

TEST_CASE("adaptive reader doubles its read size while reads come back full, up to the cap",
          "[reader]") {
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

TEST_CASE("adaptive reader keeps its size when reads come back short", "[reader]") {
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

TEST_CASE("adaptive reader reports end of file and would-block", "[reader]") {
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

TEST_CASE("adaptive reader enlarges a pipe that a single read found full", "[reader]") {
  TestPipe pipe;
  pipe.write_all(std::string(65536, 'x'));
  AdaptiveReader reader(65536, kDefaultMaxReadSize, nullptr, std::size_t{1} << 20);
  REQUIRE(reader.read(pipe.read_end).bytes.size() == 65536);
  CHECK(reader.pipe_capacity() == std::min<std::size_t>(std::size_t{1} << 20, pipe_max_size()));
  CHECK(static_cast<std::size_t>(fcntl(pipe.read_end, F_GETPIPE_SZ)) == reader.pipe_capacity());
}

TEST_CASE("readers sharing one scratch buffer stop allocating once it is large enough",
          "[reader]") {
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

TEST_CASE("run_to_completion delivers 50 MB from head -c intact with bounded reads", "[reader]") {
  char name[] = "/tmp/fastrevert-reader-XXXXXX";
  int fd = mkstemp(name);
  REQUIRE(fd >= 0);
  const std::size_t size = 50u << 20;
  std::string expected = pattern_bytes(size, 7);
  REQUIRE(write(fd, expected.data(), expected.size()) == static_cast<ssize_t>(size));
  close(fd);

  SpawnSpec spec;
  spec.program = "/usr/bin/head";
  spec.argv = {"head", "-c", std::to_string(size), name};
  Child child = spawn(spec);
  std::size_t offset = 0;
  bool intact = true;
  std::size_t largest_chunk = 0;
  RunOptions options;
  options.initial_read_size = 4096;
  options.max_read_size = std::size_t{1} << 20;
  RunResult result = run_to_completion(
      child,
      [&](std::string_view bytes) {
        largest_chunk = std::max(largest_chunk, bytes.size());
        if (offset + bytes.size() > size ||
            expected.compare(offset, bytes.size(), bytes.data(), bytes.size()) != 0) {
          intact = false;
        }
        offset += bytes.size();
      },
      nullptr, options);
  unlink(name);
  CHECK(WIFEXITED(result.wait_status));
  CHECK(WEXITSTATUS(result.wait_status) == 0);
  CHECK(offset == size);
  CHECK(intact);
  CHECK(largest_chunk > 4096);
  CHECK(largest_chunk <= options.max_read_size);
}

TEST_CASE("run_to_completion feeds stdin and keeps both streams in order", "[reader]") {
  std::string input = pattern_bytes(10u << 20, 3);
  SpawnSpec spec = shell("cat; echo done >&2");
  spec.stdin_mode = SpawnSpec::Stdin::pipe;
  Child child = spawn(spec);
  std::string out;
  std::string err;
  RunOptions options;
  options.stdin_data = input;
  RunResult result = run_to_completion(
      child, [&](std::string_view bytes) { out.append(bytes); },
      [&](std::string_view bytes) { err.append(bytes); }, options);
  CHECK(WEXITSTATUS(result.wait_status) == 0);
  CHECK(out.size() == input.size());
  CHECK(out == input);
  CHECK(err == "done\n");
}

TEST_CASE("run_to_completion returns the raw wait status of exit codes and signals", "[reader]") {
  Child exits = spawn(shell("exit 7"));
  RunResult exited = run_to_completion(exits, nullptr, nullptr);
  CHECK(WIFEXITED(exited.wait_status));
  CHECK(WEXITSTATUS(exited.wait_status) == 7);
  CHECK_FALSE(exited.quit);

  Child dies = spawn(shell("kill -TERM $$"));
  RunResult signalled = run_to_completion(dies, nullptr, nullptr);
  CHECK(WIFSIGNALED(signalled.wait_status));
  CHECK(WTERMSIG(signalled.wait_status) == SIGTERM);
}

TEST_CASE("run_to_completion interrupts a never-ending child when asked to quit", "[reader]") {
  Child child = spawn(never_exiting());
  pid_t pid = child.pid;
  auto start = std::chrono::steady_clock::now();
  int asked = 0;
  RunOptions options;
  options.should_quit = [&] { return ++asked >= 3; };
  RunResult result = run_to_completion(child, nullptr, nullptr, options);
  CHECK(result.quit);
  CHECK(WIFSIGNALED(result.wait_status));
  CHECK(WTERMSIG(result.wait_status) == SIGINT);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  errno = 0;
  CHECK(waitpid(pid, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
}

TEST_CASE("run_to_completion escalates to SIGKILL when the child ignores the quit signal",
          "[reader]") {
  Child child = spawn(shell("trap '' INT; exec sleep 1000"));
  RunOptions options;
  options.should_quit = [] { return true; };
  options.kill_grace_ms = 100;
  RunResult result = run_to_completion(child, nullptr, nullptr, options);
  CHECK(result.quit);
  CHECK(WIFSIGNALED(result.wait_status));
  CHECK(WTERMSIG(result.wait_status) == SIGKILL);
}

TEST_CASE("run_to_completion survives a child that does not read its stdin", "[reader]") {
  SpawnSpec spec;
  spec.program = "/bin/true";
  spec.stdin_mode = SpawnSpec::Stdin::pipe;
  Child child = spawn(spec);
  std::string input(8u << 20, 'z');
  RunOptions options;
  options.stdin_data = input;
  RunResult result = run_to_completion(child, nullptr, nullptr, options);
  CHECK(WIFEXITED(result.wait_status));
  sigset_t pending;
  sigpending(&pending);
  CHECK_FALSE(sigismember(&pending, SIGPIPE));
}

TEST_CASE("run_to_completion kills and reaps the child when a sink throws", "[reader]") {
  Child child = spawn(shell("echo hello; exec sleep 1000"));
  pid_t pid = child.pid;
  CHECK_THROWS_AS(
      run_to_completion(
          child, [](std::string_view) { throw std::runtime_error("sink failed"); }, nullptr),
      std::runtime_error);
  errno = 0;
  CHECK(waitpid(pid, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
  CHECK(child.stdout_fd == -1);
}

TEST_CASE("run_to_completion reads output to end of file after the child exits", "[reader]") {
  // The shell exits at once; its background child writes later through the
  // inherited pipe, as a `call-process' of such a script would see.
  Child child = spawn(shell("(sleep 0.2; echo late) & echo early"));
  std::string out;
  run_to_completion(
      child, [&](std::string_view bytes) { out.append(bytes); }, nullptr);
  CHECK(out == "early\nlate\n");
}

TEST_CASE("write_without_sigpipe reports EPIPE and leaves no SIGPIPE pending", "[reader]") {
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

TEST_CASE("run_to_completion reaps with waitpid alone when there is no pidfd", "[reader]") {
  Child child = spawn(shell("sleep 0.05; echo polled; exit 6"));
  close(child.pidfd);
  child.pidfd = -1;  // As on a kernel without pidfd_open.
  std::string out;
  RunResult result = run_to_completion(
      child, [&](std::string_view bytes) { out.append(bytes); }, nullptr);
  CHECK(out == "polled\n");
  CHECK(WEXITSTATUS(result.wait_status) == 6);
}
