// Tests of the file watcher through a real Engine and real files in a fresh
// temporary directory.  Every wait is a condition with a deadline; a short
// back-off between checks is the only sleeping done.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "core/engine.h"
#include "core/platform.h"
#include "core/watcher.h"
#include "support.h"
#include "watcher_harness.h"

using fastrevert::Engine;
using fastrevert::Record;
using fastrevert::RecordKind;
using fastrevert::Watcher;
using fastrevert::watcher_test_hooks;
using fastrevert::WatchMode;
using namespace std::chrono_literals;

using fastrevert::test::contains_text;
using fastrevert::test::TempDir;
using fastrevert::test::append_file;
using fastrevert::test::Clock;
using fastrevert::test::create_file;
using fastrevert::test::Harness;
using fastrevert::test::HookReset;
using fastrevert::test::kReportTimeout;
using fastrevert::test::make_hard_linked_file;
using fastrevert::test::open_fd_count;
using fastrevert::test::overwrite_in_place;
using fastrevert::test::write_with_flags;


TEST_CASE("watcher: an in-place modification of a watched file is reported once") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "file", "hello");
  Harness harness;
  harness.add(1, dir / "file");
  harness.settle();
  CHECK(harness.stats().watches == 1);
  CHECK(harness.stats().polled_files == 0);
  CHECK(harness.change_count() == 0);

  overwrite_in_place(dir / "file", "HELLO");
  harness.expect_one_change(1);
  CHECK(harness.stats().batches == 1);
}

TEST_CASE("watcher: appending to a watched file is reported, once per append") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "log", "line 1\n");
  Harness harness;
  harness.add(7, dir / "log");
  harness.settle();

  append_file(dir / "log", "line 2\n");
  harness.expect_one_change(7);
  append_file(dir / "log", "line 3\n");
  harness.expect_one_change(7);
  REQUIRE(harness.received().empty());
}

TEST_CASE("watcher: a chmod or an mtime change of a watched file is reported") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "file", "x");
  Harness harness;
  harness.add(1, dir / "file");
  harness.settle();

  SECTION("chmod") {
    REQUIRE(chmod((dir / "file").c_str(), 0600) == 0);
    harness.expect_one_change(1);
  }
  SECTION("touch -m") {
    timespec times[2] = {{0, UTIME_OMIT}, {1500000000, 0}};
    REQUIRE(utimensat(AT_FDCWD, (dir / "file").c_str(), times, 0) == 0);
    harness.expect_one_change(1);
  }
}

TEST_CASE("watcher: deleting a watched file is reported, and so is recreating it") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "file", "old");
  Harness harness;
  harness.add(1, dir / "file");
  harness.settle();

  REQUIRE(unlink((dir / "file").c_str()) == 0);
  harness.expect_one_change(1);
  create_file(dir / "file", "new contents");
  harness.expect_one_change(1);
}

TEST_CASE("watcher: an atomic save by another program (rename over the name) is reported") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "file.txt", "version 1");
  Harness harness;
  harness.add(1, dir / "file.txt");
  harness.settle();

  create_file(dir / ".file.txt.tmp123", "version 2");
  REQUIRE(rename((dir / ".file.txt.tmp123").c_str(), (dir / "file.txt").c_str()) == 0);
  harness.expect_one_change(1);
}

TEST_CASE("watcher: renaming a watched file away is reported") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "file", "x");
  Harness harness;
  harness.add(1, dir / "file");
  harness.settle();

  REQUIRE(rename((dir / "file").c_str(), (dir / "elsewhere").c_str()) == 0);
  harness.expect_one_change(1);
}

TEST_CASE("watcher: a deleted and recreated directory is polled meanwhile, then watched again") {
  HookReset hooks;
  TempDir dir;
  std::string sub = dir / "sub";
  REQUIRE(mkdir(sub.c_str(), 0755) == 0);
  create_file(sub + "/file", "x");
  Harness harness;
  harness.set_poll_interval(50ms);
  harness.add(1, sub + "/file");
  harness.settle();
  REQUIRE(harness.stats().watches == 1);

  REQUIRE(unlink((sub + "/file").c_str()) == 0);
  REQUIRE(rmdir(sub.c_str()) == 0);
  harness.expect_one_change(1);
  REQUIRE(harness.wait_until(
      [&] { return harness.stats().watches == 0 && harness.stats().polled_files == 1; },
      kReportTimeout));

  // The file comes back whole, by a rename: a poll between its creation
  // and its write would see two states of it, two changes.
  REQUIRE(mkdir(sub.c_str(), 0755) == 0);
  create_file(dir / "staged", "recreated");
  REQUIRE(rename((dir / "staged").c_str(), (sub + "/file").c_str()) == 0);
  harness.expect_one_change(1);
  REQUIRE(harness.wait_until(
      [&] { return harness.stats().watches == 1 && harness.stats().polled_files == 0; },
      kReportTimeout));

  // Polling is now as slow as the default; a prompt report proves the
  // kernel watch is back.
  harness.set_poll_interval(60s);
  harness.settle();
  harness.clear();
  append_file(sub + "/file", " and appended");
  harness.expect_one_change(1);
}

