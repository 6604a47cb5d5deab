#include "core/vcs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <vector>

namespace fastrevert {

namespace {

bool entry_exists(const std::string& path) {
  struct stat status;
  // lstat: Mercurial's wlock is a symlink to a name that does not exist.
  return lstat(path.c_str(), &status) == 0;
}

// The directory a ".git" file names ("gitdir: PATH"), as Git reads it: a
// relative PATH is relative to the file's directory.  Empty if FILE does not
// say.
std::string read_gitdir_file(const std::string& dir, const std::string& file) {
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::array<char, 4096> buffer;
  ssize_t length = read(fd, buffer.data(), buffer.size());
  close(fd);
  if (length <= 0) return {};
  std::string text(buffer.data(), static_cast<std::size_t>(length));
  const std::string prefix = "gitdir: ";
  if (text.compare(0, prefix.size(), prefix) != 0) return {};
  std::string path = text.substr(prefix.size());
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.pop_back();
  if (path.empty()) return {};
  if (path.front() != '/') path = (dir == "/" ? "" : dir) + "/" + path;
  return path;
}

// The control directory of a repository whose top is DIR itself, or empty.
// Git's is looked for first, as `vc-handled-backends' orders them.
std::string control_dir_in(const std::string& dir) {
  const std::string base = dir == "/" ? "" : dir;
  struct stat status;
  std::string git = base + "/.git";
  if (stat(git.c_str(), &status) == 0) {
    if (S_ISDIR(status.st_mode)) return git;
    if (S_ISREG(status.st_mode)) {
      std::string named = read_gitdir_file(dir, git);
      if (!named.empty()) return named;
    }
  }
  std::string hg = base + "/.hg";
  if (stat(hg.c_str(), &status) == 0 && S_ISDIR(status.st_mode)) return hg;
  return {};
}

std::string parent_of(const std::string& dir) {
  std::size_t slash = dir.rfind('/');
  if (slash == std::string::npos || slash == 0) return "/";
  return dir.substr(0, slash);
}

bool is_mercurial(const std::string& control_dir) {
  return control_dir.size() >= 4 && control_dir.compare(control_dir.size() - 4, 4, "/.hg") == 0;
}

}  // namespace

RepositoryState probe_repository(const std::string& control_dir) {
  RepositoryState state;
  if (is_mercurial(control_dir)) {
    state.locked = entry_exists(control_dir + "/wlock");
    return state;
  }
  state.locked = entry_exists(control_dir + "/index.lock");
  state.sequence = entry_exists(control_dir + "/rebase-merge") ||
                   entry_exists(control_dir + "/rebase-apply") ||
                   entry_exists(control_dir + "/sequencer");
  return state;
}

const std::string& RepositoryFinder::control_dir_of(const std::string& dir) {
  // Walk up until a directory is known or holds a repository, then give
  // every directory on the way the same answer.
  std::vector<std::string> walked;
  std::string current = dir.empty() ? "/" : dir;
  std::string control;
  for (;;) {
    auto known = control_dirs_.find(current);
    if (known != control_dirs_.end()) {
      control = known->second;
      break;
    }
    walked.push_back(current);
    control = control_dir_in(current);
    if (!control.empty() || current == "/") break;
    current = parent_of(current);
  }
  for (const auto& walked_dir : walked) control_dirs_[walked_dir] = control;
  // References into an unordered_map stay valid as it grows.
  return control_dirs_[walked.empty() ? current : walked.front()];
}

// ---------------------------------------------------------------------------
// OperationHold.

OperationHold::OperationHold(uv_loop_t* loop, Report report, Probe probe)
    : loop_(loop), report_(std::move(report)), probe_(std::move(probe)) {
  // uv_timer_init cannot fail on Unix; see Watcher::Watcher.
  uv_timer_init(loop_, &timer_);
  timer_.data = this;
}

void OperationHold::set_limit(std::chrono::milliseconds limit) {
  limit_ = std::max(limit, std::chrono::milliseconds(0));
  if (limit_.count() == 0) {
    // Nothing is held from now on, so nothing held waits any longer.
    while (!holds_.empty()) release(holds_.begin()->first, false);
    overdue_.clear();
  }
}

bool OperationHold::offer(std::uint64_t id, const std::string& control_dir,
                          const RepositoryState& state) {
  if (shut_down_ || limit_.count() == 0 || !state.busy()) return false;
  if (overdue_.count(control_dir) != 0) return false;
  std::uint64_t now = uv_now(loop_);
  auto [hold_it, inserted] = holds_.try_emplace(control_dir);
  Hold& hold = hold_it->second;
  if (inserted) {
    hold.started_at = now;
    hold.next_probe_at = now + static_cast<std::uint64_t>(kProbeInterval.count());
  }
  hold.state = state;
  hold.last_change_at = now;
  hold.ids.insert(id);
  arm_timer(now);
  return true;
}

std::unordered_set<std::uint64_t> OperationHold::update(const std::string& control_dir,
                                                        const RepositoryState& state) {
  if (shut_down_) return {};
  if (!state.busy()) overdue_.erase(control_dir);
  auto hold_it = holds_.find(control_dir);
  if (hold_it == holds_.end()) return {};
  std::uint64_t now = uv_now(loop_);
  Hold& hold = hold_it->second;
  hold.state = state;
  hold.probe_requested = false;
  hold.next_probe_at = now + static_cast<std::uint64_t>(kProbeInterval.count());
  std::unordered_set<std::uint64_t> ended = evaluate(control_dir, hold, now);
  arm_timer(now);
  return ended;
}

void OperationHold::forget(std::uint64_t id) {
  for (auto& [control_dir, hold] : holds_) hold.ids.erase(id);
}

void OperationHold::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  holds_.clear();
  uv_close(reinterpret_cast<uv_handle_t*>(&timer_), nullptr);
}

