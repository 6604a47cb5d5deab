// Tests of the synchronous runner: run_to_completion() and run_call().
#include "core/call.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
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
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "core/child.h"
#include "core/engine.h"
#include "core/errors.h"
#include "core/platform.h"
#include "support.h"

using namespace fastrevert;

using fastrevert::test::is_gone;
using fastrevert::test::never_exiting;
using fastrevert::test::pattern_bytes;
using fastrevert::test::shell;
using fastrevert::test::TempDir;
using fastrevert::test::TestPipe;
using fastrevert::test::write_file;

namespace {

// What run_call handed over, and how.
struct Collected {
  std::string bytes;
  int string_calls = 0;
  // Each range as (FROM, TO), in the order handed over.
  std::vector<std::pair<std::uint64_t, std::uint64_t>> ranges;
  // Bytes inserted while the child was still running (before its exit).
  std::uint64_t before_exit = 0;
};

// Hooks that append what is handed over to INTO, reading ranges back from
// the memfd as Lisp's `insert-file-contents' would.
CallHooks collecting(Collected& into) {
  CallHooks hooks;
  hooks.insert_bytes = [&into](std::string_view bytes) {
    ++into.string_calls;
    into.bytes.append(bytes);
  };
  hooks.insert_range = [&into](int memfd, std::uint64_t from, std::uint64_t to) {
    into.ranges.emplace_back(from, to);
    std::string part(static_cast<std::size_t>(to - from), '\0');
    ssize_t got = pread(memfd, part.data(), part.size(), static_cast<off_t>(from));
    REQUIRE(got == static_cast<ssize_t>(part.size()));
    into.bytes += part;
  };
  return hooks;
}

// Hooks like collecting(), plus a caller that reads the pipe itself, to end
// of file, as Lisp's `insert-file-contents' does.
CallHooks collecting_with_pipe(Collected& into, int& pipe_reads) {
  CallHooks hooks = collecting(into);
  hooks.insert_pipe = [&into, &pipe_reads](int pipe_fd) {
    ++pipe_reads;
    std::uint64_t taken = 0;
    char buffer[65536];
    for (;;) {
      // The pipe has no writer left: a read never has to wait.
      ssize_t got = read(pipe_fd, buffer, sizeof buffer);
      if (got == 0) break;
      REQUIRE(got > 0);
      into.bytes.append(buffer, static_cast<std::size_t>(got));
      taken += static_cast<std::uint64_t>(got);
    }
    return taken;
  };
  return hooks;
}

// Waits, up to a deadline, until PATH exists.
bool file_appears(const std::string& path) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    poll(nullptr, 0, 5);
  }
  return true;
}

// A file of SIZE pattern bytes cut into lines, and a child that prints it.
std::string lines_of(std::size_t size) {
  std::string bytes = pattern_bytes(size, 11);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] == '\n' || i % 97 == 96) bytes[i] = i % 97 == 96 ? '\n' : 'n';
  }
  return bytes;
}

// Checks that RANGES follow each other from 0 to END with no gap or overlap.
void check_contiguous(const std::vector<std::pair<std::uint64_t, std::uint64_t>>& ranges,
                      std::uint64_t end) {
  std::uint64_t at = 0;
  for (const auto& range : ranges) {
    CHECK(range.first == at);
    CHECK(range.second > range.first);
    at = range.second;
  }
  CHECK(at == end);
}

}  // namespace

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
  CHECK(is_gone(pid));
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
  CHECK(is_gone(pid));
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

TEST_CASE("run_call hands a small output over as one string once the child closes it", "[call]") {
  Child child = spawn(shell("printf 'one\\n'; printf 'two\\n'"));
  Collected got;
  CallResult result = run_call(child, 0, collecting(got));
  CHECK(got.bytes == "one\ntwo\n");
  CHECK(got.string_calls == 1);
  CHECK(got.ranges.empty());
  CHECK(result.bytes == 8);
  CHECK_FALSE(result.quit);
  CHECK(exit_status(result.wait_status).how == ExitStatus::How::exited);
  CHECK(child.pid == -1);
}

