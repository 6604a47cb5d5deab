// Tests of the process table through a real Engine: records, ordering, exit
// statuses, stdin, signals, scale and shutdown.
#include "core/process_table.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "core/child_exit.h"
#include "core/direct_input.h"
#include "core/engine.h"
#include "core/errors.h"
#include "core/handoff.h"
#include "core/json_lisp.h"
#include "core/named_pipes.h"
#include "engine_harness.h"
#include "support.h"

using namespace fastrevert;

using fastrevert::test::never_exiting;
using fastrevert::test::pattern_bytes;
using fastrevert::test::shell;
using fastrevert::test::TempDir;
using fastrevert::test::write_file;

namespace {

using fastrevert::test::Clock;
using fastrevert::test::EngineHarness;
using fastrevert::test::is_gone;

}  // namespace

TEST_CASE("process table delivers each stream in order and the exit record after all output",
          "[process]") {
  EngineHarness harness;
  harness.with_table([](ProcessTable& table) {
    table.start(1,
                shell("i=0; while [ $i -lt 2000 ]; do echo out $i; echo err $i >&2; "
                      "i=$((i+1)); done; exit 3"),
                {});
  });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));

  std::string expected_out;
  std::string expected_err;
  for (int i = 0; i < 2000; ++i) {
    expected_out += "out " + std::to_string(i) + "\n";
    expected_err += "err " + std::to_string(i) + "\n";
  }
  CHECK(harness.output_of(1, 1) == expected_out);
  CHECK(harness.output_of(1, 2) == expected_err);
  const Record& last = harness.records().back();
  CHECK(last.kind == test::kExitKind);
  CHECK(last.id == 1);
  CHECK(last.data == "exited");
  CHECK(last.code == 3);
  // Nothing more arrives for it.
  harness.wait_until([] { return false; }, std::chrono::milliseconds(100));
  CHECK(harness.exits_of(1) == 1);
  CHECK(harness.records().back().kind == test::kExitKind);
  harness.with_table([](ProcessTable& table) { CHECK_FALSE(table.contains(1)); });
}

TEST_CASE("process table reads a child that streams in small writes in pauses and loses nothing",
          "[process]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.framing = GENERATE(Framing::none, Framing::lines);
  // 2 MB of numbered lines in writes of one line, with a short sleep every
  // 50 lines, so that the engine keeps catching up with the writer.
  std::string script =
      "exec perl -e '$| = 1; for my $i (1..40000) { printf(\"%07d %s\\n\", $i, \"x\" x 42); "
      "select(undef, undef, undef, 0.0002) unless $i % 50 }'";
  harness.with_table([&](ProcessTable& table) { table.start(1, shell(script), options); });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }, std::chrono::seconds(60)));
  std::string expected;
  for (int i = 1; i <= 40000; ++i) {
    char line[64];
    std::snprintf(line, sizeof line, "%07d %s\n", i, std::string(42, 'x').c_str());
    expected += line;
  }
  CHECK(harness.output_of(1, 1) == expected);
  // Once it streamed, the engine left the pipe alone for a moment at a time.
  CHECK(harness.engine().stats().read_pauses.load() > 0);
}

TEST_CASE("process table never pauses an output whose consumer is told at once", "[process]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.framing = Framing::lsp;
  ProcessOutput::Config config;
  config.prompt = true;
  options.output = std::make_shared<ProcessOutput>(config);
  // 1 MB of small LSP messages, a short sleep every 50: as the stream that
  // the pauses are for, but requests and replies.
  std::string script =
      "exec perl -e '$| = 1; for my $i (1..20000) { my $b = sprintf(\"%07d %s\", $i, \"x\" x 42); "
      "printf(\"Content-Length: %d\\r\\n\\r\\n%s\", length($b), $b); "
      "select(undef, undef, undef, 0.0002) unless $i % 50 }'";
  std::uint64_t pauses_before = harness.engine().stats().read_pauses.load();
  harness.with_table([&](ProcessTable& table) { table.start(1, shell(script), options); });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }, std::chrono::seconds(60)));
  std::string expected;
  for (int i = 1; i <= 20000; ++i) {
    char body[64];
    std::snprintf(body, sizeof body, "%07d %s", i, std::string(42, 'x').c_str());
    expected += "Content-Length: " + std::to_string(std::strlen(body)) + "\r\n\r\n" + body;
  }
  CHECK(harness.output_of(1, 1) == expected);
  CHECK(harness.engine().stats().read_pauses.load() == pauses_before);
}

TEST_CASE("process table reports exit codes and deaths by signal as codes and how they ended",
          "[process]") {
  EngineHarness harness;
  harness.with_table([](ProcessTable& table) {
    table.start(1, shell("exit 0"), {});
    table.start(2, shell("exit 42"), {});
    table.start(3, shell("kill -TERM $$"), {});
    ProcessTable::Options polled;
    polled.poll_exit_with_waitpid = true;
    table.start(4, shell("exit 5"), polled);
  });
  REQUIRE(harness.wait_until([&] {
    return harness.exit_of(1) && harness.exit_of(2) && harness.exit_of(3) && harness.exit_of(4);
  }));
  CHECK(harness.exit_of(1)->data == "exited");
  CHECK(harness.exit_of(1)->code == 0);
  CHECK(harness.exit_of(2)->data == "exited");
  CHECK(harness.exit_of(2)->code == 42);
  CHECK(harness.exit_of(3)->data == "signaled");
  CHECK(harness.exit_of(3)->code == SIGTERM);
  CHECK(harness.exit_of(4)->data == "exited");
  CHECK(harness.exit_of(4)->code == 5);
}