TEST_CASE("watcher: writing a symlink's target through its own name is reported for the link") {
  HookReset hooks;
  TempDir dir;
  std::string link_dir = dir / "links";
  std::string target_dir = dir / "targets";
  REQUIRE(mkdir(link_dir.c_str(), 0755) == 0);
  REQUIRE(mkdir(target_dir.c_str(), 0755) == 0);
  create_file(target_dir + "/real", "one");
  create_file(target_dir + "/other", "two");
  REQUIRE(symlink("../targets/real", (link_dir + "/link").c_str()) == 0);

  Harness harness;
  harness.add(1, link_dir + "/link");
  harness.settle();
  CHECK(harness.stats().watches == 2);
  CHECK(harness.stats().polled_files == 0);

  append_file(target_dir + "/real", " more");
  REQUIRE(harness.wait_for_change(1));
  harness.settle();
  CHECK(harness.changes_for(1) == 1);
  CHECK(harness.received().front().data == link_dir + "/link");
  harness.clear();

  SECTION("repointing the link is reported, and the new target is watched") {
    REQUIRE(symlink("../targets/other", (link_dir + "/link.new").c_str()) == 0);
    REQUIRE(rename((link_dir + "/link.new").c_str(), (link_dir + "/link").c_str()) == 0);
    harness.expect_one_change(1);
    append_file(target_dir + "/other", " more");
    harness.expect_one_change(1);
    append_file(target_dir + "/real", " ignored now");
    REQUIRE(harness.wait_until([&] { return harness.stats().events_dropped_natively > 0; },
                               kReportTimeout));
    harness.settle();
    CHECK(harness.change_count() == 0);
  }
}

TEST_CASE("watcher: many files in one directory share one kernel watch and one batch") {
  HookReset hooks;
  TempDir dir;
  constexpr int kFiles = 60;
  for (int i = 0; i < kFiles; ++i) create_file(dir / ("f" + std::to_string(i)), "x");
  Harness harness;
  for (int i = 0; i < kFiles; ++i) harness.add(100 + i, dir / ("f" + std::to_string(i)));
  harness.settle();
  CHECK(harness.stats().watches == 1);

  for (int i = 0; i < kFiles; ++i) append_file(dir / ("f" + std::to_string(i)), "more");
  REQUIRE(harness.wait_until([&] { return harness.change_count() == kFiles; }, kReportTimeout));
  harness.settle();
  for (int i = 0; i < kFiles; ++i) CHECK(harness.changes_for(100 + i) == 1);
  // The writes take far less than the settle cap, so they coalesce into very
  // few batches however the scheduler interleaves them.
  CHECK(harness.stats().batches <= 3);
}

TEST_CASE("watcher: a write to an unregistered file in a watched directory emits nothing") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "visited", "x");
  create_file(dir / "unvisited.log", "x");
  Harness harness;
  harness.add(1, dir / "visited");
  harness.settle();
  // The registration itself is announced once; nothing else may follow.
  REQUIRE(harness.received().size() == 1);
  CHECK(harness.received().front().kind == RecordKind::file_watched);
  harness.clear();
  auto dropped_before = harness.stats().events_dropped_natively.load();

  append_file(dir / "unvisited.log", "noise");
  REQUIRE(harness.wait_until(
      [&] { return harness.stats().events_dropped_natively > dropped_before; }, kReportTimeout));
  harness.settle();
  CHECK(harness.received().empty());
  CHECK(harness.stats().kernel_events >= 1);
  CHECK(harness.stats().batches == 0);
}