TEST_CASE("run_call hands nothing over for a child that writes nothing", "[call]") {
  Child child = spawn(shell("exit 0"));
  Collected got;
  CallResult result = run_call(child, 0, collecting(got));
  CHECK(got.string_calls == 0);
  CHECK(got.ranges.empty());
  CHECK(result.bytes == 0);
}

TEST_CASE("run_call hands output past the string limit over as memfd ranges without a loss",
          "[call]") {
  // Sizes on both sides of the string limit and of a pipe's capacity, and
  // one large enough for the copy thread to run for a while.
  for (std::size_t size : {kCallStringLimit + 1, std::size_t{65536} + 17, std::size_t{3} << 20}) {
    TempDir dir;
    std::string expected = lines_of(size);
    write_file(dir / "out", expected);
    Child child = spawn(shell("cat '" + dir.file("out") + "'"));
    Collected got;
    CallResult result = run_call(child, 0, collecting(got));
    INFO("size " << size);
    CHECK(got.string_calls == 0);
    CHECK(got.bytes.size() == expected.size());
    CHECK(got.bytes == expected);
    CHECK(result.bytes == size);
    check_contiguous(got.ranges, size);
  }
}

TEST_CASE("run_call hands a long output over whole, by whichever path its pace chose", "[call]") {
  // On both sides of the string limit, a pipe's default capacity, and past
  // what an enlarged pipe holds; for a coding that cannot be cut (CHUNK 0)
  // and one that can, from a child that writes at its own pace.
  for (std::uint64_t chunk : {std::uint64_t{0}, std::uint64_t{65536}}) {
    for (std::size_t size :
         {kCallStringLimit, kCallStringLimit + 1, std::size_t{65536} + 17, std::size_t{3} << 20}) {
      TempDir dir;
      std::string expected = lines_of(size);
      write_file(dir / "out", expected);
      // dd writes in pieces of 4 KiB, each after the child's startup.
      Child child = spawn(shell("dd if='" + dir.file("out") + "' bs=4096 status=none"));
      Collected got;
      int pipe_reads = 0;
      CallResult result = run_call(child, chunk, collecting_with_pipe(got, pipe_reads));
      INFO("chunk " << chunk << ", size " << size);
      CHECK(got.bytes == expected);
      CHECK(result.bytes == size);
      CHECK(exit_status(result.wait_status).code == 0);
      if (size <= kCallStringLimit) {
        // Strings only: all at once, or whole lines of a child that
        // seemed quiet between two writes (a loaded machine).
        CHECK(got.string_calls >= 1);
        CHECK(pipe_reads == 0);
        CHECK(got.ranges.empty());
      } else {
        // The caller's read of a closed pipe, or ranges (maybe after
        // strings of lines), never both.
        CHECK(pipe_reads + (got.ranges.empty() ? 0 : 1) == 1);
        if (chunk == 0 || pipe_reads == 1) CHECK(got.string_calls == 0);
      }
    }
  }
}