TEST_CASE("process table carries 100 MB of stdin through cat byte for byte", "[process]") {
  EngineHarness harness;
  const std::size_t size = 100u << 20;
  auto input = std::make_shared<const std::string>(pattern_bytes(size, 11));
  std::size_t offset = 0;
  bool intact = true;
  bool exited = false;
  int status = -1;
  std::string how;
  harness.on_record = [&](Record& record) {
    if (record.id != 1) return;
    if (record.kind == test::kOutputKind) {
      if (offset + record.data.size() > size ||
          input->compare(offset, record.data.size(), record.data) != 0) {
        intact = false;
      }
      offset += record.data.size();
    } else if (record.kind == test::kExitKind) {
      exited = true;
      status = static_cast<int>(record.code);
      how = record.data;
    }
  };

  SpawnSpec spec;
  spec.program = "/bin/cat";
  spec.stdin_mode = SpawnSpec::Stdin::pipe;
  harness.with_table([&](ProcessTable& table) {
    table.start(1, spec, {});
    // In several pieces, as a Lisp caller would send them.
    for (std::size_t piece = 0; piece < size; piece += 10u << 20) {
      CHECK(table.write_stdin(1, input->substr(piece, 10u << 20)));
    }
    CHECK(table.close_stdin(1));
    CHECK_FALSE(table.write_stdin(1, "after close"));
  });
  REQUIRE(harness.wait_until([&] { return exited; }, std::chrono::seconds(40)));
  CHECK(offset == size);
  CHECK(intact);
  CHECK(how == "exited");
  CHECK(status == 0);
}

TEST_CASE("input written at once and input handed to the engine arrive in the order sent",
          "[process]") {
  // A child that reads slowly, so that the pipe fills now and then and
  // sends go to the engine, and then straight again once it has caught up.
  EngineHarness harness;
  SpawnSpec spec = shell(
      "exec perl -e 'while (sysread(STDIN, $b, 16384)) "
      "{ syswrite(STDOUT, $b); select(undef, undef, undef, 0.0005) }'");
  spec.stdin_mode = SpawnSpec::Stdin::pipe;
  Child child = spawn(spec);
  ProcessTable::Options options;
  auto direct = std::make_shared<DirectInput>(child.stdin_fd);
  options.direct_input = direct;
  auto shared_child = std::make_shared<Child>(std::move(child));
  harness.with_table([shared_child, options](ProcessTable& table) {
    table.adopt(1, std::move(*shared_child), options);
  });
  std::string sent;
  std::size_t direct_bytes = 0;
  std::size_t direct_after_catching_up = 0;
  std::size_t handed_sends = 0;
  for (int i = 0; i < 3000; ++i) {
    if (i == 1500) {
      // The engine catches up: sends go straight again.
      REQUIRE(harness.wait_until([&] { return direct->handed() == 0; },
                                 std::chrono::seconds(60)));
    }
    // Sends of 1 to 3000 bytes, each of its own letter and number.
    std::string piece = std::to_string(i) + ":" +
                        std::string(static_cast<std::size_t>(1 + (i * 7919) % 3000),
                                    static_cast<char>('a' + i % 26)) +
                        "\n";
    sent += piece;
    std::size_t written = direct->try_write(piece);
    direct_bytes += written;
    if (i >= 1500) direct_after_catching_up += written;
    if (written < piece.size()) {
      ++handed_sends;
      std::string rest = piece.substr(written);
      REQUIRE(harness.engine().post([rest](Engine& engine) mutable {
        engine.service<ProcessTable>().write_stdin(1, std::move(rest));
      }));
    }
  }
  REQUIRE(harness.engine().post(
      [direct](Engine& engine) { engine.service<ProcessTable>().close_stdin(1); }));
  direct->close();
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }, std::chrono::seconds(60)));
  CHECK(harness.output_of(1, 1) == sent);
  // Both ways were taken, and the engine wrote all it was handed.
  CHECK(direct_bytes > 0);
  CHECK(direct_after_catching_up > 0);
  CHECK(handed_sends > 0);
  CHECK(direct->handed() == 0);
}

TEST_CASE("process table keeps a child that closed stdout early until it exits", "[process]") {
  EngineHarness harness;
  harness.with_table([](ProcessTable& table) {
    table.start(1, shell("echo early; exec >&-; sleep 0.2; echo late >&2; exit 4"), {});
  });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  CHECK(harness.output_of(1, 1) == "early\n");
  CHECK(harness.output_of(1, 2) == "late\n");
  CHECK(harness.exit_of(1)->data == "exited");
  CHECK(harness.exit_of(1)->code == 4);
  CHECK(harness.records().back().kind == test::kExitKind);
}

TEST_CASE("process table stops a never-exiting child with the signal it is sent", "[process]") {
  EngineHarness harness;
  pid_t pid = -1;
  harness.with_table([&](ProcessTable& table) {
    table.start(1, never_exiting(), {});
    pid = table.pid(1);
  });
  REQUIRE(pid > 0);
  CHECK_FALSE(
      harness.wait_until([&] { return harness.exits_of(1) > 0; }, std::chrono::milliseconds(100)));
  harness.with_table([](ProcessTable& table) {
    CHECK(table.signal(1, SIGTERM));
    CHECK_FALSE(table.signal(99, SIGTERM));
  });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  CHECK(harness.exit_of(1)->data == "signaled");
  CHECK(harness.exit_of(1)->code == SIGTERM);
  CHECK(is_gone(pid));
}

