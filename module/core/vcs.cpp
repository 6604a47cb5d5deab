#include "core/vcs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <time.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/stat_time.h"

namespace fastrevert {

namespace {

// Git's lock files end so; a command creates one beside each file it is
// about to replace and renames it over that file when done.
constexpr std::string_view kLockSuffix = ".lock";

// Refs are usually a handful of branches; a repository with a great many
// loose ones is looked into only this far for their locks.
constexpr int kMaxRefEntries = 4096;

// What HEAD names in a repository whose refs are in the reftable format,
// where HEAD itself is only kept for older Git to recognize the directory.
constexpr std::string_view kReftableHead = "refs/heads/.invalid";

bool entry_exists(const std::string& path) {
  struct stat status;
  // lstat: Mercurial's wlock is a symlink to a name that does not exist.
  return lstat(path.c_str(), &status) == 0;
}

// The first 4 KiB of FILE, or empty if it cannot be read.  The files read
// here (".git" files, "commondir", HEAD) are a line long.
std::string read_small_file(const std::string& file) {
  int fd = open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return {};
  std::array<char, 4096> buffer;
  ssize_t length = read(fd, buffer.data(), buffer.size());
  close(fd);
  if (length <= 0) return {};
  return std::string(buffer.data(), static_cast<std::size_t>(length));
}

// TEXT's first line, without its line end.
std::string first_line(std::string_view text) {
  std::string_view line = text.substr(0, text.find('\n'));
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return std::string(line);
}

// PATH as Git reads a directory named in a file of DIR: relative to DIR.
std::string relative_to(const std::string& dir, std::string path) {
  if (!path.empty() && path.front() != '/') path = (dir == "/" ? "" : dir) + "/" + path;
  return path;
}

// The directory a ".git" file names ("gitdir: PATH"), as Git reads it: a
// relative PATH is relative to the file's directory.  Empty if FILE does not
// say.
std::string read_gitdir_file(const std::string& dir, const std::string& file) {
  std::string text = read_small_file(file);
  const std::string prefix = "gitdir: ";
  if (text.compare(0, prefix.size(), prefix) != 0) return {};
  return relative_to(dir, first_line(std::string_view(text).substr(prefix.size())));
}

// Sets STATE's quiet_in: if an entry of one of DIRS was added, removed or
// renamed less than kLockQuiet ago, the time until the latest such change
// is that old.  Locks come and go by such changes, and a directory's
// modification time follows them; it is read against the same clock.
void note_lock_changes(std::initializer_list<std::string> dirs, RepositoryState& state) {
  timespec now;
  if (clock_gettime(CLOCK_REALTIME, &now) != 0) return;
  std::int64_t quiet =
      std::chrono::duration_cast<std::chrono::nanoseconds>(kLockQuiet).count();
  std::int64_t left = 0;
  for (const auto& dir : dirs) {
    struct stat status;
    if (stat(dir.c_str(), &status) != 0) continue;
    left = std::max(left, quiet - (timespec_ns(now) - mtime_ns(status)));
  }
  if (left <= 0) return;
  // Rounded up: a look this soon finds the change quiet.
  state.quiet_in = std::chrono::milliseconds((left + 999'999) / 1'000'000);
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Whether DIR or a directory below it holds a lock file, looking at no more
// than *BUDGET entries in all.
bool lock_below(const std::string& dir, int* budget) {
  DIR* stream = opendir(dir.c_str());
  if (!stream) return false;
  bool found = false;
  while (!found && *budget > 0) {
    dirent* entry = readdir(stream);
    if (!entry) break;
    --*budget;
    std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (ends_with(name, kLockSuffix)) {
      found = true;
    } else if (entry->d_type == DT_DIR || entry->d_type == DT_UNKNOWN) {
      found = lock_below(dir + "/" + entry->d_name, budget);
    }
  }
  closedir(stream);
  return found;
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

}  // namespace

bool is_mercurial(const std::string& control_dir) noexcept {
  return ends_with(control_dir, "/.hg");
}

std::string git_common_dir(const std::string& control_dir) {
  std::string named = first_line(read_small_file(control_dir + "/commondir"));
  return named.empty() ? control_dir : relative_to(control_dir, std::move(named));
}

std::string head_ref_of(std::string_view text) {
  constexpr std::string_view prefix = "ref: ";
  if (text.substr(0, prefix.size()) != prefix) return {};
  return first_line(text.substr(prefix.size()));
}

std::string read_head_ref(const std::string& head_file) {
  return head_ref_of(read_small_file(head_file));
}

RepositoryState probe_repository(const std::string& control_dir) {
  RepositoryState state;
  if (is_mercurial(control_dir)) {
    // The working directory's lock, and the store's (older repositories
    // keep it beside the other).
    state.locked = entry_exists(control_dir + "/wlock") ||
                   entry_exists(control_dir + "/store/lock") || entry_exists(control_dir + "/lock");
    note_lock_changes({control_dir}, state);
    return state;
  }
  // A checkout commits the index and only then moves HEAD, and a commit
  // moves its branch before it commits the index: every lock of the files
  // that decide what a work tree holds and what VC shows keeps the hold.
  // Branches are what HEAD names; tags and remote-tracking refs change
  // neither.
  state.common_dir = git_common_dir(control_dir);
  const std::string& common_dir = state.common_dir;
  int budget = kMaxRefEntries;
  state.locked = entry_exists(control_dir + "/index.lock") ||
                 entry_exists(control_dir + "/HEAD.lock") ||
                 entry_exists(common_dir + "/packed-refs.lock") ||
                 entry_exists(common_dir + "/reftable/tables.list.lock") ||
                 lock_below(common_dir + "/refs/heads", &budget);
  state.sequence = entry_exists(control_dir + "/rebase-merge") ||
                   entry_exists(control_dir + "/rebase-apply") ||
                   entry_exists(control_dir + "/sequencer");
  note_lock_changes({control_dir, common_dir, common_dir + "/refs/heads"}, state);
  return state;
}

std::vector<ControlFile> control_files(const std::string& control_dir,
                                       const std::string& common_dir, std::string_view head_ref,
                                       bool with_index) {
  std::vector<ControlFile> files;
  if (is_mercurial(control_dir)) {
    // The branch, and the bookmarks with the active one, which vc-hg shows.
    // The dirstate holds each file's state, but also the working
    // directory's parents, what HEAD is to Git: it is always watched.
    for (const char* name : {"branch", "bookmarks", "bookmarks.current", "dirstate"}) {
      files.push_back({ControlRole::head, control_dir + "/" + name});
    }
    return files;
  }
  files.push_back({ControlRole::head, control_dir + "/HEAD"});
  if (head_ref == kReftableHead) {
    // Refs in the reftable format: every ref update replaces its list of
    // tables.
    files.push_back({ControlRole::head, common_dir + "/reftable/tables.list"});
  } else {
    // A branch lives in a file of its own, or, once packed, in packed-refs.
    if (!head_ref.empty()) {
      files.push_back({ControlRole::head, common_dir + "/" + std::string(head_ref)});
    }
    files.push_back({ControlRole::head, common_dir + "/packed-refs"});
  }
  if (with_index) files.push_back({ControlRole::index, control_dir + "/index"});
  return files;
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

namespace {

// When a held repository in STATE is looked into next: as soon as its
// locks' coming and going is kLockQuiet old when nothing else keeps it
// busy, so that the end of an operation is seen that soon, and every
// kProbeInterval while a lock or a sequence lasts.
std::uint64_t probe_delay(const RepositoryState& state) {
  bool settling_only = state.settling() && !state.locked && !state.sequence;
  auto delay = settling_only ? state.quiet_in : OperationHold::kProbeInterval;
  return static_cast<std::uint64_t>(delay.count());
}

}  // namespace

bool OperationHold::offer(std::uint64_t id, const std::string& control_dir,
                          const RepositoryState& state) {
  if (shut_down_ || limit_.count() == 0 || !state.busy()) return false;
  if (overdue_.count(control_dir) != 0) return false;
  std::uint64_t now = uv_now(loop_);
  auto [hold_it, inserted] = holds_.try_emplace(control_dir);
  Hold& hold = hold_it->second;
  if (inserted) {
    hold.started_at = now;
    hold.next_probe_at = now + probe_delay(state);
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
  hold.next_probe_at = now + probe_delay(state);
  std::unordered_set<std::uint64_t> ended = evaluate(control_dir, hold, now);
  arm_timer(now);
  return ended;
}

std::int64_t OperationHold::next_probe_in(const std::string& control_dir) const {
  auto hold_it = holds_.find(control_dir);
  if (hold_it == holds_.end()) return -1;
  return static_cast<std::int64_t>(hold_it->second.next_probe_at) -
         static_cast<std::int64_t>(uv_now(loop_));
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

std::unordered_set<std::uint64_t> OperationHold::evaluate(const std::string& control_dir,
                                                          Hold& hold, std::uint64_t now) {
  auto quiet = static_cast<std::uint64_t>(kSequenceQuiet.count());
  bool running = hold.state.locked || hold.state.settling() ||
                 (hold.state.sequence && now < hold.last_change_at + quiet);
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
