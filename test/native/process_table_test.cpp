// Tests of the process table through a real Engine: records, ordering, exit
// statuses, stdin, signals, scale and shutdown.
#include "core/process_table.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
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
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "core/child_exit.h"
#include "core/engine.h"
#include "core/errors.h"
#include "core/handoff.h"
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
  CHECK(last.kind == RecordKind::process_exit);
  CHECK(last.id == 1);
  CHECK(last.data == "exited");
  CHECK(last.code == 3);
  // Nothing more arrives for it.
  harness.wait_until([] { return false; }, std::chrono::milliseconds(100));
  CHECK(harness.exits_of(1) == 1);
  CHECK(harness.records().back().kind == RecordKind::process_exit);
  harness.with_table([](ProcessTable& table) { CHECK_FALSE(table.contains(1)); });
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
    if (record.kind == RecordKind::process_output) {
      if (offset + record.data.size() > size ||
          input->compare(offset, record.data.size(), record.data) != 0) {
        intact = false;
      }
      offset += record.data.size();
    } else if (record.kind == RecordKind::process_exit) {
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
  CHECK(harness.records().back().kind == RecordKind::process_exit);
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
    if (record.kind == RecordKind::process_output) {
      CHECK(statuses.count(record.id) == 0);  // No output after the exit.
      outputs[record.id] += record.data;
    } else if (record.kind == RecordKind::process_exit) {
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
    if (record.kind == RecordKind::process_output) chunks.push_back(record.data);
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
    if (record.kind == RecordKind::process_output && record.id == 1) chunks.push_back(record.data);
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
    if (record.kind == RecordKind::process_output && record.code == 2) {
      CHECK(record.data == "warning\n");
    }
  }
  CHECK(harness.output_of(1, 1) == "partial");
}

namespace {

// The whole contents of the file behind FD.
std::string file_contents(int fd) {
  std::string bytes;
  char buffer[65536];
  off_t offset = 0;
  for (;;) {
    ssize_t got = pread(fd, buffer, sizeof buffer, offset);
    if (got <= 0) break;
    bytes.append(buffer, static_cast<std::size_t>(got));
    offset += got;
  }
  return bytes;
}

// The descriptors of the memfds handed over for ID, in order; each is the
// test's to close.
std::vector<int> memfds_of(const std::vector<Record>& records, std::uint64_t id) {
  std::vector<int> fds;
  for (const auto& record : records) {
    if (record.kind == RecordKind::process_output && record.id == id &&
        record.code == ProcessTable::kStdoutMemfdCode)
      fds.push_back(std::stoi(record.data));
  }
  return fds;
}

// The number of descriptors open in this process.
int open_descriptors() {
  int count = 0;
  for (int fd = 0; fd < 4096; ++fd) count += fcntl(fd, F_GETFD) != -1;
  return count;
}

// The (end, tail) entries of ID's range records, in order.
std::vector<std::pair<std::uint64_t, std::string>> range_entries(const std::vector<Record>& records,
                                                                 std::uint64_t id) {
  std::vector<std::pair<std::uint64_t, std::string>> entries;
  for (const auto& record : records) {
    if (record.kind != RecordKind::process_output || record.id != id ||
        record.code != ProcessTable::kStdoutRangeCode)
      continue;
    REQUIRE(record.data.size() % ProcessTable::kRangeEntrySize == 0);
    for (std::size_t at = 0; at < record.data.size(); at += ProcessTable::kRangeEntrySize) {
      std::uint64_t end = 0;
      for (int i = 0; i < 8; ++i)
        end |= static_cast<std::uint64_t>(static_cast<unsigned char>(record.data[at + i]))
               << (8 * i);
      entries.emplace_back(end, record.data.substr(at + 8, 4));
    }
  }
  return entries;
}

}  // namespace