TEST_CASE("process table runs 1,000 concurrent children and reports each one's output",
          "[process]") {
  rlimit limit;
  REQUIRE(getrlimit(RLIMIT_NOFILE, &limit) == 0);
  if (limit.rlim_cur < 8192 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  const int count = 1000;
  EngineHarness harness;
  harness.with_table([&](ProcessTable& table) {
    for (int id = 1; id <= count; ++id) {
      SpawnSpec spec;
      if (id % 2) {
        spec.program = "/bin/true";
      } else {
        spec.program = "/bin/echo";
        spec.argv = {"echo", std::to_string(id)};
      }
      table.start(static_cast<std::uint64_t>(id), spec, {});
    }
    CHECK(table.size() <= static_cast<std::size_t>(count));
  });
  int exits = 0;
  std::map<std::uint64_t, std::string> outputs;
  std::map<std::uint64_t, int> statuses;
  harness.on_record = [&](Record& record) {
    if (record.kind == test::kOutputKind) {
      CHECK(statuses.count(record.id) == 0);  // No output after the exit.
      outputs[record.id] += record.data;
    } else if (record.kind == test::kExitKind) {
      ++exits;
      statuses[record.id] = static_cast<int>(record.code);
    }
  };
  REQUIRE(harness.wait_until([&] { return exits == count; }, std::chrono::seconds(40)));
  CHECK(statuses.size() == static_cast<std::size_t>(count));
  int wrong = 0;
  for (int id = 1; id <= count; ++id) {
    std::string expected = id % 2 ? "" : std::to_string(id) + "\n";
    if (outputs[static_cast<std::uint64_t>(id)] != expected) ++wrong;
    if (statuses[static_cast<std::uint64_t>(id)] != 0) ++wrong;
  }
  CHECK(wrong == 0);
  harness.with_table([](ProcessTable& table) { CHECK(table.size() == 0); });
  CHECK(harness.engine().stats().processes.load() >= static_cast<std::uint64_t>(count));
}

TEST_CASE("engine shutdown kills live children and leaves no zombies", "[process]") {
  std::vector<pid_t> pids;
  {
    EngineHarness harness;
    harness.with_table([&](ProcessTable& table) {
      for (std::uint64_t id = 1; id <= 5; ++id) {
        SpawnSpec spec = never_exiting();
        spec.stdin_mode = SpawnSpec::Stdin::pipe;
        table.start(id, spec, {});
        pids.push_back(table.pid(id));
      }
      // One removed child still being reaped in the background.
      table.remove(5);
      // Queued stdin that can never be written.
      table.write_stdin(1, std::string(4u << 20, 'q'));
    });
    harness.engine().stop();
  }
  REQUIRE(pids.size() == 5);
  for (pid_t pid : pids) CHECK(is_gone(pid));
}

TEST_CASE("process table forgets a removed child: no more records, killed and reaped",
          "[process]") {
  EngineHarness harness;
  pid_t pid = -1;
  harness.with_table([&](ProcessTable& table) {
    table.start(1, shell("echo hello; exec sleep 1000"), {});
    pid = table.pid(1);
  });
  REQUIRE(harness.wait_until([&] { return !harness.output_of(1, 1).empty(); }));
  harness.with_table([](ProcessTable& table) {
    CHECK(table.remove(1));
    CHECK_FALSE(table.contains(1));
    CHECK_FALSE(table.remove(1));
  });
  // The id may be reused at once.
  harness.with_table([](ProcessTable& table) { table.start(1, shell("echo again"), {}); });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  CHECK(harness.output_of(1, 1) == "hello\nagain\n");
  CHECK(harness.exits_of(1) == 1);
  REQUIRE(harness.wait_until([&] { return is_gone(pid); }));
}

TEST_CASE("process table frames lines and flushes the unterminated tail at end of file",
          "[process]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.framing = Framing::lines;
  harness.with_table([&](ProcessTable& table) {
    table.start(1,
                shell("printf a; sleep 0.05; printf 'b\\nc'; sleep 0.05; printf 'd\\ne\\n';"
                      "sleep 0.05; printf tail"),
                options);
  });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  std::vector<std::string> chunks;
  for (const auto& record : harness.records())
    if (record.kind == test::kOutputKind) chunks.push_back(record.data);
  REQUIRE_FALSE(chunks.empty());
  CHECK(chunks.back() == "tail");
  for (std::size_t i = 0; i + 1 < chunks.size(); ++i) CHECK(chunks[i].back() == '\n');
  CHECK(harness.output_of(1, 1) == "ab\ncd\ne\ntail");
}

TEST_CASE("process table frames LSP messages and reports broken framing once", "[process]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.framing = Framing::lsp;
  harness.with_table([&](ProcessTable& table) {
    table.start(1,
                shell("printf 'Content-Length: 2\\r\\n\\r'; sleep 0.05; printf '\\n{'; "
                      "sleep 0.05; printf '}Content-Length: 3\\r\\n\\r\\n[1]'"),
                options);
    table.start(2, shell("printf 'garbage\\r\\n\\r\\nmore'"), options);
  });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0 && harness.exits_of(2) > 0; }));
  std::vector<std::string> chunks;
  int notices = 0;
  for (const auto& record : harness.records()) {
    if (record.kind == test::kOutputKind && record.id == 1) chunks.push_back(record.data);
    if (record.kind == RecordKind::notice && record.id == 2) ++notices;
  }
  CHECK(harness.output_of(1, 1) == "Content-Length: 2\r\n\r\n{}Content-Length: 3\r\n\r\n[1]");
  // The pieces arrive 50 ms apart, yet every record is whole messages.
  CHECK(chunks.front().rfind("Content-Length: 2\r\n\r\n{}", 0) == 0);
  for (const auto& chunk : chunks) CHECK((chunk.back() == '}' || chunk.back() == ']'));
  CHECK(harness.output_of(2, 1) == "garbage\r\n\r\nmore");
  CHECK(notices == 1);
}

TEST_CASE("process table refuses a missing program with an error and records nothing",
          "[process]") {
  EngineHarness harness;
  harness.with_table([](ProcessTable& table) {
    SpawnSpec spec;
    spec.program = "/nonexistent/program";
    CHECK_THROWS_AS(table.start(1, spec, {}), SystemError);
    CHECK_FALSE(table.contains(1));
  });
  CHECK_FALSE(harness.wait_until([&] { return !harness.records().empty(); },
                                 std::chrono::milliseconds(50)));
}