TEST_CASE("watcher: each id on a path gets its own record, and removed and replaced ids none") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "a", "x");
  create_file(dir / "b", "x");
  Harness harness;
  harness.add(1, dir / "a");
  harness.add(2, dir / "a");
  harness.add(3, dir / "a");
  harness.add(4, dir / "a");
  harness.add(4, dir / "b");  // Re-adding id 4 replaces its registration.
  harness.remove(3);
  harness.settle();

  append_file(dir / "a", "more");
  REQUIRE(harness.wait_until([&] { return harness.changes_for(1) && harness.changes_for(2); },
                             kReportTimeout));
  harness.settle();
  CHECK(harness.changes_for(1) == 1);
  CHECK(harness.changes_for(2) == 1);
  CHECK(harness.changes_for(3) == 0);
  CHECK(harness.changes_for(4) == 0);
  harness.clear();

  append_file(dir / "b", "more");
  harness.expect_one_change(4);
}

TEST_CASE("watcher: two spellings of one directory share its kernel watch") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "a", "x");
  create_file(dir / "b", "x");
  Harness harness;
  harness.add(1, dir / "a");
  harness.add(2, dir.path() + "/./b");
  harness.settle();
  CHECK(harness.stats().watches == 1);

  append_file(dir / "a", "more");
  harness.expect_one_change(1);
  append_file(dir / "b", "more");
  harness.expect_one_change(2);
  // Dropping one spelling must not remove the watch the other relies on.
  harness.remove(1);
  CHECK(harness.stats().watches == 1);
  append_file(dir / "b", "again");
  harness.expect_one_change(2);
  harness.remove(2);
  CHECK(harness.stats().watches == 0);
}

TEST_CASE("watcher: removing the last file of a directory removes its kernel watch") {
  HookReset hooks;
  TempDir dir;
  REQUIRE(mkdir((dir / "one").c_str(), 0755) == 0);
  REQUIRE(mkdir((dir / "two").c_str(), 0755) == 0);
  create_file(dir / "one/a", "x");
  create_file(dir / "one/b", "x");
  create_file(dir / "two/c", "x");
  Harness harness;
  harness.add(1, dir / "one/a");
  harness.add(2, dir / "one/b");
  harness.add(3, dir / "two/c");
  harness.settle();
  CHECK(harness.stats().watches == 2);
  harness.remove(1);
  CHECK(harness.stats().watches == 2);
  harness.remove(2);
  CHECK(harness.stats().watches == 1);
  harness.remove(3);
  CHECK(harness.stats().watches == 0);
  std::size_t registrations = 1;
  harness.call([&](Watcher& watcher) { registrations = watcher.registration_count(); });
  CHECK(registrations == 0);
}

TEST_CASE("watcher: poll mode reports changes without a kernel watch") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "file", "x");
  Harness harness;
  harness.set_poll_interval(50ms);
  harness.add(1, dir / "file", WatchMode::poll);
  harness.settle();
  CHECK(harness.stats().watches == 0);
  CHECK(harness.stats().polled_files == 1);

  append_file(dir / "file", "more");
  harness.expect_one_change(1);
  REQUIRE(unlink((dir / "file").c_str()) == 0);
  harness.expect_one_change(1);
  CHECK(harness.stats().kernel_events == 0);
  harness.remove(1);
  CHECK(harness.stats().polled_files == 0);
}

TEST_CASE("watcher: rescan reports a change the kernel could not see") {
  HookReset hooks;
  TempDir dir;
  std::string alias = make_hard_linked_file(dir);
  Harness harness;
  harness.add(1, dir / "watched/file");
  harness.settle();
  append_file(alias, "unseen");
  harness.settle();
  CHECK(harness.change_count() == 0);

  harness.call([](Watcher& watcher) { watcher.rescan(); });
  harness.expect_one_change(1);
}

TEST_CASE("watcher: an overflow re-stats every registered file and reports the changed ones") {
  HookReset hooks;
  TempDir dir;
  REQUIRE(mkdir((dir / "watched").c_str(), 0755) == 0);
  REQUIRE(mkdir((dir / "unwatched").c_str(), 0755) == 0);
  create_file(dir / "watched/changed", "x");
  create_file(dir / "watched/unchanged", "x");
  REQUIRE(link((dir / "watched/changed").c_str(), (dir / "unwatched/alias").c_str()) == 0);
  std::string alias = dir / "unwatched/alias";
  Harness harness;
  harness.add(1, dir / "watched/changed");
  harness.add(2, dir / "watched/unchanged");
  harness.settle();
  append_file(alias, "unseen by inotify");
  harness.settle();
  REQUIRE(harness.change_count() == 0);

  harness.call([](Watcher& watcher) { watcher.inject_overflow(); });
  harness.expect_one_change(1);
  CHECK(harness.changes_for(2) == 0);
  CHECK(harness.stats().overflows == 1);
  // The directory watch survived the overflow and still reports.
  CHECK(harness.stats().watches == 1);
  append_file(dir / "watched/unchanged", "seen");
  harness.expect_one_change(2);
}

