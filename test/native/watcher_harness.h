// The harness of the watcher's tests: an Engine with a wake pipe standing in
// for Emacs's channel, the records it has emitted, and helpers that write
// files the way other programs do.  Every wait is a condition with a
// deadline.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "catch_compat.h"
#include "core/engine.h"
#include "core/watcher.h"
#include "support.h"

namespace fastrevert::test {

using namespace std::chrono_literals;

using Clock = std::chrono::steady_clock;

// Long enough for any kernel-driven report even under a sanitizer, and far
// shorter than the default 5 s poll interval, so a report that arrives within
// it in notify mode came through inotify, not polling.
constexpr auto kReportTimeout = 3s;

// Writes CONTENT with a single write(2) to a file opened with FLAGS.
inline void write_with_flags(const std::string& path, const std::string& content, int flags) {
  int fd = open(path.c_str(), flags | O_WRONLY | O_CLOEXEC, 0644);
  REQUIRE(fd >= 0);
  REQUIRE(write(fd, content.data(), content.size()) == static_cast<ssize_t>(content.size()));
  REQUIRE(close(fd) == 0);
}

// Creates PATH with CONTENT and dates it far in the past, so that any later
// write gives it a visibly different mtime even within one tick of the
// kernel's coarse clock.
inline void create_file(const std::string& path, const std::string& content) {
  write_with_flags(path, content, O_CREAT | O_TRUNC);
  timespec old_times[2] = {{1000000000, 0}, {1000000000, 0}};
  REQUIRE(utimensat(AT_FDCWD, path.c_str(), old_times, 0) == 0);
}

inline void append_file(const std::string& path, const std::string& content) {
  write_with_flags(path, content, O_APPEND);
}

// Overwrites the start of PATH in place: one pwrite, same size afterwards.
inline void overwrite_in_place(const std::string& path, const std::string& content) {
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  REQUIRE(fd >= 0);
  REQUIRE(pwrite(fd, content.data(), content.size(), 0) == static_cast<ssize_t>(content.size()));
  REQUIRE(close(fd) == 0);
}

// Creates watched/file and, in a directory of its own, a hard link to it:
// writes through the link raise no event in the watched directory.
// Returns the link's name.
inline std::string make_hard_linked_file(const TempDir& dir) {
  REQUIRE(mkdir((dir / "watched").c_str(), 0755) == 0);
  REQUIRE(mkdir((dir / "unwatched").c_str(), 0755) == 0);
  create_file(dir / "watched/file", "x");
  REQUIRE(link((dir / "watched/file").c_str(), (dir / "unwatched/alias").c_str()) == 0);
  return dir / "unwatched/alias";
}

inline std::size_t open_fd_count() {
  std::size_t count = 0;
  DIR* dir = opendir("/proc/self/fd");
  REQUIRE(dir != nullptr);
  while (dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

// The watcher backend the tests run against: the build's own, or libuv's
// when FASTREVERT_TEST_WATCH_BACKEND is "libuv".  ctest runs the watcher's
// tests once per backend that Linux has (see test/CMakeLists.txt).
inline bool testing_libuv_backend() {
  const char* chosen = std::getenv("FASTREVERT_TEST_WATCH_BACKEND");
  return chosen && std::string(chosen) == "libuv";
}

// Clears every injected fault when a test starts and when it ends, so that a
// failing test cannot leave a fault behind for the next, and selects the
// backend under test.
struct HookReset {
  HookReset() { reset(); }
  ~HookReset() { reset(); }
  static void reset() {
    watcher_test_hooks().add_watch_errno.store(0);
    watcher_test_hooks().init_errno.store(0);
    watcher_test_hooks().stat_delay_ms.store(0);
    watcher_test_hooks().blind_directory_watches.store(false);
    watcher_test_hooks().add_loses_events.store(false);
    watcher_test_hooks().use_libuv_backend.store(testing_libuv_backend());
  }
};

// An engine with a wake pipe standing in for Emacs's channel, plus the
// records it has emitted so far.
class Harness {
 public:
  Harness() : engine_(make_wake_pipe()) {}
  ~Harness() {
    engine_.stop();
    close(wake_read_fd_);
  }

  Engine& engine() { return engine_; }
  fastrevert::Stats& stats() { return engine_.stats(); }

  // Runs FN with the watcher on the engine thread and waits for it, as the
  // glue's commands do (except that the glue never waits).
  void call(const std::function<void(Watcher&)>& fn) {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    REQUIRE(engine_.post([&](Engine& engine) {
      fn(engine.service<Watcher>());
      // Guards done: the test thread waits on it.
      std::lock_guard<std::mutex> lock(mutex);
      done = true;
      done_cv.notify_one();
    }));
    std::unique_lock<std::mutex> lock(mutex);
    REQUIRE(done_cv.wait_for(lock, 10s, [&] { return done; }));
  }

  void add(std::uint64_t id, const std::string& path, WatchMode mode = WatchMode::notify) {
    call([&](Watcher& watcher) { watcher.add(id, path, mode); });
  }
  void remove(std::uint64_t id) {
    call([&](Watcher& watcher) { watcher.remove(id); });
  }
  void set_poll_interval(std::chrono::milliseconds interval) {
    call([&](Watcher& watcher) { watcher.set_poll_interval(interval); });
  }
  // The system calls the backend's notices name for starting it and for
  // adding a directory.
  std::string start_function() {
    std::string function;
    call([&](Watcher& watcher) { function = watcher.backend().start_function(); });
    return function;
  }
  std::string add_function() {
    std::string function;
    call([&](Watcher& watcher) { function = watcher.backend().add_function(); });
    return function;
  }

  // Waits until the watcher has confirmed everything it has seen: baselines
  // taken, events stat'ed, records emitted.
  void settle() {
    auto deadline = Clock::now() + 10s;
    for (;;) {
      bool idle = false;
      call([&](Watcher& watcher) { idle = watcher.idle(); });
      if (idle) break;
      REQUIRE(Clock::now() < deadline);
      std::this_thread::sleep_for(2ms);
    }
    pump();
  }

  // Waits up to TIMEOUT for a wake byte, leaving it and the records unread.
  bool wait_for_wake(std::chrono::milliseconds timeout) {
    pollfd wake{wake_read_fd_, POLLIN, 0};
    return poll(&wake, 1, static_cast<int>(timeout.count())) == 1;
  }

  // Moves every emitted record into received().
  void pump() {
    char bytes[256];
    while (read(wake_read_fd_, bytes, sizeof bytes) > 0) {
    }
    for (auto& record : engine_.drain()) received_.push_back(std::move(record));
  }

  // Pumps until PRED holds or TIMEOUT passes, sleeping on the wake pipe in
  // between; returns whether PRED held.
  bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    for (;;) {
      pump();
      if (pred()) return true;
      auto now = Clock::now();
      if (now >= deadline) return false;
      auto remaining = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      pollfd wake{wake_read_fd_, POLLIN, 0};
      poll(&wake, 1, static_cast<int>(std::min<std::int64_t>(remaining.count(), 20)));
    }
  }

  std::size_t changes_for(std::uint64_t id) const {
    std::size_t count = 0;
    for (const auto& record : received_) {
      if (record.kind == RecordKind::file_changed && record.id == id) ++count;
    }
    return count;
  }
  std::size_t change_count() const {
    std::size_t count = 0;
    for (const auto& record : received_) count += record.kind == RecordKind::file_changed;
    return count;
  }
  std::vector<std::string> notices() const {
    std::vector<std::string> texts;
    for (const auto& record : received_) {
      if (record.kind == RecordKind::notice) texts.push_back(record.data);
    }
    return texts;
  }

  bool wait_for_change(std::uint64_t id, std::chrono::milliseconds timeout = kReportTimeout) {
    return wait_until([&] { return changes_for(id) > 0; }, timeout);
  }

  // Waits for a report for ID, lets the watcher settle, and checks that the
  // change was reported exactly once; then forgets the records.
  void expect_one_change(std::uint64_t id) {
    REQUIRE(wait_for_change(id));
    settle();
    CHECK(changes_for(id) == 1);
    clear();
  }

  void clear() { received_.clear(); }
  const std::vector<Record>& received() const { return received_; }

 private:
  int make_wake_pipe() {
    int fds[2];
    REQUIRE(pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0);
    wake_read_fd_ = fds[0];
    return fds[1];
  }

  int wake_read_fd_ = -1;
  Engine engine_;
  std::vector<Record> received_;
};

}  // namespace fastrevert::test
