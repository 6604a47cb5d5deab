#include "core/handoff.h"

#include <algorithm>
#include <exception>

#include "core/errors.h"
#include "core/poll_wait.h"

namespace fastrevert {

Nursery::Nursery(std::chrono::microseconds adoption_delay) : delay_(adoption_delay) {}

Nursery::~Nursery() {
  // The children's destructors kill and reap them.
  children_.clear();
}

void Nursery::put(std::uint64_t id, std::unique_ptr<ProcessHandover> child) {
  std::lock_guard<std::mutex> lock(mutex_);
  children_[id] = std::move(child);
  if (armed_) return;
  timer_.arm(delay_);
  armed_ = true;
}

std::unique_ptr<ProcessHandover> Nursery::take(std::uint64_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = children_.find(id);
  if (found == children_.end()) return nullptr;
  std::unique_ptr<ProcessHandover> child = std::move(found->second);
  children_.erase(found);
  disarm_if_empty_locked();
  return child;
}

std::vector<std::pair<std::uint64_t, std::unique_ptr<ProcessHandover>>> Nursery::take_all() {
  std::vector<std::pair<std::uint64_t, std::unique_ptr<ProcessHandover>>> all;
  std::lock_guard<std::mutex> lock(mutex_);
  all.reserve(children_.size());
  for (auto& entry : children_) all.emplace_back(entry.first, std::move(entry.second));
  children_.clear();
  disarm_if_empty_locked();
  return all;
}

std::vector<std::pair<std::uint64_t, std::unique_ptr<ProcessHandover>>> Nursery::take_due() {
  std::vector<std::pair<std::uint64_t, std::unique_ptr<ProcessHandover>>> due;
  std::lock_guard<std::mutex> lock(mutex_);
  // Allocated before the timer is reset: if this throws, it stays readable.
  due.reserve(children_.size());
  timer_.acknowledge();
  armed_ = false;
  for (auto& entry : children_) due.emplace_back(entry.first, std::move(entry.second));
  children_.clear();
  return due;
}

void Nursery::disarm_if_empty_locked() noexcept {
  if (!armed_ || !children_.empty()) return;
  timer_.disarm();
  armed_ = false;
}

std::size_t Nursery::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return children_.size();
}

void NurseryAdoption::attend(std::shared_ptr<Nursery> nursery) {
  if (nursery_ || shutting_down_ || !nursery) return;
  int status = uv_poll_init(engine_.loop(), &poll_, nursery->timer_fd());
  if (status < 0) throw SystemError(-status, "uv_poll_init");
  nursery_ = std::move(nursery);
  poll_.data = this;
  poll_open_ = true;
  uv_poll_start(&poll_, UV_READABLE, &NurseryAdoption::on_due);
}

void NurseryAdoption::on_due(uv_poll_t* handle, int, int) {
  auto& adoption = *static_cast<NurseryAdoption*>(handle->data);
  try {
    // If taking them fails, the timer stays readable and this runs again.
    auto children = adoption.nursery_->take_due();
    ProcessTable& table = adoption.engine_.service<ProcessTable>();
    for (auto& entry : children) table.adopt_or_report(entry.first, std::move(entry.second));
  } catch (...) {
    adoption.engine_.report(RecordKind::notice, 0, 0,
                            "fastrevert: out of memory adopting new processes; retrying");
  }
}

void NurseryAdoption::shutdown() {
  shutting_down_ = true;
  if (!nursery_) return;
  // Children nobody adopted die with their handovers.
  nursery_->take_all();
  if (poll_open_) {
    poll_open_ = false;
    uv_close(reinterpret_cast<uv_handle_t*>(&poll_), nullptr);
  }
}

bool post_adoption(Engine& engine, std::uint64_t id, std::unique_ptr<ProcessHandover> child) {
  // A Command must be copyable, so the handover travels in a shared_ptr.
  auto shared = std::make_shared<std::unique_ptr<ProcessHandover>>(std::move(child));
  return engine.post([id, shared](Engine& e) {
    e.service<ProcessTable>().adopt_or_report(id, std::move(*shared));
  });
}

Handoff::Handoff(Engine& engine, Tuning tuning)
    : engine_(engine),
      tuning_(tuning),
      nursery_(std::make_shared<Nursery>(tuning.adoption_delay)),
      table_(engine, nullptr, Engine::Wake::no) {
  std::shared_ptr<Nursery> nursery = nursery_;
  engine_.post([nursery](Engine& e) { e.service<NurseryAdoption>().attend(nursery); });
}

Handoff::~Handoff() {
  // Between waits this thread's table holds no child.  The engine keeps the
  // nursery until it shuts down and kills the children left in it.
  table_.shutdown();
}

void Handoff::put(std::uint64_t id, std::unique_ptr<ProcessHandover> child) {
  nursery_->put(id, std::move(child));
}

void Handoff::hand_to_engine(std::uint64_t id) {
  std::unique_ptr<ProcessHandover> child = nursery_->take(id);
  if (child) post_adoption(engine_, id, std::move(child));
}

void Handoff::give_back() {
  engine_.watch_records(false);
  for (std::uint64_t id : table_.ids()) {
    bool streams = table_.bytes_read(id) > tuning_.streaming_bytes;
    std::unique_ptr<ProcessHandover> child = table_.hand_over(id);
    if (streams) {
      post_adoption(engine_, id, std::move(child));
    } else {
      nursery_->put(id, std::move(child));
    }
  }
}

std::optional<bool> Handoff::serve(std::chrono::nanoseconds timeout,
                                   const std::function<bool()>& should_quit) {
  if (nursery_->size() == 0) return std::nullopt;
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::optional<Clock::time_point> linger_end;
  bool ready = false;
  bool quit = false;
  try {
    for (auto& entry : nursery_->take_all()) {
      table_.adopt_or_report(entry.first, std::move(entry.second));
    }
    // The engine's results (other children, files) end the wait too.
    engine_.watch_records(true);
    for (;;) {
      ready = engine_.pending() > 0;
      Clock::time_point now = Clock::now();
      if (ready) {
        if (table_.size() == 0 || table_.streams(tuning_.streaming_bytes)) break;
        if (!linger_end) linger_end = now + tuning_.linger;
        if (now >= *linger_end) break;
      }
      if (now >= deadline || !engine_.running()) break;
      if (should_quit()) {
        quit = true;
        break;
      }
      fds_.clear();
      owners_.clear();
      Clock::time_point changes = table_.watched(fds_, owners_, now, tuning_.quiet_start);
      fds_.push_back(pollfd{engine_.records_fd(), POLLIN, 0});
      // Quit is looked at least this often.
      Clock::time_point until = std::min(
          {deadline, now + std::chrono::milliseconds(10), linger_end.value_or(deadline), changes});
      auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - now);
      if (poll_for(fds_.data(), fds_.size(), left) > 0 && (fds_.back().revents & POLLIN)) {
        engine_.clear_records_fd();
      }
      table_.serve(fds_, owners_);
    }
  } catch (...) {
    give_back();
    engine_.wake_if_pending();
    throw;
  }
  give_back();
  // Results Lisp will not drain now must wake it later.
  if (!ready || quit) engine_.wake_if_pending();
  return ready && !quit;
}

}  // namespace fastrevert