TEST_CASE("run_call hands its pipe to a caller only once no writer is left", "[call]") {
  // A child that wrote more than a string's worth and closed its output:
  // all it wrote waits in the pipe, and the caller reads it by name, to its
  // end, without a read that waits.
  TempDir dir;
  std::string closed = dir.file("closed");
  Child child =
      spawn(shell("head -c 20000 /dev/zero; head -c 30000 /dev/zero | tr '\\0' y; "
                  "exec >&-; : > '" +
                  closed + "'; sleep 0.2"));
  REQUIRE(file_appears(closed));
  std::string got;
  int pipe_reads = 0;
  int read_error = 0;
  CallHooks hooks;
  hooks.insert_bytes = [](std::string_view) { FAIL("a string was handed over"); };
  hooks.insert_range = [](int, std::uint64_t, std::uint64_t) { FAIL("a range was handed over"); };
  hooks.insert_pipe = [&](int pipe_fd) {
    ++pipe_reads;
#if FASTREVERT_HAVE_PROC_SELF_FD
    // Emacs opens /proc/self/fd/N: the pipe anew, with flags of its own.
    int own = open(("/proc/self/fd/" + std::to_string(pipe_fd)).c_str(), O_RDONLY | O_CLOEXEC);
#else
    // Emacs opens /dev/fd/N, which on macOS and the BSDs is a duplicate
    // of the descriptor, sharing its flags.
    int own = fcntl(pipe_fd, F_DUPFD_CLOEXEC, 0);
#endif
    REQUIRE(own >= 0);
    std::uint64_t taken = 0;
    char buffer[65536];
    for (;;) {
      ssize_t count = read(own, buffer, sizeof buffer);
      if (count == 0) break;
      if (count < 0) {
        if (errno == EINTR) continue;
        read_error = errno;
        break;
      }
      got.append(buffer, static_cast<std::size_t>(count));
      taken += static_cast<std::uint64_t>(count);
    }
    close(own);
    return taken;
  };
  CallResult result = run_call(child, 0, hooks);
  CHECK(read_error == 0);
  CHECK(pipe_reads == 1);
  CHECK(got == std::string(20000, '\0') + std::string(30000, 'y'));
  CHECK(result.bytes == 50000);
  CHECK(exit_status(result.wait_status).code == 0);
}

TEST_CASE("run_call streams through the memfd a child that fills the pipe faster than it is read",
          "[call]") {
  Child child = spawn(shell("head -c 8388608 /dev/zero | tr '\\0' 'x'; echo"));
  Collected got;
  int pipe_reads = 0;
  CallResult result = run_call(child, 65536, collecting_with_pipe(got, pipe_reads));
  CHECK(pipe_reads == 0);
  CHECK(got.bytes == std::string(8388608, 'x') + "\n");
  CHECK(got.ranges.size() >= 2);
  check_contiguous(got.ranges, 8388609);
  CHECK(result.bytes == 8388609);
}

TEST_CASE("run_call never waits for ever on a pipe that small writes filled", "[call]") {
  // Writes of 2,049 bytes fill a pipe page each, so a pipe is full with
  // about half its capacity in bytes: the child then waits on it, and the
  // runner must see that without the pipe reaching its capacity.
  std::string script = "i=0; while [ $i -lt 1200 ]; do printf '%2048s\\n' $i; i=$((i+1)); done";
  std::string expected;
  for (int i = 0; i < 1200; ++i) {
    std::string number = std::to_string(i);
    expected += std::string(2048 - number.size(), ' ') + number + "\n";
  }
  for (std::uint64_t chunk : {std::uint64_t{0}, std::uint64_t{65536}}) {
    Child child = spawn(shell(script));
    Collected got;
    int pipe_reads = 0;
    CallResult result = run_call(child, chunk, collecting_with_pipe(got, pipe_reads));
    INFO("chunk " << chunk);
    CHECK(got.bytes == expected);
    CHECK(exit_status(result.wait_status).code == 0);
  }
}

TEST_CASE("run_call reads to end of file when something the child started holds the pipe",
          "[call]") {
  // The child exits at once; the process it left behind writes later,
  // a little and then more than a string's worth, as stock reads it: to
  // end of file.
  for (std::size_t late : {std::size_t{10}, kCallStringLimit + 100}) {
    TempDir dir;
    write_file(dir / "late", std::string(late - 1, 'l') + "\n");
    write_file(dir / "gate", "");
    Child child = spawn(shell("echo start; (while [ -e '" + dir.file("gate") +
                              "' ]; do sleep 0.01; done; cat '" + dir.file("late") + "') &"));
    Collected got;
    int pipe_reads = 0;
    CallHooks hooks = collecting_with_pipe(got, pipe_reads);
    // The gate opens once the runner has been asked whether to quit, so
    // the late output comes after the child's exit was seen.
    int asked = 0;
    hooks.should_quit = [&] {
      if (++asked == 3) unlink(dir.file("gate").c_str());
      return false;
    };
    CallResult result = run_call(child, 0, hooks);
    INFO("late " << late);
    CHECK(got.bytes == "start\n" + std::string(late - 1, 'l') + "\n");
    CHECK(exit_status(result.wait_status).code == 0);
  }
}

