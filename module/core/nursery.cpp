#include "core/nursery.h"

#include <sys/timerfd.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>

#include "core/errors.h"

namespace fastrevert {

Nursery::Nursery(std::chrono::microseconds adoption_delay) : delay_(adoption_delay) {
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  if (timer_fd_ < 0) throw_errno("timerfd_create");
}

Nursery::~Nursery() {
  // The children's destructors kill and reap them.
  children_.clear();
  close(timer_fd_);
}

void Nursery::put(std::uint64_t id, std::unique_ptr<ProcessHandover> child) {
  std::lock_guard<std::mutex> lock(mutex_);
  children_[id] = std::move(child);
  if (armed_) return;
  itimerspec due{};
  auto micros = delay_.count() > 0 ? delay_.count() : 1;
  due.it_value.tv_sec = static_cast<time_t>(micros / 1000000);
  due.it_value.tv_nsec = static_cast<long>(micros % 1000000) * 1000;
  // Arming a valid timerfd with a valid time cannot fail.
  timerfd_settime(timer_fd_, 0, &due, nullptr);
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

void Nursery::disarm_if_empty_locked() noexcept {
  if (!armed_ || !children_.empty()) return;
  itimerspec never{};
  timerfd_settime(timer_fd_, 0, &never, nullptr);
  armed_ = false;
}

std::size_t Nursery::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return children_.size();
}

void Nursery::acknowledge() noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  std::uint64_t expirations;
  ssize_t ignored = read(timer_fd_, &expirations, sizeof expirations);
  (void)ignored;
  armed_ = false;
}

}  // namespace fastrevert
