// Tests of the engine thread: command queue, outbox, wake byte, lifecycle.
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "core/engine.h"

using fastrevert::Engine;
using fastrevert::Record;
using fastrevert::RecordKind;

namespace {

using Clock = std::chrono::steady_clock;

// A pipe standing in for Emacs's channel: the engine owns the write end.
struct WakePipe {
  int read_fd = -1;
  int write_fd = -1;
  WakePipe() {
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0);
    read_fd = fds[0];
    write_fd = fds[1];
  }
  ~WakePipe() { close(read_fd); }
  // Reads and counts every wake byte currently in the pipe.
  std::size_t take_bytes() const {
    std::size_t total = 0;
    char buffer[4096];
    ssize_t n;
    while ((n = read(read_fd, buffer, sizeof buffer)) > 0) total += static_cast<std::size_t>(n);
    return total;
  }
  // Blocks until a wake byte is readable or the deadline passes.
  bool wait_readable(std::chrono::milliseconds timeout) const {
    fd_set set;
    FD_ZERO(&set);
    FD_SET(read_fd, &set);
    timeval tv{static_cast<time_t>(timeout.count() / 1000),
               static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    return select(read_fd + 1, &set, nullptr, nullptr, &tv) == 1;
  }
};

// Runs FN on the engine thread and waits for it to finish.
template <typename Fn>
void run_on_engine(Engine& engine, Fn fn) {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  REQUIRE(engine.post([&](Engine& e) {
    fn(e);
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
    done_cv.notify_one();
  }));
  std::unique_lock<std::mutex> lock(mutex);
  REQUIRE(done_cv.wait_for(lock, std::chrono::seconds(10), [&] { return done; }));
}

std::set<int> open_fds() {
  std::set<int> fds;
  DIR* dir = opendir("/proc/self/fd");
  REQUIRE(dir != nullptr);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    int fd = std::atoi(entry->d_name);
    if (fd != dirfd(dir)) fds.insert(fd);
  }
  closedir(dir);
  return fds;
}

}  // namespace

TEST_CASE("commands run on the engine thread in posting order", "[engine]") {
  WakePipe wake;
  Engine engine(wake.write_fd);
  std::vector<int> order;
  std::thread::id engine_thread;
  for (int i = 0; i < 1000; ++i) {
    REQUIRE(engine.post([&order, i](Engine&) { order.push_back(i); }));
  }
  run_on_engine(engine, [&](Engine&) { engine_thread = std::this_thread::get_id(); });
  REQUIRE(engine_thread != std::this_thread::get_id());
  REQUIRE(order.size() == 1000);
  for (int i = 0; i < 1000; ++i) REQUIRE(order[static_cast<std::size_t>(i)] == i);
}

TEST_CASE("many records emitted while undrained cost one wake byte", "[engine]") {
  WakePipe wake;
  Engine engine(wake.write_fd);
  run_on_engine(engine, [](Engine& e) {
    for (int i = 0; i < 10000; ++i)
      e.emit(Record{RecordKind::echo, static_cast<uint64_t>(i), 0, "x"});
  });
  REQUIRE(wake.wait_readable(std::chrono::seconds(5)));
  REQUIRE(wake.take_bytes() == 1);
  auto records = engine.drain();
  REQUIRE(records.size() == 10000);
  for (std::size_t i = 0; i < records.size(); ++i) REQUIRE(records[i].id == i);

  // After a drain the next record wakes again, once.
  run_on_engine(engine, [](Engine& e) {
    e.emit(Record{RecordKind::echo, 1, 0, "a"});
    e.emit(Record{RecordKind::echo, 2, 0, "b"});
  });
  REQUIRE(wake.wait_readable(std::chrono::seconds(5)));
  REQUIRE(wake.take_bytes() == 1);
  REQUIRE(engine.drain().size() == 2);
  REQUIRE(engine.stats().wakes.load() == 2);
}

TEST_CASE("a full wake pipe neither blocks the engine nor loses records", "[engine]") {
  WakePipe wake;
  // Fill the pipe so that any further write would block or fail.
  std::vector<char> filler(1 << 16, 'f');
  while (write(wake.write_fd, filler.data(), filler.size()) > 0) {
  }
  REQUIRE(errno == EAGAIN);
  Engine engine(wake.write_fd);
  run_on_engine(engine, [](Engine& e) {
    for (int i = 0; i < 100; ++i)
      e.emit(Record{RecordKind::echo, static_cast<uint64_t>(i), 0, "full"});
  });
  REQUIRE(engine.pending() == 100);
  REQUIRE(wake.take_bytes() > 0);
  REQUIRE(engine.drain().size() == 100);

  // The reader has emptied the pipe and drained, so the next record wakes it.
  run_on_engine(engine, [](Engine& e) { e.emit(Record{RecordKind::echo, 7, 0, "again"}); });
  REQUIRE(wake.wait_readable(std::chrono::seconds(5)));
  REQUIRE(wake.take_bytes() == 1);
  auto records = engine.drain();
  REQUIRE(records.size() == 1);
  REQUIRE(records.front().data == "again");
}