TEST_CASE("process table adopts a child spawned on another thread", "[process]") {
  EngineHarness harness;
  auto child = std::make_shared<Child>(spawn(shell("echo adopted")));
  harness.with_table([child](ProcessTable& table) { table.adopt(7, std::move(*child), {}); });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(7) > 0; }));
  CHECK(harness.output_of(7, 1) == "adopted\n");
}

TEST_CASE("process table counts spawned processes and bytes read", "[process]") {
  EngineHarness harness;
  harness.with_table([](ProcessTable& table) { table.start(1, shell("printf 12345"), {}); });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  CHECK(harness.engine().stats().processes.load() == 1);
  CHECK(harness.engine().stats().bytes_read.load() == 5);
}

TEST_CASE("process table pauses reading on request and loses nothing on resume", "[process]") {
  EngineHarness harness;
  SpawnSpec spec;
  spec.program = "/usr/bin/head";
  spec.argv = {"head", "-c", "3000000", "/dev/zero"};
  harness.with_table([&](ProcessTable& table) {
    table.start(1, spec, {});
    table.set_reading(1, false);
  });
  // Paused, the child blocks on its full pipe and cannot finish.
  CHECK_FALSE(
      harness.wait_until([&] { return harness.exits_of(1) > 0; }, std::chrono::milliseconds(200)));
  harness.with_table([](ProcessTable& table) { CHECK(table.set_reading(1, true)); });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  CHECK(harness.output_of(1, 1) == std::string(3000000, '\0'));
}

TEST_CASE("process table survives a child that exits without reading its stdin", "[process]") {
  EngineHarness harness;
  // The child exits, unread input queued, only once told to: a loaded
  // machine must not let it go before the input is written.
  TempDir dir;
  std::string go = dir.file("go");
  SpawnSpec spec = shell("while [ ! -e '" + go + "' ]; do sleep 0.01; done; exit 9");
  spec.stdin_mode = SpawnSpec::Stdin::pipe;
  harness.with_table([&](ProcessTable& table) {
    table.start(1, spec, {});
    CHECK(table.write_stdin(1, std::string(8u << 20, 's')));
    CHECK(table.queued_stdin_bytes(1) > 0);
  });
  std::ofstream(go).put('\n');
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  CHECK(harness.exit_of(1)->data == "exited");
  CHECK(harness.exit_of(1)->code == 9);
}

TEST_CASE("process table refuses a duplicate id and reaps the child it was handed", "[process]") {
  EngineHarness harness;
  auto child = std::make_shared<Child>(spawn(never_exiting()));
  pid_t pid = child->pid;
  harness.with_table([child](ProcessTable& table) {
    table.start(1, never_exiting(), {});
    CHECK_THROWS_AS(table.adopt(1, std::move(*child), {}), std::invalid_argument);
    CHECK(table.remove(1));
  });
  CHECK(is_gone(pid));
}

TEST_CASE("process table frames stderr separately from stdout", "[process]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.stderr_framing = Framing::lines;
  harness.with_table([&](ProcessTable& table) {
    table.start(1, shell("printf 'partial'; printf 'warn'>&2; sleep 0.05; printf 'ing\\n' >&2"),
                options);
  });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  for (const auto& record : harness.records()) {
    if (record.kind == test::kOutputKind && record.code == 2) {
      CHECK(record.data == "warning\n");
    }
  }
  CHECK(harness.output_of(1, 1) == "partial");
}

namespace {

// The whole contents of the file behind FD.
// The number of descriptors open in this process.
int open_descriptors() {
  int count = 0;
  for (int fd = 0; fd < 4096; ++fd) count += fcntl(fd, F_GETFD) != -1;
  return count;
}

}  // namespace

TEST_CASE("process table writes stdout to a memfd and delivers ranges of it", "[process]") {
  EngineHarness harness;
  std::string expected = pattern_bytes(3 << 20, 7);
  TempDir dir;
  std::string file = dir / "output";
  write_file(file, expected);
  ProcessTable::Options options;
  options.stdout_to_memfd = true;
  // splice(2), and the read and pwrite it falls back to.
  options.memfd_without_splice = GENERATE(false, true);
  harness.with_table([&](ProcessTable& table) {
    table.start(1, shell(std::string("cat ") + file + "; echo err >&2"), options);
    table.start(2, shell("printf ab"), {});
  });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0 && harness.exits_of(2) > 0; }));
  CHECK(harness.output_of(1, 1) == expected);
  CHECK(harness.output_of(1, 2) == "err\n");
  CHECK(harness.ranges_of(1) > 0);
  // Without a memfd, nothing changes.
  CHECK(harness.output_of(2, 1) == "ab");
  CHECK(harness.ranges_of(2) == 0);
}

TEST_CASE("process table closes a process's memfd on every path", "[process]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.stdout_to_memfd = true;
  {
    int before = open_descriptors();
    harness.with_table([&](ProcessTable& table) { table.start(1, shell("printf ab"), options); });
    REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
    CHECK(harness.output_of(1, 1) == "ab");
    CHECK(harness.ranges_of(1) == 1);
    // The table closes its own descriptors as the child finishes, and the
    // consumer's goes with the output once delivered.
    CHECK(harness.wait_until([&] { return open_descriptors() == before; }));
  }
  {
    // A removal while the child runs, after the memfd took over.
    int before = open_descriptors();
    std::shared_ptr<ProcessOutput> output;
    harness.with_table([&](ProcessTable& table) {
      table.start(3, shell("printf x; exec sleep 600"), options);
      output = table.output(3);
    });
    REQUIRE(harness.wait_until([&] { return harness.ranges_of(3) > 0; }));
    harness.with_table([&](ProcessTable& table) { table.remove(3); });
    output.reset();
    CHECK(harness.wait_until([&] { return open_descriptors() == before; }));
  }
}

