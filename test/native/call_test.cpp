// Tests of the synchronous runner: run_to_completion() and run_call().
#include "core/call.h"

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
#include "core/child.h"
#include "core/errors.h"
#include "support.h"

using namespace fastrevert;

using fastrevert::test::never_exiting;
using fastrevert::test::pattern_bytes;
using fastrevert::test::shell;
using fastrevert::test::TestPipe;

TEST_CASE("run_to_completion delivers 50 MB from head -c intact with bounded reads", "[call]") {
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

TEST_CASE("run_to_completion feeds stdin and keeps both streams in order", "[call]") {
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

TEST_CASE("run_to_completion returns the raw wait status of exit codes and signals", "[call]") {
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

TEST_CASE("run_to_completion interrupts a never-ending child when asked to quit", "[call]") {
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
          "[call]") {
  Child child = spawn(shell("trap '' INT; exec sleep 1000"));
  RunOptions options;
  options.should_quit = [] { return true; };
  options.kill_grace_ms = 100;
  RunResult result = run_to_completion(child, nullptr, nullptr, options);
  CHECK(result.quit);
  CHECK(WIFSIGNALED(result.wait_status));
  CHECK(WTERMSIG(result.wait_status) == SIGKILL);
}

TEST_CASE("run_to_completion survives a child that does not read its stdin", "[call]") {
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

TEST_CASE("run_to_completion kills and reaps the child when a sink throws", "[call]") {
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

TEST_CASE("run_to_completion reads output to end of file after the child exits", "[call]") {
  // The shell exits at once; its background child writes later through the
  // inherited pipe, as a `call-process' of such a script would see.
  Child child = spawn(shell("(sleep 0.2; echo late) & echo early"));
  std::string out;
  run_to_completion(
      child, [&](std::string_view bytes) { out.append(bytes); }, nullptr);
  CHECK(out == "early\nlate\n");
}

TEST_CASE("run_to_completion reaps with waitpid alone when there is no pidfd", "[call]") {
  Child child = spawn(shell("sleep 0.05; echo polled; exit 6"));
  close(child.pidfd);
  child.pidfd = -1;  // As on a kernel without pidfd_open.
  std::string out;
  RunResult result = run_to_completion(
      child, [&](std::string_view bytes) { out.append(bytes); }, nullptr);
  CHECK(out == "polled\n");
  CHECK(WEXITSTATUS(result.wait_status) == 6);
}