// Named apart from the watcher's other tests: it is inotify's alone, and
// does not run against the libuv backend (see test/CMakeLists.txt).
TEST_CASE("inotify: a real queue overflow is counted and every watched file re-stat'ed") {
  HookReset hooks;
  long queue_limit = 0;
  if (FILE* limit_file = std::fopen("/proc/sys/fs/inotify/max_queued_events", "r")) {
    if (std::fscanf(limit_file, "%ld", &queue_limit) != 1) queue_limit = 0;
    std::fclose(limit_file);
  }
  // The test fills the queue, so it needs a readable, modest limit.
  INFO("max_queued_events is " << queue_limit);
  REQUIRE(queue_limit > 0);
  REQUIRE(queue_limit <= 100000);
  TempDir dir;
  std::string alias = make_hard_linked_file(dir);
  Harness harness;
  harness.add(1, dir / "watched/file");
  harness.settle();

  // Hold the engine thread so that the kernel queue fills up unread.
  std::mutex gate_mutex;  // Guards gate_open, shared with the engine thread.
  std::condition_variable gate_cv;
  bool gate_open = false;
  bool engine_held = false;
  REQUIRE(harness.engine().post([&](Engine&) {
    std::unique_lock<std::mutex> lock(gate_mutex);
    engine_held = true;
    gate_cv.notify_all();
    gate_cv.wait(lock, [&] { return gate_open; });
  }));
  {
    std::unique_lock<std::mutex> lock(gate_mutex);
    REQUIRE(gate_cv.wait_for(lock, 10s, [&] { return engine_held; }));
  }
  // Alternating between two names keeps the kernel from merging the events.
  int noise_a = open((dir / "watched/noise-a").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  int noise_b = open((dir / "watched/noise-b").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
  REQUIRE(noise_a >= 0);
  REQUIRE(noise_b >= 0);
  bool all_written = true;
  for (long i = 0; i < queue_limit / 2 + 1000; ++i) {
    all_written &= write(noise_a, "a", 1) == 1;
    all_written &= write(noise_b, "b", 1) == 1;
  }
  REQUIRE(all_written);
  close(noise_a);
  close(noise_b);
  append_file(alias, "unseen by inotify");
  {
    std::lock_guard<std::mutex> lock(gate_mutex);
    gate_open = true;
  }
  gate_cv.notify_all();

  harness.expect_one_change(1);
  CHECK(harness.stats().overflows == 1);
  CHECK(harness.stats().kernel_events >= static_cast<std::uint64_t>(queue_limit));
}

TEST_CASE("watcher: running out of directory watches falls back to polling with one notice") {
  HookReset hooks;
  int error = GENERATE(ENOSPC, EMFILE);
  std::string error_name = error == ENOSPC ? "ENOSPC" : "EMFILE";
  watcher_test_hooks().add_watch_errno.store(error);
  TempDir dir;
  REQUIRE(mkdir((dir / "sub").c_str(), 0755) == 0);
  create_file(dir / "a", "x");
  create_file(dir / "b", "x");
  create_file(dir / "sub/c", "x");
  Harness harness;
  harness.set_poll_interval(50ms);
  harness.add(1, dir / "a");
  harness.add(2, dir / "b");
  harness.add(3, dir / "sub/c");
  harness.settle();
  CHECK(harness.stats().watches == 0);
  CHECK(harness.stats().polled_files == 3);

  append_file(dir / "a", "more");
  append_file(dir / "sub/c", "more");
  REQUIRE(harness.wait_until([&] { return harness.changes_for(1) && harness.changes_for(3); },
                             kReportTimeout));
  harness.settle();
  CHECK(harness.changes_for(1) == 1);
  CHECK(harness.changes_for(2) == 0);
  CHECK(harness.changes_for(3) == 1);
  auto notices = harness.notices();
  REQUIRE(notices.size() == 1);
  CHECK_THAT(notices[0], contains_text(error_name) && contains_text(harness.add_function()) &&
                             contains_text("falls back to polling"));
  harness.clear();

  // Once watches are available again, the retry puts the files back on them.
  watcher_test_hooks().add_watch_errno.store(0);
  REQUIRE(harness.wait_until(
      [&] { return harness.stats().watches == 2 && harness.stats().polled_files == 0; },
      kReportTimeout));
  harness.set_poll_interval(60s);
  harness.settle();
  harness.clear();
  append_file(dir / "b", "more");
  harness.expect_one_change(2);
}

TEST_CASE("watcher: a backend that cannot start falls back to polling with one notice") {
  HookReset hooks;
  watcher_test_hooks().init_errno.store(EMFILE);
  TempDir dir;
  create_file(dir / "a", "x");
  create_file(dir / "b", "x");
  Harness harness;
  harness.set_poll_interval(50ms);
  harness.add(1, dir / "a");
  harness.add(2, dir / "b");
  harness.settle();
  CHECK(harness.stats().watches == 0);
  CHECK(harness.stats().polled_files == 2);

  append_file(dir / "b", "more");
  REQUIRE(harness.wait_for_change(2));
  harness.settle();
  CHECK(harness.changes_for(1) == 0);
  CHECK(harness.changes_for(2) == 1);
  auto notices = harness.notices();
  REQUIRE(notices.size() == 1);
  CHECK_THAT(notices[0], contains_text("EMFILE") && contains_text(harness.start_function()) &&
                             contains_text("falls back to polling"));

  watcher_test_hooks().init_errno.store(0);
  REQUIRE(harness.wait_until(
      [&] { return harness.stats().watches == 1 && harness.stats().polled_files == 0; },
      kReportTimeout));
}

TEST_CASE("watcher: a hung stat blocks neither the caller nor the engine loop") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "file", "x");
  Harness harness;
  harness.call([](Watcher&) {});  // Create the watcher before the stats slow down.
  watcher_test_hooks().stat_delay_ms.store(1000);

  auto started = Clock::now();
  REQUIRE(harness.engine().post([path = dir / "file"](Engine& engine) {
    engine.service<Watcher>().add(1, path, WatchMode::notify);
  }));
  CHECK(Clock::now() - started < 200ms);

  // While the baseline stat sleeps on the threadpool, commands still run and
  // other records still arrive promptly.
  started = Clock::now();
  REQUIRE(harness.engine().post([](Engine& engine) {
    engine.emit(Record{RecordKind::echo, 42, 0, "still here"});
  }));
  REQUIRE(harness.wait_until(
      [&] {
        for (const auto& record : harness.received()) {
          if (record.kind == RecordKind::echo && record.id == 42) return true;
        }
        return false;
      },
      kReportTimeout));
  CHECK(Clock::now() - started < 500ms);
  bool idle = true;
  harness.call([&](Watcher& watcher) { idle = watcher.idle(); });
  CHECK_FALSE(idle);

  // The delayed baseline still lands, and a later change is still reported.
  harness.settle();
  append_file(dir / "file", "more");
  REQUIRE(harness.wait_for_change(1, 10s));
}