TEST_CASE("unread records come back first and in order", "[engine]") {
  WakePipe wake;
  Engine engine(wake.write_fd);
  run_on_engine(engine, [](Engine& e) {
    for (uint64_t i = 0; i < 4; ++i) e.emit(Record{RecordKind::echo, i, 0, ""});
  });
  auto records = engine.drain();
  records.pop_front();
  run_on_engine(engine, [](Engine& e) { e.emit(Record{RecordKind::echo, 4, 0, ""}); });
  engine.unread(std::move(records));
  auto again = engine.drain();
  REQUIRE(again.size() == 4);
  for (uint64_t i = 0; i < 4; ++i) REQUIRE(again[i].id == i + 1);
}

TEST_CASE("the engine thread blocks every signal", "[engine]") {
  WakePipe wake;
  Engine engine(wake.write_fd);
  sigset_t engine_mask;
  sigemptyset(&engine_mask);
  run_on_engine(engine, [&](Engine&) { pthread_sigmask(SIG_BLOCK, nullptr, &engine_mask); });
  for (int sig : {SIGINT, SIGTERM, SIGCHLD, SIGPIPE, SIGIO, SIGALRM, SIGUSR1, SIGWINCH}) {
    INFO("signal " << sig);
    REQUIRE(sigismember(&engine_mask, sig) == 1);
  }
  // The caller's own mask is left as it was.
  sigset_t caller_mask;
  pthread_sigmask(SIG_BLOCK, nullptr, &caller_mask);
  REQUIRE(sigismember(&caller_mask, SIGUSR1) == 0);
}

TEST_CASE("every descriptor the engine opens is close-on-exec", "[engine]") {
  auto before = open_fds();
  WakePipe wake;
  Engine engine(wake.write_fd);
  run_on_engine(engine, [](Engine&) {});
  for (int fd : open_fds()) {
    if (before.count(fd)) continue;
    INFO("fd " << fd);
    int flags = fcntl(fd, F_GETFD);
    REQUIRE(flags >= 0);
    REQUIRE((flags & FD_CLOEXEC) != 0);
  }
}

TEST_CASE("starting and stopping the engine 100 times leaks no descriptor", "[engine]") {
  {
    // libuv opens a process-wide pipe with its first loop and keeps it; open
    // it before counting.
    WakePipe wake;
    Engine first(wake.write_fd);
  }
  auto before = open_fds();
  for (int round = 0; round < 100; ++round) {
    WakePipe wake;
    auto engine = std::make_unique<Engine>(wake.write_fd);
    int ran = 0;
    run_on_engine(*engine, [&](Engine&) { ++ran; });
    REQUIRE(ran == 1);
    engine->stop();
    REQUIRE_FALSE(engine->running());
    engine->stop();  // Stopping twice is harmless.
  }
  REQUIRE(open_fds() == before);
}

TEST_CASE("commands posted before stop run, and commands after stop are refused", "[engine]") {
  WakePipe wake;
  Engine engine(wake.write_fd);
  int ran = 0;
  for (int i = 0; i < 50; ++i) REQUIRE(engine.post([&ran](Engine&) { ++ran; }));
  engine.stop();
  REQUIRE(ran == 50);
  REQUIRE_FALSE(engine.post([&ran](Engine&) { ++ran; }));
  REQUIRE(ran == 50);
}

TEST_CASE("an exception thrown by a command becomes a notice record", "[engine]") {
  WakePipe wake;
  Engine engine(wake.write_fd);
  REQUIRE(engine.post([](Engine&) { throw std::runtime_error("boom"); }));
  REQUIRE(wake.wait_readable(std::chrono::seconds(5)));
  auto records = engine.drain();
  REQUIRE(records.size() == 1);
  REQUIRE(records.front().kind == RecordKind::notice);
  REQUIRE(records.front().data.find("boom") != std::string::npos);
}