TEST_CASE("process table sends a small output as bytes and the rest through the memfd",
          "[process]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.stdout_to_memfd = true;
  options.memfd_threshold = 1000;
  // Below the threshold: bytes only, and no memfd is made.
  harness.with_table([&](ProcessTable& table) { table.start(1, shell("printf abc"), options); });
  // Past it: what came before as bytes, the rest in the memfd, in order;
  // the read that crossed the threshold is in the memfd.
  std::string expected = pattern_bytes(200000, 3);
  TempDir dir;
  std::string file = dir / "output";
  write_file(file, expected);
  harness.with_table([&](ProcessTable& table) {
    table.start(2, shell(std::string("head -c 600 ") + file + "; sleep 0.2; tail -c +601 " + file),
                options);
    table.start(3, shell(std::string("cat ") + file), options);
  });
  REQUIRE(harness.wait_until([&] {
    return harness.exits_of(1) > 0 && harness.exits_of(2) > 0 && harness.exits_of(3) > 0;
  }));
  CHECK(harness.output_of(1, 1) == "abc");
  CHECK(harness.ranges_of(1) == 0);
  CHECK(harness.output_of(3, 1) == expected);
  CHECK(harness.ranges_of(3) > 0);
  CHECK(harness.output_of(2, 1) == expected);
  CHECK(harness.ranges_of(2) > 0);
}

TEST_CASE("bytes that follow a failed memfd come after its ranges", "[process]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.stdout_to_memfd = true;
  options.memfd_threshold = kMemfdThreshold;
  options.memfd_without_splice = true;
  options.test_memfd_size_limit = 100000;
  std::string expected = pattern_bytes(300000, 11);
  TempDir dir;
  std::string file = dir / "output";
  write_file(file, expected);
  // Bytes first, then the memfd until its writes fail, then bytes again;
  // nothing is delivered meanwhile.
  harness.with_table([&](ProcessTable& table) {
    table.start(1,
                shell("head -c 10000 " + file + "; sleep 0.1; tail -c +10001 " + file),
                options);
  });
  auto deadline = Clock::now() + std::chrono::seconds(20);
  bool running = true;
  while (running && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    harness.with_table([&](ProcessTable& table) { running = table.contains(1); });
  }
  REQUIRE_FALSE(running);
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  int notices = 0;
  for (const Record& record : harness.records()) notices += record.kind == RecordKind::notice;
  CHECK(notices == 1);
  CHECK(harness.ranges_of(1) > 0);
  std::string stream = harness.output_of(1, 1);
  CHECK(stream.size() == expected.size());
  CHECK(stream == expected);
}

namespace {

// Serves NEAR, a table without a loop, on this thread until PREDICATE holds
// or TIMEOUT passes; returns whether it held.
bool serve_until(ProcessTable& near, const std::function<bool()>& predicate,
                 std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto deadline = Clock::now() + timeout;
  std::vector<pollfd> fds;
  std::vector<std::pair<std::uint64_t, ProcessTable::Watch>> owners;
  while (!predicate()) {
    if (Clock::now() >= deadline) return false;
    fds.clear();
    owners.clear();
    near.watched(fds, owners, Clock::now(), Clock::duration::zero());
    poll(fds.data(), fds.size(), 10);
    near.serve(fds, owners);
  }
  return true;
}

// Hands child ID of NEAR to the engine's table of HARNESS.
void hand_to_engine(EngineHarness& harness, ProcessTable& near, std::uint64_t id) {
  auto handover = std::make_shared<std::unique_ptr<ProcessHandover>>(near.hand_over(id));
  REQUIRE(*handover);
  harness.with_table([&](ProcessTable& table) { table.adopt(id, std::move(*handover)); });
}

}  // namespace

TEST_CASE("a child handed from table to table mid-output keeps every byte, in order", "[process]") {
  EngineHarness harness;
  ProcessTable near(harness.engine(), nullptr, Engine::Wake::no);
  ProcessTable::Options options;
  Framing framing = GENERATE(Framing::none, Framing::lines);
  options.framing = framing;
  // Each line in two writes, so that a handover can fall inside a line.
  std::string expected;
  for (int i = 0; i < 3000; ++i) expected += "line " + std::to_string(i) + " end\n";
  near.start(1,
             shell("i=0; while [ $i -lt 3000 ]; do printf 'line %d ' $i; printf 'end\\n'; "
                   "i=$((i+1)); done; echo done >&2"),
             options);
  // Served here until some output came.
  REQUIRE(serve_until(near, [&] { return harness.engine().pending() > 0; }));
  hand_to_engine(harness, near, 1);
  CHECK(near.size() == 0);
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  CHECK(harness.output_of(1, 1) == expected);
  CHECK(harness.output_of(1, 2) == "done\n");
  CHECK(harness.exits_of(1) == 1);
  REQUIRE(harness.exit_of(1));
  CHECK(harness.exit_of(1)->data == "exited");
  if (framing == Framing::lines) {
    for (const auto& record : harness.records()) {
      if (record.kind == test::kOutputKind && record.code == 1)
        CHECK(record.data.back() == '\n');
    }
  }
}

TEST_CASE("a child reaped before its output ended is handed over with its exit status",
          "[process]") {
  EngineHarness harness;
  ProcessTable near(harness.engine(), nullptr, Engine::Wake::no);
  // The shell exits at once with status 3; a grandchild holds stdout open.
  near.start(1, shell("(sleep 0.3; echo late) & echo early; exit 3"), {});
  REQUIRE(serve_until(near, [&] {
    harness.wait_until([] { return true; }, std::chrono::milliseconds(0));
    return harness.output_of(1, 1) == "early\n";
  }));
  // Long enough for the pidfd to have fired and the shell to be reaped here.
  serve_until(
      near, [] { return false; }, std::chrono::milliseconds(100));
  hand_to_engine(harness, near, 1);
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  CHECK(harness.output_of(1, 1) == "early\nlate\n");
  CHECK(harness.exits_of(1) == 1);
  REQUIRE(harness.exit_of(1));
  CHECK(harness.exit_of(1)->data == "exited");
  CHECK(harness.exit_of(1)->code == 3);
}