TEST_CASE("watcher: a file appended to continuously is still reported within the settle cap") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "log", "start\n");
  Harness harness;
  harness.call([](Watcher& watcher) { watcher.set_settle_delay(50ms); });
  harness.add(1, dir / "log");
  harness.settle();

  // Appends every 5 ms, far inside the settle delay, for up to 5 s.
  std::atomic<bool> stop_writing{false};  // Set by the test thread to end the writer.
  std::thread writer([&] {
    auto until = Clock::now() + 5s;
    while (!stop_writing.load() && Clock::now() < until) {
      append_file(dir / "log", "tick\n");
      std::this_thread::sleep_for(5ms);
    }
  });
  auto started = Clock::now();
  bool reported = harness.wait_for_change(1, 3s);
  auto elapsed = Clock::now() - started;
  stop_writing.store(true);
  writer.join();
  REQUIRE(reported);
  // The cap is ten settle delays (500 ms); allow for a slow sanitizer build.
  CHECK(elapsed < 2s);
}

TEST_CASE("watcher: an engine stops cleanly mid-sweep and a restarted engine has a fresh watcher") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "file", "x");
  {
    // libuv opens a process-wide pipe with the first loop of the process;
    // let that happen before counting.
    Harness warm_up;
  }
  std::size_t fds_before = open_fd_count();
  {
    Harness harness;
    harness.set_poll_interval(50ms);
    harness.add(2, dir / "file", WatchMode::poll);
    harness.settle();
    // The next baseline stat sleeps on a pool thread; stop the engine while
    // it does.  Stopping does not wait for it: the thread frees the job when
    // the stat returns (ASan checks that).
    watcher_test_hooks().stat_delay_ms.store(300);
    harness.add(1, dir / "file");
    auto deadline = Clock::now() + kReportTimeout;
    std::size_t in_flight = 0;
    while (in_flight == 0 && Clock::now() < deadline) {
      harness.call([&](Watcher& watcher) { in_flight = watcher.sweeps_in_flight(); });
      if (in_flight == 0) std::this_thread::sleep_for(1ms);
    }
    CHECK(in_flight > 0);
  }
  watcher_test_hooks().stat_delay_ms.store(0);
  // The abandoned thread closes the pool's last descriptor once its stat
  // returns.
  auto deadline = Clock::now() + kReportTimeout;
  while (open_fd_count() != fds_before && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  CHECK(open_fd_count() == fds_before);

  Harness restarted;
  restarted.add(1, dir / "file");
  restarted.settle();
  CHECK(restarted.stats().watches == 1);
  CHECK(restarted.change_count() == 0);
  append_file(dir / "file", "again");
  restarted.expect_one_change(1);
}