TEST_CASE("wait_for_records returns as soon as a record is emitted, or at the timeout",
          "[engine]") {
  WakePipe pipe;
  Engine engine(pipe.write_fd);
  // Nothing emitted: the wait lasts its whole timeout and reports nothing.
  auto start = Clock::now();
  CHECK_FALSE(engine.wait_for_records(std::chrono::milliseconds(30)));
  CHECK(Clock::now() - start >= std::chrono::milliseconds(30));

  // A record emitted on the engine thread while the main thread waits ends
  // the wait well before its timeout.
  REQUIRE(engine.post([](Engine& e) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    e.emit(Record{RecordKind::echo, 7, 0, "late"});
  }));
  start = Clock::now();
  CHECK(engine.wait_for_records(std::chrono::seconds(30)));
  CHECK(Clock::now() - start < std::chrono::seconds(10));

  // A record already waiting, drained or not, is seen at once.
  CHECK(engine.wait_for_records(std::chrono::milliseconds(0)));
  std::deque<Record> records = engine.drain();
  REQUIRE(records.size() == 1);
  CHECK(records.front().data == "late");
  CHECK_FALSE(engine.wait_for_records(std::chrono::milliseconds(0)));
}

TEST_CASE("a drain nested in another goes on from the next record in order", "[engine]") {
  WakePipe wake;
  Engine engine(wake.write_fd);
  run_on_engine(engine, [](Engine& e) {
    for (std::uint64_t i = 0; i < 6; ++i) e.emit(Record{RecordKind::echo, i, 0, ""});
  });
  // The consumer of record 1 drains again, as a filter that waits for more
  // output does; the outer drain then finds what the inner one left.
  std::vector<std::uint64_t> handled;
  std::uint64_t outer_end = engine.begin_drain();
  Record record;
  while (engine.take(record, outer_end)) {
    handled.push_back(record.id);
    if (record.id == 1) {
      std::uint64_t inner_end = engine.begin_drain();
      Record inner;
      for (int i = 0; i < 2 && engine.take(inner, inner_end); ++i) handled.push_back(inner.id);
    }
  }
  REQUIRE(handled == std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5});
}

TEST_CASE("a drain ends with the records that waited when it began", "[engine]") {
  WakePipe wake;
  Engine engine(wake.write_fd);
  run_on_engine(engine, [](Engine& e) { e.emit(Record{RecordKind::echo, 1, 0, ""}); });
  std::uint64_t end = engine.begin_drain();
  Record record;
  REQUIRE(engine.take(record, end));
  // A busy producer keeps emitting while the records are handled.
  run_on_engine(engine, [](Engine& e) { e.emit(Record{RecordKind::echo, 2, 0, ""}); });
  REQUIRE_FALSE(engine.take(record, end));
  // The next drain takes it, and was woken for it.
  REQUIRE(wake.take_bytes() >= 1);
  REQUIRE(engine.take(record, engine.begin_drain()));
  REQUIRE(record.id == 2);
}

TEST_CASE("held wakes write no byte and the last release writes one for waiting records",
          "[engine]") {
  WakePipe wake;
  Engine engine(wake.write_fd);
  engine.hold_wakes(true);
  engine.hold_wakes(true);
  run_on_engine(engine, [](Engine& e) { e.emit(Record{RecordKind::echo, 1, 0, ""}); });
  REQUIRE(engine.wait_for_records(std::chrono::milliseconds(0)));
  REQUIRE(wake.take_bytes() == 0);
  engine.hold_wakes(false);
  REQUIRE(wake.take_bytes() == 0);
  engine.hold_wakes(false);
  REQUIRE(wake.take_bytes() == 1);
}

TEST_CASE("a new wake descriptor carries the engine over with waiting records first", "[engine]") {
  WakePipe first;
  WakePipe second;
  Engine engine(first.write_fd);
  run_on_engine(engine, [](Engine& e) { e.emit(Record{RecordKind::echo, 1, 0, "kept"}); });
  REQUIRE(first.take_bytes() == 1);
  // The consumer's pipe is gone: the record waits, and its wake byte went
  // to a pipe nobody reads.
  engine.set_wake_fd(second.write_fd);
  REQUIRE(second.take_bytes() == 1);
  auto records = engine.drain();
  REQUIRE(records.size() == 1);
  REQUIRE(records.front().data == "kept");
  run_on_engine(engine, [](Engine& e) { e.emit(Record{RecordKind::echo, 2, 0, ""}); });
  REQUIRE(second.take_bytes() == 1);
  REQUIRE(first.take_bytes() == 0);
  // The first write end was closed: its reader sees end of file.
  char byte;
  REQUIRE(read(first.read_fd, &byte, 1) == 0);
}