TEST_CASE("process table writes stdout to a memfd and reports ranges of it", "[process]") {
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
  CHECK(harness.output_of(1, 1).empty());
  CHECK(harness.output_of(1, 2) == "err\n");
  std::vector<int> memfds = memfds_of(harness.records(), 1);
  REQUIRE(memfds.size() == 1);
  CHECK(file_contents(memfds[0]) == expected);
  close(memfds[0]);
  auto entries = range_entries(harness.records(), 1);
  REQUIRE_FALSE(entries.empty());
  for (std::size_t i = 1; i < entries.size(); ++i) CHECK(entries[i - 1].first < entries[i].first);
  CHECK(entries.back().first == expected.size());
  CHECK(entries.back().second == expected.substr(expected.size() - 4));
  // Without a memfd, nothing changes.
  CHECK(harness.output_of(2, 1) == "ab");
  CHECK(memfds_of(harness.records(), 2).empty());
  CHECK(range_entries(harness.records(), 2).empty());
}

TEST_CASE("process table pads a short memfd tail and closes its memfd on every path", "[process]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.stdout_to_memfd = true;
  {
    int before = open_descriptors();
    harness.with_table([&](ProcessTable& table) { table.start(1, shell("printf ab"), options); });
    REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
    auto entries = range_entries(harness.records(), 1);
    REQUIRE(entries.size() == 1);
    CHECK(entries[0].first == 2);
    CHECK(entries[0].second == std::string("\0\0ab", 4));
    std::vector<int> memfds = memfds_of(harness.records(), 1);
    REQUIRE(memfds.size() == 1);
    CHECK(file_contents(memfds[0]) == "ab");
    // The table closes its own descriptors as the child finishes: only the
    // consumer's is left.
    CHECK(harness.wait_until([&] { return open_descriptors() == before + 1; }));
    close(memfds[0]);
  }
  {
    // A removal while the child runs, after the memfd took over.
    int before = open_descriptors();
    harness.with_table(
        [&](ProcessTable& table) { table.start(3, shell("printf x; exec sleep 600"), options); });
    REQUIRE(harness.wait_until([&] { return !range_entries(harness.records(), 3).empty(); }));
    harness.with_table([&](ProcessTable& table) { table.remove(3); });
    std::vector<int> memfds = memfds_of(harness.records(), 3);
    REQUIRE(memfds.size() == 1);
    CHECK(harness.wait_until([&] { return open_descriptors() == before + 1; }));
    close(memfds[0]);
  }
}

TEST_CASE("process table sends a small output as strings and the rest through the memfd",
          "[process]") {
  EngineHarness harness;
  ProcessTable::Options options;
  options.stdout_to_memfd = true;
  options.memfd_threshold = 1000;
  // Below the threshold: strings only, and no memfd is made.
  harness.with_table([&](ProcessTable& table) { table.start(1, shell("printf abc"), options); });
  // Past it: what came before as strings, the rest in the memfd, in order;
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
  CHECK(memfds_of(harness.records(), 1).empty());
  // One burst past the threshold: all of it through the memfd.
  CHECK(harness.output_of(3, 1).empty());
  std::vector<int> burst = memfds_of(harness.records(), 3);
  REQUIRE(burst.size() == 1);
  CHECK(file_contents(burst[0]) == expected);
  close(burst[0]);
  std::string strings = harness.output_of(2, 1);
  CHECK(strings == expected.substr(0, 600));
  std::vector<int> memfds = memfds_of(harness.records(), 2);
  REQUIRE(memfds.size() == 1);
  CHECK(strings + file_contents(memfds[0]) == expected);
  auto entries = range_entries(harness.records(), 2);
  REQUIRE_FALSE(entries.empty());
  CHECK(entries.back().first == expected.size() - strings.size());
  // The hand-over comes after the last string and before the first range.
  std::size_t last_string = 0;
  std::size_t handover = 0;
  std::size_t first_range = 0;
  for (std::size_t i = 0; i < harness.records().size(); ++i) {
    const Record& record = harness.records()[i];
    if (record.id != 2 || record.kind != RecordKind::process_output) continue;
    if (record.code == 1) last_string = i;
    if (record.code == ProcessTable::kStdoutMemfdCode) handover = i;
    if (record.code == ProcessTable::kStdoutRangeCode && first_range == 0) first_range = i;
  }
  CHECK(last_string < handover);
  CHECK(handover < first_range);
  close(memfds[0]);
}