TEST_CASE("watcher: a directory renamed away and back is polled meanwhile, then watched again") {
  HookReset hooks;
  TempDir dir;
  std::string sub = dir / "sub";
  REQUIRE(mkdir(sub.c_str(), 0755) == 0);
  create_file(sub + "/file", "x");
  Harness harness;
  harness.set_poll_interval(50ms);
  harness.add(1, sub + "/file");
  harness.settle();

  REQUIRE(rename(sub.c_str(), (dir / "moved").c_str()) == 0);
  harness.expect_one_change(1);
  CHECK(harness.stats().watches == 0);
  // The watch that followed the directory to its new name is gone: a write
  // there is not about the registered name.
  append_file(dir / "moved/file", "elsewhere");
  REQUIRE(rename((dir / "moved").c_str(), sub.c_str()) == 0);
  harness.expect_one_change(1);
  REQUIRE(harness.wait_until(
      [&] { return harness.stats().watches == 1 && harness.stats().polled_files == 0; },
      kReportTimeout));
}

TEST_CASE("watcher: a thousand files in many directories use one watch per directory") {
  HookReset hooks;
  TempDir dir;
  constexpr int kDirs = 20;
  constexpr int kFilesPerDir = 50;
  std::vector<std::string> paths;
  for (int d = 0; d < kDirs; ++d) {
    std::string sub = dir / ("d" + std::to_string(d));
    REQUIRE(mkdir(sub.c_str(), 0755) == 0);
    for (int f = 0; f < kFilesPerDir; ++f) {
      paths.push_back(sub + "/f" + std::to_string(f));
      create_file(paths.back(), "x");
    }
  }
  Harness harness;
  harness.call([&](Watcher& watcher) {
    for (std::size_t i = 0; i < paths.size(); ++i) watcher.add(i, paths[i], WatchMode::notify);
  });
  harness.settle();
  CHECK(harness.stats().watches == kDirs);
  CHECK(harness.stats().polled_files == 0);

  // One file per directory changes; only those are reported.
  for (int d = 0; d < kDirs; ++d) append_file(paths[d * kFilesPerDir + 7], "more");
  REQUIRE(harness.wait_until([&] { return harness.change_count() == kDirs; }, kReportTimeout));
  harness.settle();
  CHECK(harness.change_count() == kDirs);
  for (int d = 0; d < kDirs; ++d) CHECK(harness.changes_for(d * kFilesPerDir + 7) == 1);

  harness.call([&](Watcher& watcher) {
    for (std::size_t i = 0; i < paths.size(); ++i) watcher.remove(i);
  });
  CHECK(harness.stats().watches == 0);
}