TEST_CASE("no exception leaves a command whatever it throws", "[engine]") {
  WakePipe wake;
  Engine engine(wake.write_fd);
  REQUIRE(engine.post([](Engine&) { throw std::bad_alloc(); }));
  REQUIRE(engine.post([](Engine&) { throw 42; }));
  run_on_engine(engine, [](Engine& e) { e.emit(Record{RecordKind::echo, 9, 0, ""}); });
  auto records = engine.drain();
  REQUIRE(records.size() == 3);
  REQUIRE(records[0].kind == RecordKind::notice);
  REQUIRE(records[1].kind == RecordKind::notice);
  REQUIRE(records[2].id == 9);
}

TEST_CASE("stopping from a frame that holds the engine leaves it usable until released",
          "[engine]") {
  WakePipe wake;
  auto engine = std::make_shared<Engine>(wake.write_fd);
  std::shared_ptr<Engine> held = engine;
  engine->stop();
  engine.reset();
  // The frame that held it can still look and take, and finds it stopped.
  REQUIRE_FALSE(held->running());
  Record record;
  REQUIRE_FALSE(held->take(record, held->begin_drain()));
  REQUIRE_FALSE(held->wait_for_records(std::chrono::milliseconds(10)));
}

TEST_CASE("every record kind has the name Lisp knows it by, in the order of the enum", "[engine]") {
  // The order of `fastrevert--record-kinds' in lisp/fastrevert-engine.el.
  const char* const lisp_names[] = {"echo",         "notice",        "file-changed",
                                    "file-watched", "process-ready", "vc-changed"};
  for (std::size_t i = 0; i < std::size(lisp_names); ++i) {
    CHECK(std::string(fastrevert::record_kind_name(static_cast<RecordKind>(i))) == lisp_names[i]);
  }
}

TEST_CASE("the stats table names every counter once and reads the counter it names", "[engine]") {
  using fastrevert::kStatsCounters;
  using fastrevert::Stats;
  // A counter added to Stats but not to the table would be missing from
  // `fastrevert-stats'.
  CHECK(kStatsCounters.size() * sizeof(std::atomic<std::uint64_t>) == sizeof(Stats));
  for (std::size_t i = 0; i < kStatsCounters.size(); ++i) {
    for (std::size_t j = i + 1; j < kStatsCounters.size(); ++j) {
      CHECK(std::string(kStatsCounters[i].name) != kStatsCounters[j].name);
      CHECK(kStatsCounters[i].counter != kStatsCounters[j].counter);
    }
  }
  Stats stats;
  stats.watches = 7;
  stats.drain_ns = 9;
  for (const auto& entry : kStatsCounters) {
    std::string name = entry.name;
    std::uint64_t expected = name == "watches" ? 7 : name == "drain-ns" ? 9 : 0;
    CHECK((stats.*entry.counter).load() == expected);
  }
}

TEST_CASE("only the outermost drain that handled a record counts its time", "[engine]") {
  WakePipe wake;
  Engine engine(wake.write_fd);
  const auto& drain_ns = engine.stats().drain_ns;
  { fastrevert::DrainTimer idle(engine); }
  CHECK(drain_ns.load() == 0);
  {
    fastrevert::DrainTimer outer(engine);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    {
      fastrevert::DrainTimer nested(engine);
      nested.handled();
    }
    // The nested drain's time is inside the outer one's: not counted twice.
    CHECK(drain_ns.load() == 0);
    outer.handled();
  }
  CHECK(drain_ns.load() >= 2'000'000);
  // The depth went back to zero: the next drain is outermost again.
  auto before = drain_ns.load();
  {
    fastrevert::DrainTimer next(engine);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    next.handled();
  }
  CHECK(drain_ns.load() >= before + 1'000'000);
}

TEST_CASE("a wait that asks about quitting ends at a record, a quit or its timeout", "[engine]") {
  WakePipe wake;
  Engine engine(wake.write_fd);
  auto never = [] { return false; };
  // A record that waits already ends it at once.
  engine.emit(Record{RecordKind::echo, 1, 0, "x"});
  CHECK(engine.wait_for_records(std::chrono::seconds(30), never));
  engine.drain();
  // A quit ends it within a slice, long before its timeout.
  int asked = 0;
  auto start = Clock::now();
  CHECK_FALSE(engine.wait_for_records(std::chrono::seconds(30), [&] { return ++asked == 3; }));
  CHECK(asked == 3);
  CHECK(Clock::now() - start < std::chrono::seconds(20));
  // Without either, it lasts its timeout.
  start = Clock::now();
  CHECK_FALSE(engine.wait_for_records(std::chrono::milliseconds(50), never));
  CHECK(Clock::now() - start >= std::chrono::milliseconds(50));
}
