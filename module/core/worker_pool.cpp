#include "core/worker_pool.h"

#include <cerrno>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/threads.h"
#include "core/wake_signal.h"

namespace fastrevert {

// What the pool's threads share with it.  Each thread holds a reference, so
// that a thread the pool has abandoned (stuck in a call when it closed)
// still finds everything it touches when the call returns.
struct WorkerPool::Shared {
  struct Job {
    Work work;
    Done done;
  };

  // Guards every member below but done_signal, which is set once.
  std::mutex mutex;
  std::condition_variable job_ready;
  std::deque<std::unique_ptr<Job>> queued;
  // Jobs whose WORK has returned, for the loop to run their DONE.
  std::vector<std::unique_ptr<Job>> finished;
  std::size_t threads = 0;
  std::size_t idle = 0;
  bool closed = false;
  // Readable when finished holds jobs; the loop polls it.
  std::optional<WakeSignal> done_signal;
};

namespace {

void thread_main(const std::shared_ptr<WorkerPool::Shared>& shared) {
  std::unique_lock<std::mutex> lock(shared->mutex);
  for (;;) {
    ++shared->idle;
    shared->job_ready.wait(lock, [&] { return shared->closed || !shared->queued.empty(); });
    --shared->idle;
    if (shared->closed) break;
    std::unique_ptr<WorkerPool::Shared::Job> job = std::move(shared->queued.front());
    shared->queued.pop_front();
    lock.unlock();
    try {
      job->work();
    } catch (...) {
      // Nothing may leave a thread's function; see submit().
    }
    lock.lock();
    if (shared->closed) break;
    try {
      shared->finished.push_back(std::move(job));
    } catch (...) {
      // Without memory the result is lost, as if the pool had closed; its
      // DONE never runs.  The watcher re-stats on its next poll or event.
      continue;
    }
    shared->done_signal->signal();
  }
  --shared->threads;
}

}  // namespace

WorkerPool::WorkerPool(uv_loop_t* loop, std::size_t max_threads)
    : shared_(std::make_shared<Shared>()) {
  max_threads_ = max_threads == 0 ? 1 : max_threads;
  shared_->done_signal.emplace();
  int status = uv_poll_init(loop, &poll_, shared_->done_signal->fd());
  if (status < 0) throw SystemError(-status, "uv_poll_init");
  poll_.data = this;
  uv_poll_start(&poll_, UV_READABLE, &WorkerPool::on_done);
}

WorkerPool::~WorkerPool() = default;

void WorkerPool::submit(Work work, Done done) {
  auto job = std::make_unique<Shared::Job>(Shared::Job{std::move(work), std::move(done)});
  std::lock_guard<std::mutex> lock(shared_->mutex);
  if (closed_) return;
  // A new thread starts when every idle one already has a job waiting for
  // it; it blocks on the lock held here until the job is queued.
  if (shared_->idle <= shared_->queued.size() && shared_->threads < max_threads_) {
    try {
      std::shared_ptr<Shared> shared = shared_;
      start_thread_blocking_signals([shared] { thread_main(shared); }).detach();
      ++shared_->threads;
    } catch (const std::system_error& error) {
      // With no thread at all the job would never run; otherwise it waits
      // for one of those running.
      if (shared_->threads == 0) throw SystemError(error.code().value(), "pthread_create");
    }
  }
  shared_->queued.push_back(std::move(job));
  ++pending_;
  shared_->job_ready.notify_one();
}

void WorkerPool::close() noexcept {
  if (closed_) return;
  closed_ = true;
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->closed = true;
    shared_->queued.clear();
    shared_->finished.clear();
  }
  shared_->job_ready.notify_all();
  pending_ = 0;
  uv_close(reinterpret_cast<uv_handle_t*>(&poll_), nullptr);
}

void WorkerPool::on_done(uv_poll_t* handle, int, int) {
  auto& pool = *static_cast<WorkerPool*>(handle->data);
  pool.shared_->done_signal->reset();
  std::vector<std::unique_ptr<Shared::Job>> finished;
  {
    std::lock_guard<std::mutex> lock(pool.shared_->mutex);
    finished.swap(pool.shared_->finished);
  }
  for (auto& job : finished) {
    // A DONE may close the pool; the rest are then dropped.
    if (pool.closed_) break;
    --pool.pending_;
    try {
      job->done();
    } catch (...) {
      // Nothing may leave a loop callback; see submit().
    }
  }
}

}  // namespace fastrevert