TEST_CASE("run_call drains and counts what a caller left in the pipe", "[call]") {
  TempDir dir;
  // Within a pipe's capacity, written and closed before the call looks.
  std::string expected = lines_of(60000);
  write_file(dir / "out", expected);
  std::string closed = dir.file("closed");
  Child child = spawn(shell("cat '" + dir.file("out") + "'; exec >&-; : > '" + closed + "'"));
  REQUIRE(file_appears(closed));
  CallHooks hooks;
  // A caller that takes one read's worth and stops: the rest is read and
  // counted all the same.
  hooks.insert_pipe = [](int pipe_fd) {
    char buffer[1000];
    ssize_t got = read(pipe_fd, buffer, sizeof buffer);
    REQUIRE(got > 0);
    return static_cast<std::uint64_t>(got);
  };
  CallResult result = run_call(child, 0, hooks);
  CHECK(result.bytes == expected.size());
  CHECK(exit_status(result.wait_status).code == 0);
}

TEST_CASE("run_call with a chunk hands over whole lines while the child still runs", "[call]") {
  TempDir dir;
  std::string expected = lines_of(std::size_t{2} << 20);
  write_file(dir / "out", expected);
  write_file(dir / "gate", "");
  // The child prints everything, then waits until the test has seen a
  // range before it exits.
  Child child = spawn(shell("cat '" + dir.file("out") + "'; while [ -e '" + dir.file("gate") +
                            "' ]; do sleep 0.01; done"));
  Collected got;
  CallHooks hooks = collecting(got);
  auto insert_range = hooks.insert_range;
  hooks.insert_range = [&](int memfd, std::uint64_t from, std::uint64_t to) {
    insert_range(memfd, from, to);
    // Every range but the last ends a line.
    if (to < expected.size()) CHECK(expected[static_cast<std::size_t>(to) - 1] == '\n');
    unlink(dir.file("gate").c_str());
  };
  CallResult result = run_call(child, 65536, hooks);
  CHECK(got.bytes == expected);
  CHECK(got.ranges.size() >= 2);
  check_contiguous(got.ranges, expected.size());
  CHECK(exit_status(result.wait_status).code == 0);
}

TEST_CASE("run_call keeps the order of stdout and stderr bytes written to one pipe", "[call]") {
  SpawnSpec spec =
      shell("i=0; while [ $i -lt 300 ]; do echo out$i; echo err$i >&2; i=$((i+1)); done");
  spec.stderr_mode = SpawnSpec::Stderr::merge;
  Child child = spawn(spec);
  Collected got;
  run_call(child, 0, collecting(got));
  std::string expected;
  for (int i = 0; i < 300; ++i) {
    expected += "out" + std::to_string(i) + "\n" + "err" + std::to_string(i) + "\n";
  }
  CHECK(got.bytes == expected);
}

TEST_CASE("run_call reports an exit code and a killing signal through exit_status", "[call]") {
  Collected got;
  Child exits = spawn(shell("echo bye; exit 3"));
  ExitStatus exited = exit_status(run_call(exits, 0, collecting(got)).wait_status);
  CHECK(exited.how == ExitStatus::How::exited);
  CHECK(exited.code == 3);
  Child dies = spawn(shell("echo bye; kill -TERM $$"));
  ExitStatus signaled = exit_status(run_call(dies, 0, collecting(got)).wait_status);
  CHECK(signaled.how == ExitStatus::How::signaled);
  CHECK(signaled.code == SIGTERM);
  CHECK_FALSE(signaled.core_dumped);
  CHECK(exit_status(-1).how == ExitStatus::How::lost);
}