TEST_CASE("strings that follow a failed memfd come after its ranges, not in a string before them",
          "[process]") {
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
  // A string record first, then the memfd until its writes fail, then
  // strings again; nothing is drained meanwhile, so the first string
  // record is still there to be extended.
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
  // The stream as a consumer rebuilds it: strings as they come, and the
  // memfd up to where each range record says.
  std::string stream;
  int memfd = -1;
  std::uint64_t consumed = 0;
  int notices = 0;
  for (const Record& record : harness.records()) {
    if (record.kind == RecordKind::notice) ++notices;
    if (record.kind != RecordKind::process_output || record.id != 1) continue;
    if (record.code == static_cast<int>(OutputCode::stdout_bytes)) {
      stream += record.data;
    } else if (record.code == ProcessTable::kStdoutMemfdCode) {
      memfd = std::stoi(record.data);
    } else if (record.code == ProcessTable::kStdoutRangeCode) {
      REQUIRE(memfd >= 0);
      std::uint64_t end = range_entries({record}, 1).back().first;
      stream += file_contents(memfd).substr(consumed, end - consumed);
      consumed = end;
    }
  }
  CHECK(notices == 1);
  CHECK(consumed > 0);
  CHECK(consumed <= 100000);
  CHECK(stream.size() == expected.size());
  CHECK(stream == expected);
  if (memfd >= 0) close(memfd);
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
      if (record.kind == RecordKind::process_output && record.code == 1)
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
    for (auto& record : harness.engine().drain()) records.push_back(std::move(record));
    int exits = 0;
    for (const auto& record : records) exits += record.kind == RecordKind::process_exit;
    return exits == 2;
  }));
  CHECK(near.size() == 0);
  std::string out;
  std::string err;
  std::uint64_t in_memfd = 0;
  for (const auto& record : records) {
    if (record.kind != RecordKind::process_output) continue;
    if (record.id == 1 && record.code == 1) out += record.data;
    if (record.id == 1 && record.code == 2) err += record.data;
    if (record.id == 2 && record.code == ProcessTable::kStdoutMemfdCode)
      close(std::stoi(record.data));
    if (record.id == 2 && record.code == ProcessTable::kStdoutRangeCode) {
      for (int i = 0; i < 8; ++i)
        in_memfd = (in_memfd & ~(0xffull << (8 * i))) |
                   static_cast<std::uint64_t>(static_cast<unsigned char>(
                       record.data[record.data.size() - ProcessTable::kRangeEntrySize + i]))
                       << (8 * i);
    }
  }
  CHECK(out == "small");
  CHECK(err == "err\n");
  CHECK(in_memfd > 0);
  CHECK(in_memfd <= 100000);
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
                        [](const Record& r) { return r.kind == RecordKind::process_exit; })) {
      REQUIRE(Clock::now() < deadline);
      poll(fds.data(), fds.size(), 10);
      near.serve(fds, owners);
      for (auto& record : harness.engine().drain()) records.push_back(std::move(record));
    }
    std::string out;
    for (const auto& record : records) {
      CHECK(record.id == 2);
      if (record.kind == RecordKind::process_output && record.code == 1) out += record.data;
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
    for (auto& record : harness.engine().drain()) records.push_back(std::move(record));
  }
  CHECK(woken == 1);
  std::string out;
  std::string err;
  int exits = 0;
  for (const auto& record : records) {
    CHECK(record.id == 2);
    if (record.kind == RecordKind::process_output) (record.code == 1 ? out : err) += record.data;
    exits += record.kind == RecordKind::process_exit;
  }
  CHECK(out == "abc");
  CHECK(err == "def\n");
  CHECK(exits == 1);
  CHECK(near.size() == 1);
  pid_t pid = near.pid(1);
  near.remove(1);
  CHECK(is_gone(pid));
}

