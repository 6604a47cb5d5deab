#include "core/watcher.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

#include "core/errors.h"
#include "core/stat_time.h"

namespace fastrevert {

namespace {

// A file appended to continuously never goes quiet; after this many settle
// delays its batch is flushed anyway.
constexpr std::uint64_t kSettleCapFactor = 10;

// A sweep stuck on a dead mount holds one thread; a second one lets the
// files elsewhere be swept meanwhile, and later sweeps wait in our own
// pending list.
constexpr std::size_t kMaxSweepsInFlight = 2;

// Errors of adding a directory watch that concern one directory (it is gone,
// not a directory, unreadable) rather than a resource running out.  Those
// fall back to polling silently; the others deserve a notice.
bool is_path_specific_error(int error) {
  return error == ENOENT || error == ENOTDIR || error == EACCES || error == ELOOP ||
         error == ENAMETOOLONG;
}

// Explains the usual cause of a resource error, so the user knows which
// limit to raise.  On Linux every backend's directory watches are inotify's.
std::string failure_hint([[maybe_unused]] const std::string& function, int error) {
#if defined(__linux__)
  if (error == ENOSPC && (function == "inotify_add_watch" || function == "uv_fs_event_start"))
    return ": the inotify watch limit (sysctl fs.inotify.max_user_watches) is reached";
  if (error == EMFILE && (function == "inotify_init1" || function == "uv_fs_event_start"))
    return ": the inotify instance limit (sysctl fs.inotify.max_user_instances) or the "
           "open-file limit is reached";
#endif
  if (error == EMFILE) return ": the open-file limit of this process is reached";
  if (error == ENFILE) return ": the system-wide open-file limit is reached";
  if (error == ENOSPC) return ": the system's limit on file watches is reached";
  return "";
}

// What a notice says when kernel events may have been missed, rather than
// replaced by polling.
constexpr const char* kKernelEventsLost =
    "fastrevert re-stats every registered file now, but may miss later kernel events until "
    "fastrevert-mode is turned off and on again";

std::string describe_interval(std::chrono::milliseconds interval) {
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(interval.count()) / 1000.0);
  return text;
}

}  // namespace

FileSignature read_file_signature(const std::string& path) {
  FileSignature signature;
  struct stat status;
  if (stat(path.c_str(), &status) != 0) return signature;
  signature.exists = true;
  signature.device = status.st_dev;
  signature.inode = status.st_ino;
  signature.mode = status.st_mode;
  signature.size = status.st_size;
  signature.mtime_ns = mtime_ns(status);
  signature.ctime_ns = ctime_ns(status);
  return signature;
}

std::atomic<int>* WatcherTestHooks::fault(std::string_view kind) noexcept {
  if (kind == "add-watch-errno") return &add_watch_errno;
  if (kind == "init-errno") return &init_errno;
  if (kind == "stat-delay-ms") return &stat_delay_ms;
  return nullptr;
}

WatcherTestHooks& watcher_test_hooks() noexcept {
  static WatcherTestHooks hooks;
  return hooks;
}

Watcher::Watcher(Engine& engine)
    : engine_(engine),
      backend_(make_watch_backend(
          engine.loop(), *this,
          watcher_test_hooks().use_libuv_backend.load(std::memory_order_relaxed) ? "libuv" : "")),
      hold_(
          engine.loop(),
          [this](const std::unordered_set<std::uint64_t>& ids) { report_held_changes(ids); },
          [this](const std::string& control_dir) { request_probe(control_dir); }) {
  // uv_timer_init only fills in the handle and links it into the loop; it
  // cannot fail on Unix, so there is no half-initialized state to undo.
  uv_timer_init(engine_.loop(), &flush_timer_);
  flush_timer_.data = this;
  uv_timer_init(engine_.loop(), &poll_timer_);
  poll_timer_.data = this;
  uv_timer_init(engine_.loop(), &visible_timer_);
  visible_timer_.data = this;
}

Watcher::~Watcher() = default;

bool Watcher::sees_entry_names() const noexcept {
  return backend_->sees_entry_names() &&
         !watcher_test_hooks().blind_directory_watches.load(std::memory_order_relaxed);
}