TEST_CASE("watcher: a directory registered with its contents reports entries coming and going") {
  HookReset hooks;
  TempDir dir;
  REQUIRE(mkdir((dir / "listed").c_str(), 0755) == 0);
  timespec old_times[2] = {{1000000000, 0}, {1000000000, 0}};
  REQUIRE(utimensat(AT_FDCWD, (dir / "listed").c_str(), old_times, 0) == 0);
  Harness harness;
  harness.call([&](Watcher& watcher) { watcher.add(1, dir / "listed", WatchMode::notify, true); });
  harness.settle();
  // The directory itself and its parent.
  CHECK(harness.stats().watches == 2);
  CHECK(harness.stats().polled_files == 0);

  create_file(dir / "listed/newcomer", "x");
  harness.expect_one_change(1);
  REQUIRE(rename((dir / "listed/newcomer").c_str(), (dir / "listed/renamed").c_str()) == 0);
  harness.expect_one_change(1);
  REQUIRE(unlink((dir / "listed/renamed").c_str()) == 0);
  harness.expect_one_change(1);

  // Writing an existing entry leaves the listing, and the directory, alone.
  create_file(dir / "listed/stay", "a");
  harness.expect_one_change(1);
  append_file(dir / "listed/stay", "b");
  harness.settle();
  CHECK(harness.change_count() == 0);

  harness.remove(1);
  CHECK(harness.stats().watches == 0);
}

TEST_CASE("watcher: polling notified files too catches what the kernel cannot see") {
  HookReset hooks;
  TempDir dir;
  std::string alias = make_hard_linked_file(dir);
  Harness harness;
  harness.set_poll_interval(50ms);
  harness.add(1, dir / "watched/file");
  harness.settle();
  // Without the safety net the write through the other name goes unseen.
  append_file(alias, "unseen");
  CHECK_FALSE(harness.wait_for_change(1, 300ms));

  harness.call([](Watcher& watcher) { watcher.set_poll_notified(true); });
  harness.expect_one_change(1);
  CHECK(harness.stats().watches == 1);
  CHECK(harness.stats().polled_files == 0);

  harness.call([](Watcher& watcher) { watcher.set_poll_notified(false); });
  append_file(alias, "unseen again");
  CHECK_FALSE(harness.wait_for_change(1, 300ms));
}

TEST_CASE("watcher: stopping the engine does not wait for a stat that hangs") {
  HookReset hooks;
  TempDir dir;
  create_file(dir / "file", "x");
  int fds[2];
  REQUIRE(pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0);
  auto engine = std::make_unique<Engine>(fds[1]);
  watcher_test_hooks().stat_delay_ms.store(3000);
  int started_before = watcher_test_hooks().delayed_stats_started.load();
  REQUIRE(engine->post(
      [&](Engine& e) { e.service<Watcher>().add(1, dir / "file", WatchMode::notify); }));
  // Wait for the delayed stat to be under way: a sweep that has not started
  // yet would simply be dropped.
  auto deadline = Clock::now() + 5s;
  while (watcher_test_hooks().delayed_stats_started.load() == started_before) {
    REQUIRE(Clock::now() < deadline);
    std::this_thread::sleep_for(1ms);
  }
  // The stat hangs for 3 s; the engine stops at once all the same, and so
  // would the process exit: no thread that exit joins is stuck in it.
  auto start = Clock::now();
  CHECK(engine->stop_within(1000ms));
  CHECK(Clock::now() - start < 1s);
  engine.reset();
  close(fds[0]);
}

TEST_CASE("watcher: a test names each fault hook by the word Lisp uses") {
  fastrevert::WatcherTestHooks& hooks = watcher_test_hooks();
  CHECK(hooks.fault("add-watch-errno") == &hooks.add_watch_errno);
  CHECK(hooks.fault("init-errno") == &hooks.init_errno);
  CHECK(hooks.fault("stat-delay-ms") == &hooks.stat_delay_ms);
  CHECK(hooks.fault("overflow") == nullptr);
  CHECK(hooks.fault("delayed-stats-started") == nullptr);
}

TEST_CASE("watcher: the backend under test is the one the run asked for") {
  HookReset hooks;
  Harness harness;
  std::string name;
  harness.call([&](Watcher& watcher) { name = watcher.backend_name(); });
  if (fastrevert::test::testing_libuv_backend() || !FASTREVERT_HAVE_INOTIFY) {
    CHECK(name == "libuv");
  } else {
    CHECK(name == "inotify");
  }
}