// Runs a child that writes OUTPUT (printf escapes), then creates a file and
// waits to be killed, with CHUNK and the quit asked at the QUIT_AT-th look
// once that file exists, so that the whole output waits in the pipe or has
// been read when the quit comes.
CallResult quit_after_output(const std::string& output, std::uint64_t chunk, int quit_at,
                             Collected& got, bool with_pipe, OutputCut cut = OutputCut::ascii) {
  TempDir dir;
  std::string marker = dir.file("written");
  SpawnSpec spec = shell("printf '" + output + "'; : > '" + marker + "'; exec sleep 1000");
  spec.new_session = true;
  Child child = spawn(spec);
  REQUIRE(file_appears(marker));
  int pipe_reads = 0;
  CallHooks hooks = with_pipe ? collecting_with_pipe(got, pipe_reads) : collecting(got);
  hooks.cut = cut;
  int asked = 0;
  hooks.should_quit = [&asked, quit_at] { return ++asked == quit_at; };
  CallResult result = run_call(child, chunk, hooks);
  CHECK(pipe_reads == 0);
  return result;
}

// The CPU time this thread has used, in seconds.
double thread_cpu_seconds() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) / 1e9;
}

TEST_CASE("run_call waits for a child that closed its output without spinning", "[call]") {
  // A pipe without a writer reports a hang-up to every poll at once: a
  // wait that keeps polling it until the exit burns a CPU, and on a busy
  // one keeps the exiting child from running.
  for (std::uint64_t chunk : {std::uint64_t{0}, std::uint64_t{65536}}) {
    Collected got;
    int pipe_reads = 0;
    CallHooks hooks = collecting_with_pipe(got, pipe_reads);
    Child child = spawn(shell("exec >&- 2>&-; sleep 1.5"));
    double cpu_before = thread_cpu_seconds();
    CallResult result = run_call(child, chunk, hooks);
    double cpu = thread_cpu_seconds() - cpu_before;
    CHECK(exit_status(result.wait_status).code == 0);
    CHECK(got.bytes.empty());
    // A spin would have used most of the 1.5 s, a third of it even on a
    // CPU shared with two busy loops.
    CHECK(cpu < 0.25);
  }
}

TEST_CASE("run_call on a quit while output streams keeps what was read, to a character's end",
          "[call]") {
  // Stock inserts each read as it comes, holding back only an unfinished
  // character: a quit leaves those reads in the buffer.  A lone UTF-8 lead
  // byte, an ASCII digit (maybe half a GB18030 character) and a CR (maybe
  // half a CRLF) may not end a character; anything else below 0x80 does.
  const std::string kept(60000, 'x');
  Collected got;
  SECTION("read, past a string's worth, with no newline to cut at") {
    CallResult result = quit_after_output(kept + "\\303", 65536, 2, got, false);
    CHECK(result.quit);
    CHECK(got.bytes == kept);
  }
  SECTION("read, within a string's worth") {
    CallResult result = quit_after_output("abc 12\\r", 65536, 2, got, false);
    CHECK(result.quit);
    CHECK(got.bytes == "abc ");
  }
  SECTION("still in the pipe, while the child is watched") {
    CallResult result = quit_after_output(kept + "7", 65536, 1, got, true);
    CHECK(result.quit);
    CHECK(got.bytes == kept);
  }
  SECTION("all of it at once, for an output that cannot be cut") {
    CallResult result = quit_after_output(kept + "5", 0, 2, got, false);
    CHECK(result.quit);
    CHECK(got.bytes == kept);
    CHECK(got.ranges.size() == 1);
  }
  SECTION("up to an unfinished UTF-8 character, in UTF-8") {
    CallResult result = quit_after_output("abc 12 \\342\\202\\254\\342\\202", 65536, 2, got, false,
                                          OutputCut::utf8);
    CHECK(result.quit);
    CHECK(got.bytes == "abc 12 \342\202\254");
  }
  SECTION("all but a CR, in raw bytes") {
    CallResult result = quit_after_output("ab\\342\\r", 65536, 2, got, false, OutputCut::bytes);
    CHECK(result.quit);
    CHECK(got.bytes == "ab\342");
  }
}