std::size_t OperationHold::held_changes() const noexcept {
  std::size_t count = 0;
  for (const auto& [control_dir, hold] : holds_) count += hold.ids.size();
  return count;
}

std::unordered_set<std::uint64_t> OperationHold::evaluate(const std::string& control_dir,
                                                          Hold& hold, std::uint64_t now) {
  auto quiet = static_cast<std::uint64_t>(kSequenceQuiet.count());
  bool running = hold.state.locked || (hold.state.sequence && now < hold.last_change_at + quiet);
  if (!running) return end_hold(control_dir, false);
  if (now >= hold.started_at + static_cast<std::uint64_t>(limit_.count())) {
    return end_hold(control_dir, true);
  }
  return {};
}

std::unordered_set<std::uint64_t> OperationHold::end_hold(const std::string& control_dir,
                                                          bool overdue) {
  auto hold_it = holds_.find(control_dir);
  if (hold_it == holds_.end()) return {};
  std::unordered_set<std::uint64_t> ids = std::move(hold_it->second.ids);
  if (overdue) overdue_.insert(control_dir);
  holds_.erase(hold_it);
  return ids;
}

void OperationHold::release(const std::string& control_dir, bool overdue) {
  // Ended first: reporting may run code that offers or updates.
  std::unordered_set<std::uint64_t> ids = end_hold(control_dir, overdue);
  if (!ids.empty()) report_(ids);
}

void OperationHold::on_timer(uv_timer_t* handle) noexcept {
  auto* self = static_cast<OperationHold*>(handle->data);
  try {
    self->expire(uv_now(self->loop_));
  } catch (...) {
    // Short of memory: what could not be released or probed is still held,
    // and is tried again shortly rather than left for ever.
    if (!self->shut_down_) uv_timer_start(&self->timer_, &OperationHold::on_timer, 100, 0);
  }
}

void OperationHold::expire(std::uint64_t now) {
  std::vector<std::string> to_probe;
  std::vector<std::string> overdue;
  for (auto& [control_dir, hold] : holds_) {
    if (now >= hold.started_at + static_cast<std::uint64_t>(limit_.count())) {
      overdue.push_back(control_dir);
    } else if (!hold.probe_requested && now >= hold.next_probe_at) {
      hold.probe_requested = true;
      to_probe.push_back(control_dir);
    }
  }
  for (const auto& control_dir : overdue) release(control_dir, true);
  for (const auto& control_dir : to_probe) probe_(control_dir);
  arm_timer(now);
}

void OperationHold::arm_timer(std::uint64_t now) {
  if (shut_down_) return;
  std::uint64_t next = UINT64_MAX;
  for (const auto& [control_dir, hold] : holds_) {
    next = std::min(next, hold.started_at + static_cast<std::uint64_t>(limit_.count()));
    if (!hold.probe_requested) next = std::min(next, hold.next_probe_at);
  }
  if (next == UINT64_MAX) {
    uv_timer_stop(&timer_);
    return;
  }
  uv_timer_start(&timer_, &OperationHold::on_timer, next > now ? next - now : 0, 0);
}

}  // namespace fastrevert