TEST_CASE("watcher: a backend blind to writes in a directory has its watched files polled") {
  HookReset hooks;
  watcher_test_hooks().blind_directory_watches.store(true);
  TempDir dir;
  std::string alias = make_hard_linked_file(dir);
  Harness harness;
  harness.set_poll_interval(50ms);
  harness.add(1, dir / "watched/file");
  harness.settle();
  // One watch for the directory, which still reports entries coming and
  // going, and the file polled for what it cannot see.
  CHECK(harness.stats().watches == 1);
  CHECK(harness.stats().polled_files == 1);

  // No event in the watched directory: only a stat sees this write.
  append_file(alias, "unseen by the directory watch");
  harness.expect_one_change(1);
  harness.remove(1);
  CHECK(harness.stats().polled_files == 0);
  CHECK(harness.stats().watches == 0);
}

TEST_CASE("watcher: an event that names no entry re-stats every name of its directory") {
  HookReset hooks;
  TempDir dir;
  std::string alias = make_hard_linked_file(dir);
  create_file(dir / "watched/other", "x");
  Harness harness;
  // Polling is far too slow to report anything in this test.
  harness.set_poll_interval(60s);
  bool blind = GENERATE(false, true);
  watcher_test_hooks().blind_directory_watches.store(blind);
  harness.add(1, dir / "watched/file");
  harness.add(2, dir / "watched/other");
  harness.settle();

  // The write through the other name raises no event; a new entry beside
  // the file does.  A backend that names the entry stats only that name; one
  // that cannot (kqueue) stats every watched name of the directory.
  append_file(alias, "unseen");
  create_file(dir / "watched/newcomer", "x");
  if (blind) {
    REQUIRE(harness.wait_for_change(1));
    harness.settle();
    CHECK(harness.changes_for(1) == 1);
    CHECK(harness.changes_for(2) == 0);
  } else {
    REQUIRE(harness.wait_until([&] { return harness.stats().events_dropped_natively > 0; },
                               kReportTimeout));
    harness.settle();
    CHECK(harness.change_count() == 0);
  }
}

TEST_CASE("watcher: a backend that may lose events on an add re-stats every name after one") {
  HookReset hooks;
  TempDir dir;
  std::string alias = make_hard_linked_file(dir);
  REQUIRE(mkdir((dir / "later").c_str(), 0755) == 0);
  create_file(dir / "later/file", "x");
  Harness harness;
  harness.set_poll_interval(60s);
  bool loses = GENERATE(false, true);
  watcher_test_hooks().add_loses_events.store(loses);
  harness.add(1, dir / "watched/file");
  harness.settle();

  // A change the watch cannot see, then a new directory watch: where adding
  // a watch may have lost events (FSEvents), the add re-stats every name.
  append_file(alias, "unseen");
  harness.add(2, dir / "later/file");
  harness.settle();
  CHECK(harness.changes_for(1) == (loses ? 1u : 0u));
  CHECK(harness.changes_for(2) == 0);
}

TEST_CASE("watcher: where writes go unseen, the files Emacs shows are polled more often") {
  HookReset hooks;
  TempDir dir;
  REQUIRE(mkdir((dir / "watched").c_str(), 0755) == 0);
  REQUIRE(mkdir((dir / "unwatched").c_str(), 0755) == 0);
  for (std::string name : {"shown", "hidden"}) {
    create_file(dir / ("watched/" + name), "x");
    REQUIRE(link((dir / ("watched/" + name)).c_str(), (dir / ("unwatched/" + name)).c_str()) == 0);
  }
  bool blind = GENERATE(false, true);
  watcher_test_hooks().blind_directory_watches.store(blind);
  Harness harness;
  // The poll interval is far too long to report anything in this test.
  harness.set_poll_interval(60s);
  harness.add(1, dir / "watched/shown");
  harness.add(2, dir / "watched/hidden");
  harness.call([](Watcher& watcher) { watcher.set_visible({1}); });
  harness.settle();

  // Writes through the other names raise no event in the watched directory.
  append_file(dir / "unwatched/shown", "unseen");
  append_file(dir / "unwatched/hidden", "unseen");
  if (blind) {
    REQUIRE(harness.wait_for_change(1, 5s));
    harness.settle();
    CHECK(harness.changes_for(1) == 1);
    CHECK(harness.changes_for(2) == 0);
  } else {
    // A backend that sees writes needs no such polling.
    CHECK_FALSE(harness.wait_for_change(1, 3 * Watcher::kVisiblePollInterval));
  }
}