TEST_CASE("run_call on a quit keeps the output of a child gone quiet, read by this thread",
          "[call]") {
  // A child that wrote a little, then stays quiet (a loaded machine can
  // make a fast writer look so): its output is not left to a read of the
  // pipe to its end, which a quit would stop with nothing kept.
  TempDir dir;
  std::string marker = dir.file("written");
  const std::string kept(20000, 'x');
  SpawnSpec spec = shell("printf '" + kept + "7'; : > '" + marker + "'; exec sleep 5");
  spec.new_session = true;
  Child child = spawn(spec);
  REQUIRE(file_appears(marker));
  Collected got;
  int pipe_reads = 0;
  CallHooks hooks = collecting_with_pipe(got, pipe_reads);
  // Past the watch, which finds the child quiet after a few looks.
  int asked = 0;
  hooks.should_quit = [&asked] { return ++asked == 40; };
  CallResult result = run_call(child, 65536, hooks);
  CHECK(result.quit);
  CHECK(pipe_reads == 0);
  CHECK(got.bytes == kept);
}

TEST_CASE("run_call on a quit interrupts the child, keeping what it had read", "[call]") {
  SECTION("while output still fits a string") {
    TempDir dir;
    std::string marker = dir.file("written");
    SpawnSpec spec = shell("echo started; : > '" + marker + "'; exec sleep 1000");
    spec.new_session = true;
    Child child = spawn(spec);
    REQUIRE(file_appears(marker));
    Collected got;
    CallHooks hooks = collecting(got);
    int asked = 0;
    hooks.should_quit = [&asked] { return ++asked == 3; };
    auto start = std::chrono::steady_clock::now();
    CallResult result = run_call(child, 0, hooks);
    CHECK(result.quit);
    CHECK(got.string_calls == 1);
    CHECK(got.bytes == "started\n");
    ExitStatus status = exit_status(result.wait_status);
    CHECK(status.how == ExitStatus::How::signaled);
    CHECK(status.code == SIGINT);
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  }
  SECTION("while the copy thread fills the memfd") {
    TempDir dir;
    // More than one turn of the reading loop takes, so that ranges follow
    // the first.
    const std::string output = lines_of(std::size_t{8} << 20);
    write_file(dir / "out", output);
    // The trap comes first: the quit may come while cat still writes.
    SpawnSpec spec = shell("trap '' INT; cat '" + dir.file("out") + "'; exec sleep 1000");
    spec.new_session = true;
    Child child = spawn(spec);
    pid_t pid = child.pid;
    Collected got;
    CallHooks hooks = collecting(got);
    hooks.copier_threshold = 0;
    bool quitting = false;
    hooks.should_quit = [&quitting] { return std::exchange(quitting, false); };
    auto insert_range = hooks.insert_range;
    // The first range starts the copy thread; the quit comes with the
    // second, which the copy thread brought.
    hooks.insert_range = [&](int memfd, std::uint64_t from, std::uint64_t to) {
      insert_range(memfd, from, to);
      quitting = got.ranges.size() >= 2;
    };
    CallResult result = run_call(child, 4096, hooks);
    CHECK(result.quit);
    CHECK(result.copier_used);
    std::size_t ranges = got.ranges.size();
    CHECK(ranges >= 1);
    // What was handed over is the output's start, in order, cut after a
    // byte that ends a character.
    REQUIRE(!got.bytes.empty());
    CHECK(output.compare(0, got.bytes.size(), got.bytes) == 0);
    CHECK(got.bytes.back() != '\r');
    // The child ignores SIGINT: the grace period ends with SIGKILL.
    ExitStatus status = exit_status(result.wait_status);
    CHECK(status.how == ExitStatus::How::signaled);
    CHECK(status.code == SIGKILL);
    CHECK(is_gone(pid));
  }
}

