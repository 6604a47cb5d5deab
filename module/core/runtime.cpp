#include "core/runtime.h"

#include <deque>
#include <optional>
#include <stdexcept>
#include <utility>

namespace fastrevert {

Runtime::~Runtime() {
  stop(std::chrono::milliseconds::max());
  // Each abandoned engine's destructor waits for its thread.
}

void Runtime::start(int wake_fd) {
  if (engine_) throw std::logic_error("the engine is already running");
  auto started = std::make_shared<Engine>(wake_fd);
  handoff_ = std::make_shared<Handoff>(*started, tuning_);
  engine_ = std::move(started);
}

Runtime::Stopped Runtime::stop(std::chrono::milliseconds timeout) {
  if (!engine_) return Stopped::not_running;
  // Taken out first: whatever happens below, the engine is no longer the
  // running one.  The engine keeps the nursery until it shuts down and kills
  // the children left in it.
  std::shared_ptr<Engine> stopping = std::move(engine_);
  handoff_.reset();
  if (!stopping->stop_within(timeout)) {
    abandoned_.push_back(std::move(stopping));
    return Stopped::abandoned;
  }
  std::deque<Record> undrained;
  stopping->try_drain(undrained);
  return Stopped::stopped;
}

Runtime::Posted Runtime::can_post() const noexcept {
  if (!engine_) return Posted::not_running;
  return engine_->running() ? Posted::yes : Posted::stopping;
}

Runtime::Posted Runtime::post(Engine::Command command) {
  if (!engine_) return Posted::not_running;
  return engine_->post(std::move(command)) ? Posted::yes : Posted::stopping;
}

Runtime::Posted Runtime::post_for_process(std::uint64_t id, Engine::Command command) {
  if (!engine_) return Posted::not_running;
  handoff_->hand_to_engine(id);
  return post(std::move(command));
}

Runtime::Posted Runtime::adopt(std::uint64_t id, std::unique_ptr<ProcessHandover> child) {
  Posted posted = can_post();
  if (posted == Posted::yes) handoff_->put(id, std::move(child));
  return posted;
}

bool Runtime::wait(std::chrono::nanoseconds timeout, const std::function<bool()>& should_quit) {
  // Held for the wait, which a signal handler may interrupt to stop them.
  std::shared_ptr<Engine> current = engine_;
  std::shared_ptr<Handoff> handoff = handoff_;
  if (!current) return false;
  if (std::optional<bool> served = handoff->serve(timeout, should_quit)) return *served;
  return current->wait_for_records(timeout, should_quit);
}

std::size_t Runtime::drain(const std::function<bool(const Record&)>& handler) {
  // Held for the drain: a handler may stop the engine.
  std::shared_ptr<Engine> current = engine_;
  if (!current) return 0;
  DrainTimer timer(*current);
  std::uint64_t end = current->begin_drain();
  std::size_t handled = 0;
  Record record;
  try {
    while (current->take(record, end)) {
      bool go_on = handler(record);
      ++handled;
      timer.handled();
      if (!go_on) {
        current->rewake();
        break;
      }
    }
  } catch (...) {
    // The wake byte that started this drain was read: without a new one,
    // the rest would wait for an unrelated record.
    current->rewake();
    throw;
  }
  return handled;
}


}  // namespace fastrevert
