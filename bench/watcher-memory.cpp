// What the engine's watcher holds per watched file: registers the files of a
// directory tree made like the memory section's (ROOT/dirD/fileI.txt, ten
// directories) in an engine, waits until every baseline is taken, and prints
// the growth of malloc's in-use bytes per file.  Built against the core
// library of a Release build, with one command (shown on two lines):
//
//   c++ -O2 -std=c++17 -Imodule -o build-release/watcher-memory bench/watcher-memory.cpp
//       build-release/module/libfastrevert-core.a $(pkg-config --libs libuv) -lpthread
//
// and run as `build-release/watcher-memory ROOT 10000'.
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/engine.h"
#include "core/watcher.h"

using fastrevert::Engine;
using fastrevert::Watcher;
using fastrevert::WatchMode;

namespace {

// Runs FN with the watcher on the engine thread and waits for it.
void call(Engine& engine, const std::function<void(Watcher&)>& fn) {
  std::mutex mutex;
  std::condition_variable done_cv;
  bool done = false;
  engine.post([&](Engine& running) {
    fn(running.service<Watcher>());
    // Guards done: the main thread waits on it.
    std::lock_guard<std::mutex> lock(mutex);
    done = true;
    done_cv.notify_one();
  });
  std::unique_lock<std::mutex> lock(mutex);
  done_cv.wait(lock, [&] { return done; });
}

// Waits until the watcher has taken every baseline, and drops its records.
void settle(Engine& engine, int wake_read_fd) {
  for (;;) {
    bool idle = false;
    call(engine, [&](Watcher& watcher) { idle = watcher.idle(); });
    if (idle) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  char bytes[256];
  while (read(wake_read_fd, bytes, sizeof bytes) > 0) {
  }
  engine.drain();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s ROOT FILES\n", argv[0]);
    return 2;
  }
  std::string root = argv[1];
  int count = std::stoi(argv[2]);
  std::vector<std::string> paths;
  std::size_t name_bytes = 0;
  for (int i = 0; i < count; ++i) {
    paths.push_back(root + "/dir" + std::to_string(i % 10) + "/file" + std::to_string(i / 10) +
                    ".txt");
    name_bytes += paths.back().size();
  }
  int wake[2];
  if (pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) return 1;
  Engine engine(wake[1]);
  // The watcher exists, and its threads have started, before the first count.
  call(engine, [](Watcher&) {});
  settle(engine, wake[0]);
  malloc_trim(0);
  struct mallinfo2 before = mallinfo2();
  call(engine, [&](Watcher& watcher) {
    for (int i = 0; i < count; ++i) watcher.add(i + 1, paths[i], WatchMode::notify);
  });
  settle(engine, wake[0]);
  struct mallinfo2 after = mallinfo2();
  double grown = static_cast<double>(after.uordblks) - static_cast<double>(before.uordblks);
  std::printf("%d files, mean name %.1f bytes: the engine's heap grew %.1f bytes per file\n", count,
              static_cast<double>(name_bytes) / count, grown / count);
  engine.stop();
  close(wake[0]);
  return 0;
}
