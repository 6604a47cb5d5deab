// Blocking calls off the engine loop, on threads of the pool's own.
//
// The watcher stats files off the loop, because a stat on a dead network
// mount can hang for as long as the mount does.  libuv's threadpool would
// run such calls too, but it is joined when the process exits
// (uv_library_shutdown), so a thread asleep in a hung stat would hold up
// Emacs's exit for as long.  The threads here are detached instead: closing
// the pool abandons a thread stuck in a call, which then ends with the
// process, and neither stopping the engine nor exiting waits for it.
//
// Each job is a pair of functions: WORK runs on a pool thread and must touch
// nothing but what it owns (never the loop or the pool's owner); DONE runs
// afterwards on the loop thread, unless the pool was closed first.
#pragma once

#include <uv.h>

#include <cstddef>
#include <functional>
#include <memory>

namespace fastrevert {

class WorkerPool {
 public:
  using Work = std::function<void()>;
  using Done = std::function<void()>;

  // Loop thread, as are all the methods.  MAX_THREADS bounds the threads
  // running at once; a job submitted while all are busy waits for one.
  // Throws SystemError when the pool cannot be set up.
  WorkerPool(uv_loop_t* loop, std::size_t max_threads);
  // The pool must be closed, and the loop must have run its close
  // callbacks, before it is destroyed: libuv owns its handle until then.
  ~WorkerPool();

  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues a job.  Neither WORK nor DONE may throw: an exception that
  // escapes either is dropped, since nothing may leave a thread's function
  // or a loop callback.  Throws std::bad_alloc, or SystemError when no
  // thread can be started; the job is then not queued.
  void submit(Work work, Done done);

  // Ends the pool: no DONE runs from now on, queued jobs are dropped, and
  // idle threads exit; a thread busy in a job exits once its call returns,
  // however long that takes.  Closes the pool's loop handle; the pool may be
  // destroyed once the loop has run the close callbacks.  Idempotent.
  void close() noexcept;

  // Jobs submitted whose DONE has not run yet (and will, unless closed).
  std::size_t pending() const noexcept { return pending_; }

  struct Shared;

 private:
  static void on_done(uv_poll_t* handle, int status, int events);

  std::shared_ptr<Shared> shared_;
  std::size_t max_threads_ = 1;
  uv_poll_t poll_{};
  bool closed_ = false;
  std::size_t pending_ = 0;
};

}  // namespace fastrevert
