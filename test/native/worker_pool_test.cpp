// Tests of the pool of detached threads that runs blocking calls.
#include "core/worker_pool.h"

#include <fcntl.h>
#include <unistd.h>
#include <uv.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "catch_compat.h"

using fastrevert::WorkerPool;
using namespace std::chrono_literals;

namespace {

using Clock = std::chrono::steady_clock;

// A loop run on the test's thread, with the pool on it.
struct PoolHarness {
  uv_loop_t loop{};
  std::unique_ptr<WorkerPool> pool;
  explicit PoolHarness(std::size_t threads) {
    REQUIRE(uv_loop_init(&loop) == 0);
    pool = std::make_unique<WorkerPool>(&loop, threads);
  }
  ~PoolHarness() {
    pool->close();
    uv_run(&loop, UV_RUN_DEFAULT);
    pool.reset();
    uv_loop_close(&loop);
  }
  // Runs the loop until PREDICATE holds or TIMEOUT passes.
  template <typename Predicate>
  bool run_until(Predicate predicate, std::chrono::milliseconds timeout = 10s) {
    auto deadline = Clock::now() + timeout;
    while (!predicate()) {
      if (Clock::now() >= deadline) return false;
      uv_run(&loop, UV_RUN_NOWAIT);
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }
};

}  // namespace

TEST_CASE("pool runs each job's work off the loop and its done on the loop once", "[worker-pool]") {
  PoolHarness harness(2);
  const auto loop_thread = std::this_thread::get_id();
  std::vector<int> done;
  std::atomic<int> off_loop{0};
  for (int i = 0; i < 20; ++i) {
    harness.pool->submit(
        [&off_loop, loop_thread] {
          if (std::this_thread::get_id() != loop_thread) off_loop.fetch_add(1);
        },
        [&done, i, loop_thread] {
          CHECK(std::this_thread::get_id() == loop_thread);
          done.push_back(i);
        });
  }
  REQUIRE(harness.run_until([&] { return done.size() == 20; }));
  CHECK(off_loop.load() == 20);
  CHECK(harness.pool->pending() == 0);
}

TEST_CASE("a pool closed while a job hangs returns at once and runs no more done",
          "[worker-pool]") {
  auto release = std::make_shared<std::atomic<bool>>(false);
  auto started = std::make_shared<std::atomic<bool>>(false);
  bool done_ran = false;
  auto harness = std::make_unique<PoolHarness>(1);
  harness->pool->submit(
      [release, started] {
        started->store(true);
        // Stands in for a stat on a dead mount.
        while (!release->load()) std::this_thread::sleep_for(1ms);
      },
      [&done_ran] { done_ran = true; });
  harness->pool->submit([] {}, [&done_ran] { done_ran = true; });
  auto deadline = Clock::now() + 10s;
  while (!started->load() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  REQUIRE(started->load());
  // Closing the pool and running its loop to the end does not wait for the
  // hung job.
  auto start = Clock::now();
  harness.reset();
  CHECK(Clock::now() - start < 1s);
  CHECK_FALSE(done_ran);
  // The abandoned thread finishes on its own once its call returns.
  release->store(true);
}

TEST_CASE("pool starts no more threads than it is allowed", "[worker-pool]") {
  PoolHarness harness(2);
  std::atomic<int> running{0};
  std::atomic<int> most{0};
  int done = 0;
  for (int i = 0; i < 8; ++i) {
    harness.pool->submit(
        [&] {
          int now = running.fetch_add(1) + 1;
          int seen = most.load();
          while (now > seen && !most.compare_exchange_weak(seen, now)) {
          }
          std::this_thread::sleep_for(5ms);
          running.fetch_sub(1);
        },
        [&done] { ++done; });
  }
  REQUIRE(harness.run_until([&] { return done == 8; }));
  CHECK(most.load() <= 2);
  CHECK(most.load() >= 1);
}