TEST_CASE("run_call counts a child whose output it read, unless the user quit", "[call]") {
  Stats stats;
  Collected got;
  CallHooks hooks = collecting(got);
  hooks.stats = &stats;
  Child child = spawn(shell("printf 12345"));
  run_call(child, 0, hooks);
  CHECK(stats.processes.load() == 1);
  CHECK(stats.bytes_read.load() == 5);
  SpawnSpec spec = shell("printf ab; exec sleep 1000");
  spec.new_session = true;
  Child quitted = spawn(spec);
  hooks.should_quit = [] { return true; };
  CHECK(run_call(quitted, 0, hooks).quit);
  CHECK(stats.processes.load() == 1);
  CHECK(stats.bytes_read.load() == 5);
}

TEST_CASE("run_call gives the child its grace after one quit, and SIGKILL at a second", "[call]") {
  // Each yes of should_quit is a quit the user asked for (the glue takes
  // each C-g from `quit-flag' once).
  SpawnSpec spec = shell("trap 'sleep 0.3; exit 7' INT; while :; do sleep 0.05; done");
  spec.new_session = true;
  spec.stdout_mode = SpawnSpec::Stdout::null;
  Child child = spawn(spec);
  CallHooks hooks;
  int asked = 0;
  SECTION("one quit: the child ends as its SIGINT handler says") {
    hooks.should_quit = [&asked] { return ++asked == 2; };
    CallResult result = run_call(child, 0, hooks);
    CHECK(result.quit);
    ExitStatus status = exit_status(result.wait_status);
    CHECK(status.how == ExitStatus::How::exited);
    CHECK(status.code == 7);
  }
  SECTION("a second quit: SIGKILL, without the handler's time") {
    hooks.should_quit = [&asked] { return ++asked == 2 || asked == 4; };
    CallResult result = run_call(child, 0, hooks);
    CHECK(result.quit);
    ExitStatus status = exit_status(result.wait_status);
    CHECK(status.how == ExitStatus::How::signaled);
    CHECK(status.code == SIGKILL);
  }
}

TEST_CASE("run_call kills and reaps the child when an insert hook throws", "[call]") {
  TempDir dir;
  write_file(dir / "out", lines_of(std::size_t{1} << 20));
  SpawnSpec spec = shell("cat '" + dir.file("out") + "'; exec sleep 1000");
  spec.new_session = true;
  Child child = spawn(spec);
  pid_t pid = child.pid;
  CallHooks hooks;
  hooks.insert_range = [](int, std::uint64_t, std::uint64_t) {
    throw std::runtime_error("insert failed");
  };
  CHECK_THROWS_AS(run_call(child, 4096, hooks), std::runtime_error);
  CHECK(is_gone(pid));
}

TEST_CASE("run_call waits for a child whose output goes to a file", "[call]") {
  TempDir dir;
  SpawnSpec spec = shell("echo to-file; exit 4");
  spec.stdout_mode = SpawnSpec::Stdout::file;
  spec.stdout_file = dir.file("written");
  Child child = spawn(spec);
  Collected got;
  CallResult result = run_call(child, 0, collecting(got));
  CHECK(got.bytes.empty());
  CHECK(exit_status(result.wait_status).code == 4);
  std::ifstream in(dir.file("written"));
  std::string line;
  std::getline(in, line);
  CHECK(line == "to-file");
}