TEST_CASE("a table without a loop runs a child to its end on the thread that polls it",
          "[process]") {
  EngineHarness harness;
  ProcessTable near(harness.engine(), nullptr, Engine::Wake::no);
  ProcessTable::Options options;
  options.stdout_to_memfd = true;
  options.memfd_threshold = 4096;
  near.start(1, shell("printf small; echo err >&2"), {});
  near.start(2, shell("head -c 100000 /dev/zero"), options);
  std::vector<Record> records;
  REQUIRE(serve_until(near, [&] {
    harness.take(records);
    int exits = 0;
    for (const auto& record : records) exits += record.kind == test::kExitKind;
    return exits == 2;
  }));
  CHECK(near.size() == 0);
  std::string out;
  std::string err;
  std::string zeros;
  for (const auto& record : records) {
    if (record.kind != test::kOutputKind) continue;
    if (record.id == 1 && record.code == 1) out += record.data;
    if (record.id == 1 && record.code == 2) err += record.data;
    if (record.id == 2 && record.code == 1) zeros += record.data;
  }
  CHECK(out == "small");
  CHECK(err == "err\n");
  CHECK(zeros == std::string(100000, '\0'));
  CHECK(harness.ranges_of(2) > 0);
}

TEST_CASE("a young child's exit alone is watched, and its output is read with it", "[process]") {
  EngineHarness harness;
  ProcessTable near(harness.engine(), nullptr, Engine::Wake::no);
  near.start(1, never_exiting(), {});
  near.start(2, shell("printf abc; echo def >&2"), {});
  std::vector<pollfd> fds;
  std::vector<std::pair<std::uint64_t, ProcessTable::Watch>> owners;
  auto now = Clock::now();
  if (kChildExitMechanism == ChildExitMechanism::waitpid) {
    // Without an exit descriptor there is no exit to watch: the output is
    // watched from the start, and each serve looks for the exit.
    CHECK(near.watched(fds, owners, now, std::chrono::hours(1)) == Clock::time_point::max());
    REQUIRE(owners.size() == 4);
    for (const auto& owner : owners) CHECK(owner.second != ProcessTable::Watch::exit);
    std::vector<Record> records;
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (std::none_of(records.begin(), records.end(),
                        [](const Record& r) { return r.kind == test::kExitKind; })) {
      REQUIRE(Clock::now() < deadline);
      poll(fds.data(), fds.size(), 10);
      near.serve(fds, owners);
      harness.take(records);
    }
    std::string out;
    for (const auto& record : records) {
      CHECK(record.id == 2);
      if (record.kind == test::kOutputKind && record.code == 1) out += record.data;
    }
    CHECK(out == "abc");
    pid_t pid = near.pid(1);
    near.remove(1);
    CHECK(is_gone(pid));
    return;
  }
  // Young: exits only, until the first comes of age.
  auto changes = near.watched(fds, owners, now, std::chrono::hours(1));
  CHECK(changes > now + std::chrono::minutes(59));
  CHECK(changes <= now + std::chrono::hours(1));
  REQUIRE(owners.size() == 2);
  for (const auto& owner : owners) CHECK(owner.second == ProcessTable::Watch::exit);
  // Of age: output too.
  std::vector<pollfd> all;
  std::vector<std::pair<std::uint64_t, ProcessTable::Watch>> all_owners;
  CHECK(near.watched(all, all_owners, now, Clock::duration::zero()) == Clock::time_point::max());
  CHECK(all_owners.size() == 6);
  // The one wake-up for child 2's exit brings its output and its end.
  int woken = 0;
  std::vector<Record> records;
  while (records.empty()) {
    REQUIRE(poll(fds.data(), fds.size(), 20000) > 0);
    ++woken;
    near.serve(fds, owners);
    harness.take(records);
  }
  CHECK(woken == 1);
  std::string out;
  std::string err;
  int exits = 0;
  for (const auto& record : records) {
    CHECK(record.id == 2);
    if (record.kind == test::kOutputKind) (record.code == 1 ? out : err) += record.data;
    exits += record.kind == test::kExitKind;
  }
  CHECK(out == "abc");
  CHECK(err == "def\n");
  CHECK(exits == 1);
  CHECK(near.size() == 1);
  pid_t pid = near.pid(1);
  near.remove(1);
  CHECK(is_gone(pid));
}

TEST_CASE("process table gives up a child whose output it cannot read, ending it with the reason",
          "[process]") {
  EngineHarness harness;
  harness.with_table([](ProcessTable& table) {
    ProcessTable::Options failing;
    failing.test_fail_first_read = true;
    table.start(1, shell("echo lost; exec sleep 1000"), failing);
  });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  // The child was killed: its output could no longer be delivered whole.
  // Its end says why, and nothing follows it.
  const Record* end = harness.exit_of(1);
  CHECK(end->kind == test::kErrorKind);
  CHECK(end->data.find("out of memory") != std::string::npos);
  CHECK(harness.exits_of(1) == 1);
  CHECK(harness.output_of(1, 1).empty());
  // The engine thread lives on and serves the next child.
  harness.with_table([](ProcessTable& table) { table.start(2, shell("echo fine"), {}); });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(2) > 0; }));
  CHECK(harness.output_of(2, 1) == "fine\n");
}

TEST_CASE("process table reads a child whatever first read size it is given", "[process]") {
  EngineHarness harness;
  harness.with_table([](ProcessTable& table) {
    ProcessTable::Options huge;
    // As from `read-process-output-max' bound to (expt 2 40).
    huge.initial_read_size = std::size_t{1} << 40;
    table.start(1, shell("head -c 300000 /dev/zero"), huge);
  });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  for (const auto& record : harness.records()) CHECK(record.kind != test::kErrorKind);
  CHECK(harness.output_of(1, 1) == std::string(300000, '\0'));
}