bool Watcher::sees_file_writes() const noexcept {
  return backend_->sees_file_writes() &&
         !watcher_test_hooks().blind_directory_watches.load(std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// Registry.

void Watcher::add(std::uint64_t id, std::string path, WatchMode mode, bool contents) {
  if (shutting_down_) return;
  remove(id);
  if (mode == WatchMode::notify && split_path(path).second.empty()) mode = WatchMode::poll;

  auto [entry, inserted] = registry_.add(id, path, mode);
  WatchedPath& watched = *entry;
  if (inserted) {
    watched.incarnation = static_cast<std::uint32_t>(next_incarnation_++);
    watched.contents = contents;
  } else if (contents && !watched.contents) {
    // A name first registered as a plain file now matters as a directory.
    if (watched.has_kernel_interest) add_interest(registry_.name_of(watched));
    watched.contents = true;
  }
  watched.first_usable_sweep = static_cast<std::uint32_t>(next_sweep_number_);
  // The first id to watch by notification asks for the kernel's watches.
  if (mode == WatchMode::notify && !watched.has_kernel_interest) add_kernel_interest(watched);

  refresh_coverage(watched);
  // The baseline is taken off the loop like every other stat; until it
  // arrives the registration reports nothing.
  request_stat(watched);
  schedule_flush(FlushUrgency::now);
}

void Watcher::remove(std::uint64_t id) {
  WatchedPath* found = registry_.find_by_id(id);
  if (!found) return;
  WatchedPath& watched = *found;
  WatchMode mode = registry_.id_in(watched, id)->mode;
  registry_.remove(watched, id);
  hold_.forget(id);

  // The last id that watched by notification gives the kernel's watches up.
  if (mode == WatchMode::notify && !registry_.has_id_with_mode(watched, WatchMode::notify)) {
    drop_kernel_interest(watched);
  }
  if (!watched.has_ids) {
    // A sweep still in flight for this name finds no entry (or a newer
    // incarnation) and drops its result.
    if (watched.polled) {
      polled_paths_.erase(registry_.name_of(watched));
      engine_.stats().polled_files.store(polled_paths_.size(), std::memory_order_relaxed);
    }
    if (watched.in_repository) unlink_repository(watched);
    registry_.erase(&watched);
    update_poll_timer();
    return;
  }
  refresh_coverage(watched);
}

void Watcher::set_poll_interval(std::chrono::milliseconds interval) {
  if (interval.count() <= 0) interval = std::chrono::milliseconds(1);
  poll_interval_ = interval;
  if (shutting_down_) return;
  if (uv_is_active(reinterpret_cast<uv_handle_t*>(&poll_timer_))) {
    auto repeat = static_cast<std::uint64_t>(poll_interval_.count());
    uv_timer_start(&poll_timer_, &Watcher::guarded<&Watcher::on_poll_timer>, repeat, repeat);
  }
  update_visible_timer();
}

void Watcher::set_visible(std::vector<std::uint64_t> ids) {
  if (shutting_down_) return;
  visible_ids_.clear();
  visible_ids_.insert(ids.begin(), ids.end());
  update_visible_timer();
}

void Watcher::update_visible_timer() {
  if (shutting_down_) return;
  bool needed = !visible_ids_.empty() && !sees_file_writes();
  if (!needed) {
    uv_timer_stop(&visible_timer_);
    return;
  }
  auto repeat = static_cast<std::uint64_t>(std::min(poll_interval_, kVisiblePollInterval).count());
  if (uv_is_active(reinterpret_cast<uv_handle_t*>(&visible_timer_)) &&
      uv_timer_get_repeat(&visible_timer_) == repeat) {
    return;
  }
  uv_timer_start(&visible_timer_, &Watcher::guarded<&Watcher::on_visible_timer>, repeat, repeat);
}

void Watcher::on_visible_timer(uv_timer_t* handle) {
  auto* self = static_cast<Watcher*>(handle->data);
  if (self->shutting_down_) return;
  for (std::uint64_t id : self->visible_ids_) {
    WatchedPath* watched = self->registry_.find_by_id(id);
    if (watched && watched->has_kernel_interest) self->request_stat(*watched);
  }
  if (!self->pending_paths_.empty()) self->schedule_flush(FlushUrgency::now);
}

void Watcher::set_poll_notified(bool enabled) {
  poll_notified_ = enabled;
  update_poll_timer();
}

void Watcher::set_settle_delay(std::chrono::milliseconds delay) {
  if (delay.count() < 0) delay = std::chrono::milliseconds(0);
  settle_delay_ = delay;
}

void Watcher::rescan() {
  if (shutting_down_) return;
  mark_all_pending();
  schedule_flush(FlushUrgency::now);
}

void Watcher::inject_overflow() {
  if (shutting_down_) return;
  engine_.stats().kernel_events.fetch_add(1, std::memory_order_relaxed);
  handle_overflow();
}

bool Watcher::idle() const noexcept {
  if (flush_armed_ || !sweeps_in_flight_.empty() || !pending_probes_.empty()) return false;
  for (const auto& path : pending_paths_) {
    WatchedPath* watched = registry_.find(path);
    if (watched && watched->stat_pending) return false;
  }
  return true;
}

void Watcher::shutdown() {
  if (shutting_down_) return;
  shutting_down_ = true;
  // Sweeps that have not started are dropped, and one stuck in a hung stat
  // is abandoned to its thread: nothing waits for it.
  if (sweep_pool_) sweep_pool_->close();
  sweeps_in_flight_.clear();
  hold_.shutdown();
  pending_probes_.clear();
  uv_close(reinterpret_cast<uv_handle_t*>(&flush_timer_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&poll_timer_), nullptr);
  uv_close(reinterpret_cast<uv_handle_t*>(&visible_timer_), nullptr);
  backend_->shutdown();
  engine_.stats().watches.store(0, std::memory_order_relaxed);
  engine_.stats().polled_files.store(0, std::memory_order_relaxed);
}

// ---------------------------------------------------------------------------
// Kernel watches, one per directory, through the backend (see
// core/watch_backend.h).

template <typename Visit>
bool Watcher::any_interest_dir(const WatchedPath& watched, Visit visit) const {
  if (visit(registry_.dir_of(watched))) return true;
  if (watched.contents && visit(registry_.name_of(watched))) return true;
  const std::string* target = registry_.target_of(watched);
  return target != nullptr && visit(split_path(*target).first);
}

void Watcher::add_kernel_interest(WatchedPath& watched) {
  watched.has_kernel_interest = true;
  any_interest_dir(watched, [this](std::string_view dir) {
    add_interest(dir);
    return false;
  });
}

void Watcher::drop_kernel_interest(WatchedPath& watched) {
  watched.has_kernel_interest = false;
  any_interest_dir(watched, [this](std::string_view dir) {
    drop_interest(dir);
    return false;
  });
}

void Watcher::add_interest(std::string_view dir) {
  auto [dir_it, inserted] = dirs_.try_emplace(std::string(dir));
  ++dir_it->second.interests;
  if (inserted) try_watch_directory(dir_it->first, dir_it->second);
}

void Watcher::drop_interest(std::string_view dir) {
  auto dir_it = dirs_.find(std::string(dir));
  if (dir_it == dirs_.end()) return;
  if (--dir_it->second.interests == 0) {
    unwatch_directory(dir_it->first, dir_it->second);
    dirs_.erase(dir_it);
  }
}

bool Watcher::ensure_backend() {
  if (backend_started_) return true;
  const char* function = backend_->start_function();
  int error = watcher_test_hooks().init_errno.load(std::memory_order_relaxed);
  if (error == 0) error = backend_->start(function);
  if (error != 0) {
    notice_failure_once(function, error);
    return false;
  }
  backend_started_ = true;
  return true;
}

bool Watcher::try_watch_directory(const std::string& dir, WatchedDir& watched) {
  if (!ensure_backend()) return false;
  int watch;
  if (int injected = watcher_test_hooks().add_watch_errno.load(std::memory_order_relaxed)) {
    watch = -injected;
  } else {
    watch = backend_->add(dir);
  }
  if (watch < 0) {
    if (!is_path_specific_error(-watch)) notice_failure_once(backend_->add_function(), -watch);
    // Whatever the old watch was on, it no longer serves this name.
    unwatch_directory(dir, watched);
    return false;
  }
  if (watch != watched.watch) {
    // A different watch means the name now leads to a different directory
    // (it was made anew); the old watch is stale.
    unwatch_directory(dir, watched);
    watched.watch = watch;
    auto& keys = dirs_by_watch_[watch];
    if (std::find(keys.begin(), keys.end(), dir) == keys.end()) keys.push_back(dir);
    engine_.stats().watches.store(dirs_by_watch_.size(), std::memory_order_relaxed);
    if (backend_->add_may_lose_events() ||
        watcher_test_hooks().add_loses_events.load(std::memory_order_relaxed)) {
      restat_all_pending_ = true;
      schedule_flush(FlushUrgency::settle);
    }
  }
  return true;
}

void Watcher::unwatch_directory(const std::string& dir, WatchedDir& watched) {
  if (watched.watch < 0) return;
  int watch = watched.watch;
  watched.watch = -1;
  auto keys_it = dirs_by_watch_.find(watch);
  if (keys_it != dirs_by_watch_.end()) {
    auto& keys = keys_it->second;
    keys.erase(std::remove(keys.begin(), keys.end(), dir), keys.end());
    if (keys.empty()) {
      dirs_by_watch_.erase(keys_it);
      backend_->remove(watch);
    }
  }
  engine_.stats().watches.store(dirs_by_watch_.size(), std::memory_order_relaxed);
}

void Watcher::lose_watch(int watch, bool still_registered) {
  auto keys_it = dirs_by_watch_.find(watch);
  std::vector<std::string> keys = std::move(keys_it->second);
  dirs_by_watch_.erase(keys_it);
  if (still_registered) backend_->remove(watch);
  engine_.stats().watches.store(dirs_by_watch_.size(), std::memory_order_relaxed);
  // Every file seen through this directory is stat'ed (to report the
  // deletion) and polled from now on, once the events read with this one
  // are handled; the poll timer also retries the watch, and once the
  // directory exists again its files are re-stat'ed.
  for (auto& dir : keys) {
    auto dir_it = dirs_.find(dir);
    if (dir_it == dirs_.end()) continue;
    dir_it->second.watch = -1;
    lost_dirs_.insert(std::move(dir));
  }
}

void Watcher::restat_paths_in(const std::unordered_set<std::string>& dirs) {
  if (dirs.empty()) return;
  // One pass over the registry serves every directory: the names are not
  // indexed by directory, which would cost memory for every watched file.
  std::string key;
  auto seen_through = [&](std::string_view dir) {
    key.assign(dir);
    return dirs.count(key) != 0;
  };
  registry_.for_each([&](WatchedPath& watched) {
    if (watched.has_kernel_interest && any_interest_dir(watched, seen_through)) {
      request_stat(watched);
      refresh_coverage(watched);
    }
  });
  schedule_flush(FlushUrgency::settle);
}

void Watcher::refresh_coverage(WatchedPath& watched) {
  auto watched_dir = [this](std::string_view dir) {
    auto it = dirs_.find(std::string(dir));
    return it != dirs_.end() && it->second.watch >= 0;
  };
  // An entry has kernel interest exactly while one of its ids watches by
  // notification; the kernel covers it when every directory it needs is
  // watched, and the backend sees writes to the files in them.
  bool kernel_covers =
      watched.has_kernel_interest && !watched.base().empty() && !watched.link_unresolved &&
      sees_file_writes() &&
      !any_interest_dir(watched, [&](std::string_view dir) { return !watched_dir(dir); });
  bool should_poll = registry_.has_id_with_mode(watched, WatchMode::poll) ||
                     (watched.has_kernel_interest && !kernel_covers);
  if (should_poll != watched.polled) {
    watched.polled = should_poll;
    if (should_poll) {
      polled_paths_.insert(registry_.name_of(watched));
    } else {
      polled_paths_.erase(registry_.name_of(watched));
    }
    engine_.stats().polled_files.store(polled_paths_.size(), std::memory_order_relaxed);
  }
  update_poll_timer();
}

void Watcher::update_poll_timer() {
  if (shutting_down_) return;
  // Every directory without a watch has polled files in it, so the polled
  // set alone decides whether the timer (which also retries watches) runs.
  bool needed = !polled_paths_.empty() || (poll_notified_ && registry_.size() != 0);
  bool active = uv_is_active(reinterpret_cast<uv_handle_t*>(&poll_timer_)) != 0;
  if (needed && !active) {
    auto repeat = static_cast<std::uint64_t>(poll_interval_.count());
    uv_timer_start(&poll_timer_, &Watcher::guarded<&Watcher::on_poll_timer>, repeat, repeat);
  } else if (!needed && active) {
    uv_timer_stop(&poll_timer_);
  }
}

// ---------------------------------------------------------------------------
// Events.  The backend delivers them one by one, then says it has delivered
// what it read; the flush and the re-stat of lost directories wait for that.

void Watcher::on_entry_event(int watch, std::string_view name) {
  guarded([&] {
    if (shutting_down_) return;
    if (!sees_entry_names()) {
      on_directory_event(watch);
      return;
    }
    Stats& stats = engine_.stats();
    stats.kernel_events.fetch_add(1, std::memory_order_relaxed);
    bool matched = false;
    bool other_event = false;
    auto keys = dirs_by_watch_.find(watch);
    if (keys != dirs_by_watch_.end()) {
      for (const auto& dir : keys->second) {
        // The event's own name, a symlink whose target it is, and the
        // directory itself when registered with its contents, which every
        // event inside it concerns.
        auto dirty = [&](WatchedPath* watched) {
          if (!watched || !watched->has_kernel_interest) return;
          request_stat(*watched);
          matched = true;
          if (watched->has_ids && is_control_id(watched->first_id)) {
            control_events_marked_ = true;
          } else {
            other_event = true;
          }
        };
        if (!name.empty()) {
          dirty(registry_.find_in(dir, name));
          if (const auto* links = registry_.links_to(dir, name)) {
            for (WatchedPath* link : *links) dirty(link);
          }
        }
        WatchedPath* listed = registry_.find(dir);
        if (listed && listed->contents) dirty(listed);
      }
    }
    if (matched) {
      // A change of a visited file waits for the settle delay; one of a
      // control file alone is looked at sooner.
      if (other_event) events_marked_ = true;
    } else {
      stats.events_dropped_natively.fetch_add(1, std::memory_order_relaxed);
    }
  });
}

void Watcher::on_directory_event(int watch) {
  guarded([&] {
    if (shutting_down_) return;
    engine_.stats().kernel_events.fetch_add(1, std::memory_order_relaxed);
    auto keys = dirs_by_watch_.find(watch);
    if (keys == dirs_by_watch_.end()) {
      engine_.stats().events_dropped_natively.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // Which entry changed is not known: every name seen through the
    // directory is stat'ed.
    std::unordered_set<std::string> dirs(keys->second.begin(), keys->second.end());
    restat_paths_in(dirs);
  });
}

void Watcher::on_watch_lost(int watch, bool still_registered) {
  guarded([&] {
    if (shutting_down_) return;
    engine_.stats().kernel_events.fetch_add(1, std::memory_order_relaxed);
    if (dirs_by_watch_.count(watch) != 0) {
      lose_watch(watch, still_registered);
    } else {
      engine_.stats().events_dropped_natively.fetch_add(1, std::memory_order_relaxed);
    }
  });
}

void Watcher::on_events_lost() {
  guarded([&] {
    if (shutting_down_) return;
    engine_.stats().kernel_events.fetch_add(1, std::memory_order_relaxed);
    handle_overflow();
  });
}

void Watcher::on_backend_failure(const char* function, int error) {
  guarded([&] { notice_failure_once(function, error, kKernelEventsLost); });
}

void Watcher::on_events_delivered() {
  guarded([&] {
    if (shutting_down_) return;
    // A control file's change brings forward the flush that other changes
    // read with it put back: the operation that made them all is seen
    // through the repository's locks.
    if (std::exchange(events_marked_, false)) schedule_flush(FlushUrgency::settle);
    if (std::exchange(control_events_marked_, false)) schedule_flush(FlushUrgency::control);
    std::unordered_set<std::string> lost;
    lost.swap(lost_dirs_);
    restat_paths_in(lost);
  });
}

void Watcher::handle_overflow() {
  engine_.stats().overflows.fetch_add(1, std::memory_order_relaxed);
  // Lost events may include a directory's IN_IGNORED, so every directory
  // watch is re-added: the same descriptor means it is intact, a new one that
  // the directory was recreated, a failure that it is gone.
  for (auto& dir_entry : dirs_) try_watch_directory(dir_entry.first, dir_entry.second);
  registry_.for_each([this](WatchedPath& watched) { refresh_coverage(watched); });
  mark_all_pending();
  schedule_flush(FlushUrgency::now);
}

void Watcher::on_poll_timer(uv_timer_t* handle) {
  auto* self = static_cast<Watcher*>(handle->data);
  if (self->shutting_down_) return;
  // Directories without a watch (gone, or refused by the kernel) are retried
  // first; the files of one that is back are re-stat'ed, so a file recreated
  // with its directory is reported.
  std::unordered_set<std::string> returned;
  for (auto& dir_entry : self->dirs_) {
    WatchedDir& dir = dir_entry.second;
    if (dir.watch >= 0 || !self->try_watch_directory(dir_entry.first, dir)) continue;
    returned.insert(dir_entry.first);
  }
  self->restat_paths_in(returned);
  if (self->poll_notified_) {
    self->registry_.for_each([self](WatchedPath& watched) { self->request_stat(watched); });
  } else {
    for (const auto& path : self->polled_paths_) {
      if (WatchedPath* watched = self->registry_.find(path)) self->request_stat(*watched);
    }
  }
  if (!self->pending_paths_.empty()) self->schedule_flush(FlushUrgency::now);
}

// ---------------------------------------------------------------------------
// Confirming changes.  Kernel events, polling, overflows, rescans and new
// registrations all end here: the name is marked pending, a flush launches a
// sweep of every pending name on the threadpool, and apply_sweep compares
// the results with each id's baseline and emits the records.

void Watcher::mark_all_pending() {
  registry_.for_each([this](WatchedPath& watched) { request_stat(watched); });
}

void Watcher::request_stat(WatchedPath& watched) {
  if (watched.stat_pending) return;
  watched.stat_pending = true;
  pending_paths_.push_back(registry_.name_of(watched));
}

// One flush timer serves every directory rather than one per directory: a
// checkout that touches hundreds of directories at once then becomes one
// batch and one threadpool job, not hundreds, and the cap still bounds how long
// a busy directory can hold back the report of a quiet one.
void Watcher::schedule_flush(FlushUrgency urgency) {
  if (shutting_down_) return;
  std::uint64_t now = uv_now(engine_.loop());
  bool newly_armed = !flush_armed_;
  if (newly_armed) {
    flush_armed_ = true;
    urgent_flush_requested_ = false;
    first_flush_request_at_ = now;
  }
  if (urgency == FlushUrgency::now) {
    urgent_flush_requested_ = true;
    flush_deadline_ = now;
  } else if (urgency == FlushUrgency::control && !urgent_flush_requested_) {
    // Brought forward, never put back: a file changed just before waits
    // less than its settle delay, but the look into its repository holds
    // its change while the operation that wrote it runs.
    auto control = static_cast<std::uint64_t>(std::min(kControlSettle, settle_delay_).count());
    flush_deadline_ = newly_armed ? now + control : std::min(flush_deadline_, now + control);
  } else if (!urgent_flush_requested_) {
    // Each event pushes the flush back by the settle delay, up to a cap
    // counted from the first event of the batch.
    auto settle = static_cast<std::uint64_t>(settle_delay_.count());
    flush_deadline_ = std::min(now + settle, first_flush_request_at_ + kSettleCapFactor * settle);
  }
  std::uint64_t delay = flush_deadline_ > now ? flush_deadline_ - now : 0;
  uv_timer_start(&flush_timer_, &Watcher::guarded<&Watcher::on_flush_timer>, delay, 0);
}

std::int64_t Watcher::flush_in() const noexcept {
  if (!flush_armed_) return -1;
  return static_cast<std::int64_t>(flush_deadline_) -
         static_cast<std::int64_t>(uv_now(engine_.loop()));
}

void Watcher::on_flush_timer(uv_timer_t* handle) {
  auto* self = static_cast<Watcher*>(handle->data);
  self->flush_armed_ = false;
  self->urgent_flush_requested_ = false;
  self->launch_sweeps();
}

void Watcher::launch_sweeps() {
  if (shutting_down_) return;
  if (std::exchange(restat_all_pending_, false)) mark_all_pending();
  if (pending_paths_.empty() && pending_probes_.empty()) return;
  // At the cap, the pending names wait; after_sweep calls back here.
  if (sweeps_in_flight_.size() >= kMaxSweepsInFlight) return;

  auto job = std::make_shared<SweepJob>();
  job->number = next_sweep_number_++;
  std::vector<std::string> still_pending;
  for (auto& path : pending_paths_) {
    WatchedPath* found = registry_.find(path);
    if (!found) continue;
    WatchedPath& watched = *found;
    if (!watched.stat_pending) continue;
    if (watched.stat_in_flight) {
      // One stat per name at a time, so results apply in order; this one is
      // swept again when the current stat returns.
      still_pending.push_back(std::move(path));
      continue;
    }
    watched.stat_pending = false;
    watched.stat_in_flight = true;
    SweepEntry entry;
    entry.path = path;
    entry.incarnation = watched.incarnation;
    entry.contents = watched.contents;
    if (watched.base() == "HEAD") {
      registry_.for_each_id(watched, [&](RegisteredId& node) {
        if (entry.read_head || !is_control_id(node.id)) return;
        auto control = control_ids_.find(node.id);
        auto repository = control == control_ids_.end()
                              ? repositories_.end()
                              : repositories_.find(control->second.control_dir);
        if (repository == repositories_.end()) return;
        entry.read_head = true;
        entry.common_dir = repository->second.common_dir;
      });
    }
    job->entries.push_back(std::move(entry));
  }
  pending_paths_ = std::move(still_pending);
  for (const auto& control_dir : pending_probes_) {
    job->repositories.emplace_back(control_dir, RepositoryState{});
  }
  pending_probes_.clear();
  if (job->entries.empty() && job->repositories.empty()) return;

  try {
    if (!sweep_pool_) {
      sweep_pool_ = std::make_unique<WorkerPool>(engine_.loop(), kMaxSweepsInFlight);
    }
    sweeps_in_flight_.insert(job.get());
    sweep_pool_->submit([job] { run_sweep(*job); },
                        [this, job] {
                          sweeps_in_flight_.erase(job.get());
                          try {
                            after_sweep(*job);
                          } catch (...) {
                            // The entries not applied must not stay in flight
                            // for ever; recover() stats them all again.
                            for (const auto& entry : job->entries) {
                              if (WatchedPath* watched = registry_.find(entry.path)) {
                                watched->stat_in_flight = false;
                              }
                            }
                            recover();
                          }
                        });
  } catch (const std::exception& error) {
    // Keep the names pending rather than losing them.
    sweeps_in_flight_.erase(job.get());
    for (auto& entry : job->entries) {
      WatchedPath* watched = registry_.find(entry.path);
      if (!watched) continue;
      watched->stat_in_flight = false;
      request_stat(*watched);
    }
    const auto* system = dynamic_cast<const std::system_error*>(&error);
    notice_failure_once("pthread_create", system ? system->code().value() : ENOMEM,
                        "the pending files are stat'ed on the next change or rescan");
  }
}

// A pool thread.  Touches only the job, never the watcher: a hung stat here
// stalls this job alone while the loop goes on serving everything else.
void Watcher::run_sweep(SweepJob& job) noexcept {
  int delay_ms = watcher_test_hooks().stat_delay_ms.load(std::memory_order_relaxed);
  for (auto& entry : job.entries) {
    if (delay_ms > 0) {
      watcher_test_hooks().delayed_stats_started.fetch_add(1, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    }
    entry.signature = read_file_signature(entry.path);
    if (entry.read_head) {
      try {
        entry.head_ref = read_head_ref(entry.path);
        if (!entry.head_ref.empty()) {
          entry.branch = read_file_signature(entry.common_dir + "/" + entry.head_ref);
        }
      } catch (...) {
        // Short of memory: the branch's file stays as it was, and HEAD's
        // change is still reported.
        entry.read_head = false;
      }
    }
    struct stat link_status;
    entry.is_symlink = lstat(entry.path.c_str(), &link_status) == 0 && S_ISLNK(link_status.st_mode);
    if (!entry.is_symlink) continue;
    if (char* resolved = realpath(entry.path.c_str(), nullptr)) {
      try {
        entry.resolved_path = resolved;
        entry.resolved = true;
      } catch (...) {
        // Unresolved, the link is polled: its target is still seen.
      }
      std::free(resolved);
    }
  }
  try {
    probe_repositories(job);
  } catch (...) {
    // Short of memory: the files are reported as if outside any repository,
    // at once, rather than held.
    job.repositories.clear();
    for (auto& entry : job.entries) entry.repository = -1;
  }
}

void Watcher::after_sweep(SweepJob& job) {
  if (shutting_down_) return;
  apply_sweep(job);
  if (!pending_paths_.empty()) schedule_flush(FlushUrgency::settle);
}

template <void (*Callback)(uv_timer_t*)>
void Watcher::guarded(uv_timer_t* handle) noexcept {
  try {
    Callback(handle);
  } catch (...) {
    static_cast<Watcher*>(handle->data)->recover();
  }
}

template <typename Fn>
void Watcher::guarded(Fn&& fn) noexcept {
  try {
    fn();
  } catch (...) {
    recover();
  }
}

void Watcher::recover() noexcept {
  engine_.report(RecordKind::notice, 0, 0,
                 "fastrevert: the file watcher ran short of memory; every watched file is "
                 "stat'ed again");
  try {
    mark_all_pending();
    schedule_flush(FlushUrgency::now);
  } catch (...) {
    // The next poll, event or rescan tries again.
  }
}

void Watcher::apply_sweep(SweepJob& job) {
  // A hold this sweep ends reports its files.  A change the same sweep
  // confirms for one of them (the last write before the lock went away) is
  // that report again, so it is left out.
  std::unordered_set<std::uint64_t> released = apply_repositories(job);
  std::size_t emitted = emit_changes(released);
  // HEADs read by this sweep, applied once every entry is: a new branch
  // changes which control files are registered.
  std::vector<std::pair<std::uint64_t, const SweepEntry*>> heads;
  for (const auto& entry : job.entries) {
    WatchedPath* found = registry_.find(entry.path);
    if (!found || found->incarnation != entry.incarnation) continue;
    WatchedPath& watched = *found;
    watched.stat_in_flight = false;
    // Every id with a baseline has the same one (see WatchedPath), so
    // whether the file changed is one question for all of them.
    bool had_baseline = false;
    registry_.for_each_id(
        watched, [&](RegisteredId& node) { had_baseline = had_baseline || node.has_baseline; });
    bool changed = had_baseline && !registry_.baseline_matches(watched, entry.signature);
    bool baselined = had_baseline;
    registry_.for_each_id(watched, [&](RegisteredId& node) {
      if (!node.has_baseline) {
        if (!watched.sweep_is_usable(job.number)) {
          // Stat'ed before this id registered; its baseline needs a fresh one.
          request_stat(watched);
          return;
        }
        // From here on every change is reported.  Saying so lets Emacs check
        // the buffer once now, which covers a change made after it read the
        // file but before this stat.
        node.has_baseline = true;
        baselined = true;
        if (is_control_id(node.id)) {
          // Not held: an operation under way moves HEAD or the index again
          // when it ends, and that change is.
          auto control = control_ids_.find(node.id);
          if (control != control_ids_.end() && control->second.report_first_look) {
            report_change(node.id, entry.path);
          }
          return;
        }
        // In a repository a VCS operation is changing, that first check would
        // read a half-written state; it waits for the operation like a change.
        bool held = hold_change(node.id, job, entry);
        engine_.emit(Record{RecordKind::file_watched, node.id, held ? 1 : 0, entry.path},
                     Engine::Wake::no);
        return;
      }
      if (!changed) return;
      if (hold_change(node.id, job, entry) || released.count(node.id) != 0) return;
      if (report_change(node.id, entry.path)) ++emitted;
    });
    if (baselined) registry_.set_baseline(watched, entry.signature);
    // Which branch's file is watched follows HEAD at once, whether the
    // change of HEAD is reported now or held.
    if (entry.read_head && (changed || (baselined && !had_baseline))) {
      registry_.for_each_id(watched, [&](RegisteredId& node) {
        if (is_control_id(node.id)) heads.emplace_back(node.id, &entry);
      });
    }
    update_link_target(watched, entry);
    link_repository(watched, entry, job);
  }
  for (const auto& [id, head] : heads) note_head(id, *head);
  if (emitted > 0) engine_.stats().batches.fetch_add(1, std::memory_order_relaxed);
  report_repository_changes();
  // One wake for the whole sweep, once every record is queued: Emacs then
  // takes them in one drain and reverts them as one batch, rather than
  // starting on the first while the rest are still being queued.
  engine_.wake_if_pending();
}

void Watcher::update_link_target(WatchedPath& watched, const SweepEntry& entry) {
  bool linked = entry.is_symlink && entry.resolved;
  watched.link_unresolved = entry.is_symlink && !entry.resolved;
  const std::string* old_target = registry_.target_of(watched);
  if (linked ? !old_target || *old_target != entry.resolved_path : old_target != nullptr) {
    if (watched.has_kernel_interest && old_target) drop_interest(split_path(*old_target).first);
    registry_.set_target(watched, linked ? &entry.resolved_path : nullptr);
    if (watched.has_kernel_interest && linked) {
      add_interest(split_path(entry.resolved_path).first);
      // The target may have changed between this sweep's stat and the new
      // watch; one more stat closes that window.
      request_stat(watched);
    }
  }
  refresh_coverage(watched);
}

void Watcher::notice_failure_once(const char* function, int error, const char* consequence) {
  if (!noticed_failures_.emplace(function, error).second) return;
  std::string message = std::string("fastrevert: ") + function + " failed with " +
                        errno_name(error) + " (" +
                        std::error_code(error, std::generic_category()).message() + ")" +
                        failure_hint(function, error) + "; ";
  if (consequence) {
    message += consequence;
  } else {
    message += "fastrevert falls back to polling the affected files every " +
               describe_interval(poll_interval_) + " (auto-revert-interval)";
  }
  engine_.emit(Record{RecordKind::notice, 0, 0, std::move(message)});
}

}  // namespace fastrevert