TEST_CASE(
    "process table gives up a child whose output it cannot read with an error record "
    "before its exit",
    "[process]") {
  EngineHarness harness;
  harness.with_table([](ProcessTable& table) {
    ProcessTable::Options failing;
    failing.test_fail_first_read = true;
    table.start(1, shell("echo lost; exec sleep 1000"), failing);
  });
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }));
  REQUIRE(harness.records().front().kind == RecordKind::process_error);
  CHECK(harness.records().front().id == 1);
  // The child was killed: its output could no longer be delivered whole.
  const Record* exit = harness.exit_of(1);
  CHECK(exit->data == "signaled");
  CHECK(exit->code == SIGKILL);
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
  for (const auto& record : harness.records()) CHECK(record.kind != RecordKind::process_error);
  CHECK(harness.output_of(1, 1) == std::string(300000, '\0'));
}

TEST_CASE("a table without a loop turns a failed read into an error record and not an exception",
          "[process]") {
  EngineHarness harness;
  ProcessTable near(harness.engine(), nullptr, Engine::Wake::no);
  ProcessTable::Options failing;
  failing.test_fail_first_read = true;
  near.start(1, shell("echo lost"), failing);
  std::vector<Record> records;
  REQUIRE(serve_until(near, [&] {
    for (auto& record : harness.engine().drain()) records.push_back(std::move(record));
    for (const auto& record : records)
      if (record.kind == RecordKind::process_exit) return true;
    return false;
  }));
  REQUIRE(records.size() >= 2);
  CHECK(records.front().kind == RecordKind::process_error);
  CHECK(records.back().kind == RecordKind::process_exit);
}

TEST_CASE("a child that outruns Emacs waits on its pipe and its undrained output stays bounded",
          "[process]") {
  EngineHarness harness;
  const std::size_t total = std::size_t{96} << 20;
  harness.with_table([&](ProcessTable& table) {
    table.start(1, shell("head -c " + std::to_string(total) + " /dev/zero"), {});
  });
  Engine& engine = harness.engine();
  // Nobody drains: the engine reads up to its limit and stops there.
  auto deadline = Clock::now() + std::chrono::seconds(20);
  while (engine.undrained_bytes() < (std::size_t{16} << 20) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(engine.undrained_bytes() >= (std::size_t{16} << 20));
  // Without the limit the whole output would pile up within a second.
  deadline = Clock::now() + std::chrono::seconds(2);
  while (engine.undrained_bytes() <= (std::size_t{24} << 20) && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(engine.undrained_bytes() <= (std::size_t{24} << 20));
  // Taking the output lets the child finish, every byte in order.
  std::size_t received = 0;
  bool zeros = true;
  harness.on_record = [&](Record& record) {
    if (record.kind == RecordKind::process_output && record.id == 1) {
      received += record.data.size();
      zeros = zeros && record.data.find_first_not_of('\0') == std::string::npos;
    } else if (record.kind == RecordKind::process_exit) {
      harness.records().push_back(std::move(record));
    }
  };
  REQUIRE(harness.wait_until([&] { return harness.exits_of(1) > 0; }, std::chrono::seconds(60)));
  CHECK(received == total);
  CHECK(zeros);
}

TEST_CASE("a drain callback runs on the engine thread once the outbox is taken down", "[engine]") {
  EngineHarness harness;
  Engine& engine = harness.engine();
  std::atomic<int> called{0};
  harness.with_table([&](ProcessTable&) {
    engine.emit(Record{RecordKind::echo, 1, 0, std::string(1000, 'x')});
    engine.when_drained(10, [&called](Engine&) { called.fetch_add(1); });
  });
  CHECK(called.load() == 0);
  Record record;
  REQUIRE(engine.take(record, engine.begin_drain()));
  auto deadline = Clock::now() + std::chrono::seconds(10);
  while (called.load() == 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(called.load() == 1);
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