TEST_CASE("a table without a loop turns a failed read into the child's end and not an exception",
          "[process]") {
  EngineHarness harness;
  ProcessTable near(harness.engine(), nullptr, Engine::Wake::no);
  ProcessTable::Options failing;
  failing.test_fail_first_read = true;
  near.start(1, shell("echo lost"), failing);
  std::vector<Record> records;
  REQUIRE(serve_until(near, [&] {
    harness.take(records);
    for (const auto& record : records)
      if (record.kind == test::kErrorKind) return true;
    return false;
  }));
  CHECK(records.back().kind == test::kErrorKind);
  for (const auto& record : records) CHECK(record.kind != test::kExitKind);
}

TEST_CASE("a child that outruns Emacs waits on its pipe, its output within its backlog",
          "[process]") {
  EngineHarness harness;
  const std::size_t total = std::size_t{96} << 20;
  auto framing = GENERATE(Framing::none, Framing::lines);
  auto to_memfd = GENERATE(false, true);
  ProcessTable::Options options;
  options.framing = framing;
  options.stdout_to_memfd = to_memfd && framing == Framing::none;
  std::uint64_t backlog = std::uint64_t{8} << 20;
  ProcessOutput::Config config;
  config.backlog = backlog;
  options.output = std::make_shared<ProcessOutput>(config);
  std::shared_ptr<ProcessOutput> output = options.output;
  INFO("framing " << static_cast<int>(framing) << ", memfd " << options.stdout_to_memfd);
  harness.with_table([&](ProcessTable& table) {
    // Lines of 100 bytes, so that framing cuts them.
    table.start(1,
                shell("yes " + std::string(98, 'y') + " | head -c " + std::to_string(total)),
                options);
  });
  // Nobody delivers: the engine reads up to the backlog and stops there,
  // having read one read beyond it at most.
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (output->waiting() < backlog && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(output->waiting() >= backlog);
  // Without the bound the whole output would pile up within a second.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::uint64_t one_read = kDefaultMaxReadSize;
  CHECK(output->waiting() <= backlog + one_read);
  CHECK(output->overrun() <= one_read);
  // Delivering lets the child finish, every byte in order.
  std::size_t received = 0;
  bool intact = true;
  harness.on_record = [&](Record& record) {
    if (record.kind == test::kOutputKind && record.id == 1) {
      // Lines of 98 "y" and a newline.
      for (std::size_t at = 0; at < record.data.size(); ++at) {
        char want = (received + at) % 99 == 98 ? '\n' : 'y';
        if (record.data[at] != want) intact = false;
      }
      received += record.data.size();
    } else if (record.kind == test::kExitKind) {
      harness.records().push_back(std::move(record));
    }
  };
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }, std::chrono::seconds(60)));
  CHECK(received == total);
  CHECK(intact);
  CHECK(output->overrun() <= one_read);
}

TEST_CASE("a line longer than the backlog goes on in pieces and holds nothing up", "[process]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.framing = GENERATE(Framing::lines, Framing::lsp);
  ProcessOutput::Config config;
  config.backlog = std::uint64_t{1} << 20;
  options.output = std::make_shared<ProcessOutput>(config);
  std::shared_ptr<ProcessOutput> output = options.output;
  std::string body(std::size_t{6} << 20, 'x');
  std::string unit = options.framing == Framing::lines
                         ? body + "\n"
                         : "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  TempDir dir;
  std::string file = dir / "unit";
  write_file(file, unit + unit);
  harness.with_table([&](ProcessTable& table) { table.start(1, shell("cat " + file), options); });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }, std::chrono::seconds(60)));
  CHECK(harness.output_of(1, 1) == unit + unit);
  CHECK(output->overrun() <= kDefaultMaxReadSize);
  // The pieces of the first unit joined up to it: the second came whole
  // or in pieces after it, never mixed into it.
  std::size_t pieces = 0;
  for (const Record& record : harness.records()) pieces += record.kind == test::kOutputKind;
  CHECK(pieces > 2);
}

TEST_CASE("process table prints LSP bodies as Lisp and leaves a message cut in pieces as JSON",
          "[process][json]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.framing = Framing::lsp;
  auto style = std::make_shared<JsonLisp>();
  options.lisp_replies = style;
  ProcessOutput::Config config;
  config.backlog = std::uint64_t{1} << 20;
  options.output = std::make_shared<ProcessOutput>(config);
  auto message = [](const std::string& body) {
    return "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  auto lisp = [](const std::string& text) {
    std::string body = std::string(kLispBodyMarker) + text;
    return "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  // The second message is longer than the backlog: it goes on in pieces,
  // as JSON, and the messages after it are whole again.
  std::string big = "[\"" + std::string(std::size_t{3} << 20, 'x') + "\"]";
  TempDir dir;
  std::string file = dir / "messages";
  write_file(file, message("{\"id\":1}") + message(big) + message("{\"id\":2,\"ok\":true}") +
                       message("{\"id\":3,\"id\":3}"));
  harness.with_table([&](ProcessTable& table) { table.start(1, shell("cat " + file), options); });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }, std::chrono::seconds(60)));
  CHECK(harness.output_of(1, 1) == lisp("(:id 1)") + message(big) + lisp("(:id 2 :ok t)") +
                                       message("{\"id\":3,\"id\":3}"));
}

