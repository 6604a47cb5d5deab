// The watcher's part in version control: the operations that hold back a
// repository's changes, and the control files whose changes are reported
// for the files of their repository.  See vcs.h.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/watcher.h"

namespace fastrevert {

namespace {

unsigned role_bit(ControlRole role) noexcept {
  return 1u << static_cast<unsigned>(role);
}

// Whether PATH is inside DIR: a file of the control directory itself.
bool is_inside(std::string_view path, std::string_view dir) noexcept {
  return path.size() > dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         path[dir.size()] == '/';
}

}  // namespace

// ---------------------------------------------------------------------------
// VCS operations.  Every sweep finds the repositories of its files and looks
// into each of them after it has stat'ed the files, so a repository found
// idle was idle when the last of them was stat'ed: whatever Emacs reads
// afterwards is what the operation left.  The hold (vcs.h) decides from that
// whether a confirmed change is reported at once or when the operation ends.

void Watcher::probe_repositories(SweepJob& job) {
  RepositoryFinder finder;
  std::unordered_map<std::string, int> index_of;
  for (std::size_t i = 0; i < job.repositories.size(); ++i) {
    index_of.emplace(job.repositories[i].first, static_cast<int>(i));
  }
  for (auto& entry : job.entries) {
    // A directory registered with its contents (Dired) belongs to the
    // repository it is in; a file, even a deleted one, to its directory's.
    const std::string& control_dir = finder.control_dir_of(
        entry.contents ? entry.path : std::string(split_path(entry.path).first));
    if (control_dir.empty()) continue;
    auto [index_it, inserted] =
        index_of.try_emplace(control_dir, static_cast<int>(job.repositories.size()));
    if (inserted) job.repositories.emplace_back(control_dir, RepositoryState{});
    entry.repository = index_it->second;
  }
  for (auto& [control_dir, state] : job.repositories) state = probe_repository(control_dir);
}

std::unordered_set<std::uint64_t> Watcher::apply_repositories(const SweepJob& job) {
  std::unordered_set<std::uint64_t> released;
  for (const auto& [control_dir, state] : job.repositories) {
    released.merge(hold_.update(control_dir, state));
  }
  return released;
}

bool Watcher::hold_change(std::uint64_t id, const SweepJob& job, const SweepEntry& entry) {
  if (entry.repository < 0) return false;
  const auto& [control_dir, state] = job.repositories[static_cast<std::size_t>(entry.repository)];
  return hold_.offer(id, control_dir, state);
}

std::size_t Watcher::emit_changes(const std::unordered_set<std::uint64_t>& ids) {
  std::size_t emitted = 0;
  for (std::uint64_t id : ids) {
    WatchedPath* watched = registry_.find_by_id(id);
    if (watched && report_change(id, registry_.name_of(*watched))) ++emitted;
  }
  return emitted;
}

bool Watcher::report_change(std::uint64_t id, std::string_view path) {
  if (!is_control_id(id)) {
    engine_.emit(Record{RecordKind::file_changed, id, 0, std::string(path)}, Engine::Wake::no);
    return true;
  }
  auto control = control_ids_.find(id);
  if (control == control_ids_.end()) return false;
  auto repository = repositories_.find(control->second.control_dir);
  if (repository != repositories_.end()) {
    repository->second.changed |= role_bit(control->second.role);
  }
  return false;
}

void Watcher::report_held_changes(const std::unordered_set<std::uint64_t>& ids) {
  if (emit_changes(ids) > 0) engine_.stats().batches.fetch_add(1, std::memory_order_relaxed);
  report_repository_changes();
  engine_.wake_if_pending();
}

void Watcher::request_probe(const std::string& control_dir) {
  if (shutting_down_) return;
  pending_probes_.insert(control_dir);
  // After the short settle of a control file's change, files still being
  // reported join the same sweep, and the hold ends in the batch that
  // reports them.
  schedule_flush(FlushUrgency::control);
}

void Watcher::set_hold_limit(std::chrono::milliseconds limit) {
  hold_.set_limit(limit);
}

// ---------------------------------------------------------------------------
// Control files.  A checkout, a commit or a branch switch changes what VC
// shows for every file of the repository, though it may change no file that
// Emacs visits, and Git moves HEAD only after it has written the work tree
// and the index.  So the watcher watches HEAD and the branch it names (and,
// for auto-revert-check-vc-info, the index) like any registered file, held
// like them while an operation runs, and reports a change to one of them as
// a change of VC state for every file linked to its repository.  Mercurial's
// branch, bookmarks and dirstate serve the same ends.

void Watcher::link_repository(WatchedPath& watched, const SweepEntry& entry, const SweepJob& job) {
  static const std::string kNone;
  const std::string& control_dir =
      entry.repository < 0 ? kNone
                           : job.repositories[static_cast<std::size_t>(entry.repository)].first;
  // Only a file Emacs visits has a VC state: not a listing, not a file of a
  // control directory, not a control file the watcher itself registered.
  bool visited_file = watched.has_ids && !watched.contents &&
                      (!is_control_id(watched.first_id) || watched.more_ids) &&
                      !is_inside(entry.path, control_dir);
  const std::string& linked = visited_file ? control_dir : kNone;
  auto link_it = repository_links_.find(watched.prefix_number);
  if (watched.in_repository && link_it != repository_links_.end() &&
      link_it->second.control_dir == linked) {
    return;
  }
  if (watched.in_repository) unlink_repository(watched);
  if (linked.empty()) return;
  WatchMode mode =
      registry_.has_id_with_mode(watched, WatchMode::notify) ? WatchMode::notify : WatchMode::poll;
  link_it = repository_links_.find(watched.prefix_number);
  if (link_it != repository_links_.end() && link_it->second.control_dir != linked) {
    // The directory's names are in another repository now (one was made
    // or removed around them): they all move, as they share the directory.
    std::string old_control_dir = std::exchange(link_it->second.control_dir, linked);
    add_repository_user(linked, job, mode);
    drop_repository_user(old_control_dir);
  } else if (link_it == repository_links_.end()) {
    repository_links_.emplace(watched.prefix_number, RepositoryLink{linked, 0});
    add_repository_user(linked, job, mode);
  }
  // Adding a repository registers names, which may have grown the table.
  link_it = repository_links_.find(watched.prefix_number);
  ++link_it->second.names;
  watched.in_repository = true;
}

void Watcher::unlink_repository(WatchedPath& watched) {
  watched.in_repository = false;
  auto link_it = repository_links_.find(watched.prefix_number);
  if (link_it == repository_links_.end()) return;
  if (--link_it->second.names > 0) return;
  std::string control_dir = std::move(link_it->second.control_dir);
  repository_links_.erase(link_it);
  drop_repository_user(control_dir);
}

void Watcher::add_repository_user(const std::string& control_dir, const SweepJob& job,
                                  WatchMode mode) {
  auto [repository_it, inserted] = repositories_.try_emplace(control_dir);
  WatchedRepository& repository = repository_it->second;
  ++repository.directories;
  if (!inserted) return;
  repository.mode = mode;
  for (const auto& [probed, state] : job.repositories) {
    if (probed == control_dir) repository.common_dir = state.common_dir;
  }
  sync_control_files(control_dir, repository);
}

void Watcher::drop_repository_user(const std::string& control_dir) {
  auto repository_it = repositories_.find(control_dir);
  if (repository_it == repositories_.end() || --repository_it->second.directories > 0) return;
  WatchedRepository& repository = repository_it->second;
  while (!repository.control_files.empty()) {
    forget_control_file(repository.control_files.back().first, repository);
  }
  repositories_.erase(repository_it);
}

void Watcher::forget_control_file(std::uint64_t id, WatchedRepository& repository) {
  control_ids_.erase(id);
  auto& files = repository.control_files;
  auto file = std::find_if(files.begin(), files.end(),
                           [id](const auto& registered) { return registered.first == id; });
  if (file != files.end()) files.erase(file);
  remove(id);
}

void Watcher::sync_control_files(const std::string& control_dir, WatchedRepository& repository,
                                 const FileSignature* branch) {
  std::vector<ControlFile> wanted =
      control_files(control_dir, repository.common_dir, repository.head_ref, watch_index_);
  auto is_wanted = [&](const std::string& path) {
    return std::any_of(wanted.begin(), wanted.end(),
                       [&](const ControlFile& file) { return file.path == path; });
  };
  std::vector<std::uint64_t> unwanted;
  for (const auto& [id, path] : repository.control_files) {
    if (!is_wanted(path)) unwanted.push_back(id);
  }
  for (std::uint64_t id : unwanted) forget_control_file(id, repository);
  for (const auto& file : wanted) {
    auto& files = repository.control_files;
    if (std::any_of(files.begin(), files.end(),
                    [&](const auto& registered) { return registered.second == file.path; })) {
      continue;
    }
    std::uint64_t id = next_control_id_++;
    control_ids_.emplace(id, ControlId{control_dir, file.role, branch == nullptr});
    files.emplace_back(id, file.path);
    bool is_new = registry_.find(file.path) == nullptr;
    add(id, file.path, repository.mode);
    WatchedPath* watched = registry_.find(file.path);
    if (branch && is_new && watched &&
        file.path == repository.common_dir + "/" + repository.head_ref) {
      // The stat that add() asked for compares with this baseline.
      registry_.set_baseline(*watched, *branch);
      registry_.for_each_id(*watched, [](RegisteredId& node) { node.has_baseline = true; });
    }
  }
}

void Watcher::note_head(std::uint64_t id, const SweepEntry& entry) {
  auto control = control_ids_.find(id);
  if (control == control_ids_.end()) return;
  std::string control_dir = control->second.control_dir;
  auto repository_it = repositories_.find(control_dir);
  if (repository_it == repositories_.end()) return;
  WatchedRepository& repository = repository_it->second;
  if (repository.head_ref == entry.head_ref) return;
  repository.head_ref = entry.head_ref;
  // The branch's file is first looked at when HEAD was read: a move of the
  // branch since is then a change.
  sync_control_files(control_dir, repository, &entry.branch);
}

void Watcher::set_watch_index(bool enabled) {
  if (watch_index_ == enabled) return;
  watch_index_ = enabled;
  for (auto& [control_dir, repository] : repositories_) {
    sync_control_files(control_dir, repository);
  }
}

void Watcher::report_repository_changes() {
  for (auto& entry : repositories_) {
    // Named rather than bound: a lambda may not capture a structured
    // binding before C++20.
    const std::string& control_dir = entry.first;
    WatchedRepository& repository = entry.second;
    if (repository.changed == 0) continue;
    unsigned changed = std::exchange(repository.changed, 0u);
    registry_.for_each([&](WatchedPath& watched) {
      if (!watched.in_repository) return;
      auto link_it = repository_links_.find(watched.prefix_number);
      if (link_it == repository_links_.end() || link_it->second.control_dir != control_dir) return;
      registry_.for_each_id(watched, [&](RegisteredId& node) {
        if (is_control_id(node.id)) return;
        engine_.emit(Record{RecordKind::vc_changed, node.id, static_cast<std::int64_t>(changed), {}},
                     Engine::Wake::no);
      });
    });
  }
}

}  // namespace fastrevert