TEST_CASE("process table puts large bodies in files the output keeps within its backlog",
          "[process][json]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.framing = Framing::lsp;
  // Printed as Lisp, or left JSON.
  const bool lisp_replies = GENERATE(true, false);
  if (lisp_replies) options.lisp_replies = std::make_shared<JsonLisp>();
  options.lisp_file_threshold = 1000;
  ProcessOutput::Config config;
  config.backlog = std::uint64_t{4} << 20;
  options.output = std::make_shared<ProcessOutput>(config);
  std::shared_ptr<ProcessOutput> output = options.output;
  auto message = [](const std::string& body) {
    return "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  };
  // A small message, then six of 1.5 MB: more than the backlog holds as
  // files, so the reader stops until files are read.
  constexpr int kBig = 6;
  std::string big = "[\"" + std::string(std::size_t{1500000}, 'y') + "\"]";
  std::string contents = message("{\"id\":1}");
  for (int i = 0; i < kBig; ++i) contents += message(big);
  TempDir dir;
  std::string file = dir / "messages";
  write_file(file, contents);
  harness.with_table([&](ProcessTable& table) { table.start(1, shell("cat " + file), options); });
  std::string small = lisp_replies ? std::string(kLispBodyMarker) + "(:id 1)" : "{\"id\":1}";
  std::string first = "Content-Length: " + std::to_string(small.size()) + "\r\n\r\n" + small;
  auto stubs = [&first, lisp_replies](int count) {
    std::string all = first;
    for (int token = 1; token <= count; ++token) {
      std::string body = std::string(lisp_replies ? kLispFileMarker : kJsonFileMarker) + "1 " +
                         std::to_string(token) + "\n";
      all += "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
    }
    return all;
  };
  std::string lisp = lisp_replies ? std::string(kLispBodyMarker) + big : big;
  REQUIRE(harness.wait_until([&] { return output->throttled(); }, std::chrono::seconds(30)));
  CHECK(harness.exits_of(1) == 0);
  // The messages read so far reached the consumer as lines naming files,
  // whose bytes count towards the backlog.
  int filed = 0;
  while (filed < kBig && output->lisp_file(static_cast<std::uint64_t>(filed) + 1) >= 0) ++filed;
  REQUIRE(filed >= 2);
  CHECK(filed < kBig);
  REQUIRE(harness.wait_until([&] { return harness.output_of(1, 1) == stubs(filed); }));
  CHECK(output->waiting() >= static_cast<std::uint64_t>(filed) * lisp.size());
  // Each file holds a body, printed as Lisp or as it was.
  for (int token = 1; token <= filed; ++token) {
    int fd = output->lisp_file(static_cast<std::uint64_t>(token));
    REQUIRE(fd >= 0);
    std::string text(lisp.size() + 1, '\0');
    CHECK(pread(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(lisp.size()));
    text.resize(lisp.size());
    CHECK(text == lisp);
  }
  // Reading the last releases them all, and the reader resumes.
  harness.with_table([&](ProcessTable& table) {
    CHECK(output->release_lisp_files(static_cast<std::uint64_t>(filed)));
    CHECK(table.resume(1));
  });
  CHECK(output->lisp_file(1) == -1);
  CHECK(output->lisp_file(static_cast<std::uint64_t>(filed)) == -1);
  // The rest comes as the consumer reads its files.
  REQUIRE(harness.wait_until(
      [&] {
        harness.with_table([&](ProcessTable& table) {
          if (output->release_lisp_files(kBig)) table.resume(1);
        });
        return harness.exits_of(1) > 0;
      },
      std::chrono::seconds(60)));
  CHECK(harness.output_of(1, 1) == stubs(kBig));
  CHECK(output->waiting() == 0);
}

TEST_CASE("a child the engine cannot adopt is reported lost, with code -1, and reaped",
          "[process]") {
  EngineHarness harness;
  harness.with_table([](ProcessTable& table) { table.start(1, never_exiting(), {}); });
  Child second = spawn(never_exiting());
  pid_t second_pid = second.pid;
  // Id 1 is in use: the adoption fails, and its owner learns that the child
  // is gone.
  REQUIRE(
      post_adoption(harness.engine(), 1,
                    std::make_unique<ProcessHandover>(std::move(second), ProcessTable::Options{})));
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  CHECK(harness.exit_of(1)->data == "lost");
  CHECK(harness.exit_of(1)->code == -1);
  CHECK(is_gone(second_pid));
  harness.with_table([](ProcessTable& table) { CHECK(table.remove(1)); });
}

TEST_CASE("process table runs a process it did not start through named pipes", "[process]") {
  TempDir dir;
  NamedPipes pipes = open_named_pipes(dir.path());
  // The server, started elsewhere as Emacs starts a language server: it
  // connects itself to the pipes, answers one line as an LSP message, and
  // exits.
  Child server = spawn(shell("exec <'" + dir.path() + "/in' >'" + dir.path() +
                             "/out'; read -r line; "
                             "printf 'Content-Length: %d\\r\\n\\r\\n%s' ${#line} \"$line\""));
  EngineHarness harness;
  ProcessTable::Options options;
  options.framing = Framing::lsp;
  auto ends = std::make_shared<Child>();
  ends->stdout_fd = pipes.output.release();
  ends->stdin_fd = pipes.input.release();
  harness.with_table([ends, options](ProcessTable& table) {
    table.adopt(1, std::move(*ends), options);
    CHECK(table.pid(1) == -1);
    CHECK(table.write_stdin(1, "hello\n"));
  });
  REQUIRE(harness.wait_until([&] { return harness.output_of(1, 1) == "Content-Length: 5\r\n\r\nhello"; }));
  int status = 0;
  REQUIRE(waitpid(server.pid, &status, 0) == server.pid);
  server.pid = -1;
  // The server is gone, but the keeper holds the output open: no end yet.
  CHECK_FALSE(harness.wait_until([&] { return harness.exits_of(1) > 0; },
                                 std::chrono::milliseconds(100)));
  pipes.output_keeper.reset();
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  const Record& last = harness.records().back();
  CHECK(last.kind == test::kExitKind);
  CHECK(last.data == "exited");
  CHECK(last.code == 0);
}
