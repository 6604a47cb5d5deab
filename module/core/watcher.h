// The file watcher: the engine service behind auto-revert.
//
// Emacs registers each visited file under an id (one id per buffer).  The
// watcher learns about possible changes in two ways, kernel notification
// (one directory watch per directory, shared by every registered file in it,
// through the backend of core/watch_backend.h) and stat polling at the
// auto-revert interval, and confirms both the same way: it stats the file
// and compares the result with the signature recorded for that id.  A
// difference emits one Record{file_changed, id, 0, path} and becomes the new
// baseline, so one change is reported once.
//
// Everything here runs on the engine thread, except the stat sweeps, which
// run on threads of a WorkerPool so that a hung file system stalls only the
// watcher's own results: never the engine loop, stopping the engine, or
// Emacs's exit (see core/worker_pool.h).
#pragma once

#include <sys/types.h>
#include <uv.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/engine.h"
#include "core/vcs.h"
#include "core/watch_backend.h"
#include "core/watch_registry.h"
#include "core/worker_pool.h"

namespace fastrevert {

// Stats PATH now.  Any failure (missing file, dangling link, permission)
// reads as a file that does not exist.
FileSignature read_file_signature(const std::string& path);

// Faults the tests inject.  They are process-wide because the watcher is
// created on demand inside an engine; each is zero, meaning no fault, unless
// a test sets it.
struct WatcherTestHooks {
  // When non-zero, adding a directory watch (inotify_add_watch,
  // uv_fs_event_start) fails with this errno instead of running.  Relaxed:
  // read on the engine thread, set by a test before it posts work.
  std::atomic<int> add_watch_errno{0};
  // When non-zero, starting the backend (inotify_init1) fails with this
  // errno instead of running.  Relaxed for the same reason.
  std::atomic<int> init_errno{0};
  // Milliseconds each sweep stat sleeps first, standing in for a hung mount.
  // Relaxed: read on threadpool threads, and only its value matters.
  std::atomic<int> stat_delay_ms{0};
  // How many delayed stats have begun, so a test can wait for one to be
  // under way.  Relaxed: a counter read for its value alone.
  std::atomic<int> delayed_stats_started{0};
  // When true, a watcher made from now on uses libuv's backend even where
  // inotify exists.  Relaxed: read on the engine thread when it makes the
  // watcher, set by a test before it posts work.
  std::atomic<bool> use_libuv_backend{false};
  // When true, the backend is taken to name no entry and to see no write to
  // a file in a watched directory, as kqueue's directory watches: every
  // event re-stats its directory's names, and the files are polled.
  // Relaxed: read on the engine thread, set by a test before it posts work.
  std::atomic<bool> blind_directory_watches{false};
  // When true, every new directory watch is taken to have lost the other
  // directories' events for a moment, as FSEvents does.  Relaxed likewise.
  std::atomic<bool> add_loses_events{false};

  // The fault a test names KIND: "add-watch-errno", "init-errno" or
  // "stat-delay-ms"; nullptr for any other name.
  std::atomic<int>* fault(std::string_view kind) noexcept;
};

WatcherTestHooks& watcher_test_hooks() noexcept;

class Watcher : public Service, private WatchListener {
 public:
  // Engine thread, as are all the methods below.
  explicit Watcher(Engine& engine);
  ~Watcher() override;

  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  // Registers PATH under ID, replacing any earlier registration of ID.  PATH
  // should be absolute (the engine thread shares the process's working
  // directory with Emacs).  The baseline signature is taken by the next
  // sweep, off the loop, and announced with a file_watched record.  A name with no last component
  // (ending in a slash) cannot be matched against kernel events and is polled.  With CONTENTS, PATH
  // is a directory whose entries matter (a Dired buffer): the directory itself is watched too, and
  // any event inside it has PATH stat'ed, whose modification time moves when an entry comes or
  // goes.
  void add(std::uint64_t id, std::string path, WatchMode mode, bool contents = false);
  // Forgets ID.  Unknown ids are ignored.
  void remove(std::uint64_t id);
  // The auto-revert interval: how often polled files are stat'ed and lost
  // directory watches retried.  Default 5 s.
  void set_poll_interval(std::chrono::milliseconds interval);
  // Whether the poll timer also stats files that have a kernel watch, as a
  // safety net for changes notification cannot see (another host writing to
  // a network file system).  This is `auto-revert-avoid-polling' nil.
  void set_poll_notified(bool enabled);
  // How long the watched files must be quiet after a kernel event before the
  // dirty ones are stat'ed.  A continuous stream of events still flushes
  // after ten settle delays.  Default 30 ms.
  void set_settle_delay(std::chrono::milliseconds delay);
  // Stats every registered file now and reports every change.
  void rescan();
  // Behaves exactly as if the kernel had reported IN_Q_OVERFLOW.
  void inject_overflow();
  // The longest a running VCS operation holds back its repository's
  // changes (see OperationHold); zero holds nothing.  Default 5 s.
  void set_hold_limit(std::chrono::milliseconds limit);
  // Whether the index of each repository (Mercurial's dirstate) is watched
  // as well as what HEAD names: `auto-revert-check-vc-info'.  Default off.
  void set_watch_index(bool enabled);
  // The ids of the files Emacs shows in a window.  Where the backend sees
  // no write to a file in a watched directory (kqueue), the watched files
  // are polled, and these every kVisiblePollInterval rather than at the
  // poll interval, so that what the user looks at follows within a moment.
  void set_visible(std::vector<std::uint64_t> ids);
  static constexpr std::chrono::milliseconds kVisiblePollInterval{500};

  // True when no stat is in flight or pending: every event read so far has
  // been confirmed and reported.  Tests use it as a synchronization point.
  bool idle() const noexcept;
  // The ids registered by add(), not counting the watcher's own.
  std::size_t registration_count() const noexcept {
    return registry_.id_count() - control_ids_.size();
  }
  // How many repositories hold registered files, and how many control files
  // the watcher watches in them.
  std::size_t repository_count() const noexcept { return repositories_.size(); }
  std::size_t control_file_count() const noexcept { return control_ids_.size(); }
  std::size_t sweeps_in_flight() const noexcept { return sweeps_in_flight_.size(); }
  // In how many ms of the loop's time the pending names are swept; -1 if
  // no sweep is due.
  std::int64_t flush_in() const noexcept;
  // The changes held for ids registered by add().
  std::size_t held_changes() const {
    return hold_.held_changes([](std::uint64_t id) { return !is_control_id(id); });
  }

  // The kernel interface in use ("inotify" or "libuv"; see
  // core/watch_backend.h), and what it can see.
  const char* backend_name() const noexcept { return backend_->name(); }
  const WatchBackend& backend() const noexcept { return *backend_; }
  bool sees_entry_names() const noexcept;
  bool sees_file_writes() const noexcept;

  void shutdown() override;

 private:
  // One directory that registered names live in, that a registered
  // symlink points into, or that is registered with its contents.
  struct WatchedDir {
    // The backend's watch number, or -1 while the directory has none.
    int watch = -1;
    // How many registered names need this directory watched: each name in
    // it, each symlink into it, and itself when registered with contents.
    std::size_t interests = 0;
  };

  struct SweepEntry {
    std::string path;
    std::uint32_t incarnation = 0;
    FileSignature signature;
    bool is_symlink = false;
    // Registered with contents: the directory PATH is watched as well.
    bool contents = false;
    bool resolved = false;
    std::string resolved_path;
    // Index into SweepJob::repositories of the repository holding PATH, or
    // -1 for none.
    int repository = -1;
    // PATH is a Git HEAD the watcher watches, whose text the sweep reads: the
    // ref it names (head_ref_of) goes into HEAD_REF, and what a stat of that
    // ref's file in COMMON_DIR found into BRANCH.
    bool read_head = false;
    std::string common_dir;
    std::string head_ref;
    FileSignature branch;
  };

  // A batch of stats run by a pool thread.  Shared by the job's two halves:
  // the stats, which touch only the job, and the engine thread's reading of
  // the results.
  struct SweepJob {
    std::uint64_t number = 0;
    std::vector<SweepEntry> entries;
    // The repositories of the entries, and those the hold asked to look
    // into, each with what the sweep found after it stat'ed the entries.
    std::vector<std::pair<std::string, RepositoryState>> repositories;
  };

  // settle: the settle delay after the latest change; control: within
  // kControlSettle (vcs.h), after a change of a repository's control file;
  // now: at once.
  enum class FlushUrgency { settle, control, now };

  static void on_flush_timer(uv_timer_t* handle);
  static void on_poll_timer(uv_timer_t* handle);
  static void on_visible_timer(uv_timer_t* handle);
  void update_visible_timer();
  static void run_sweep(SweepJob& job) noexcept;
  void after_sweep(SweepJob& job);
  // The watcher's libuv callbacks are registered through these, so that no
  // exception leaves one: a failure (in practice, memory running out) is
  // reported and every registered file is re-stat'ed, so no change is lost.
  template <void (*Callback)(uv_timer_t*)>
  static void guarded(uv_timer_t* handle) noexcept;
  // Runs FN, which handles a backend's event, so that no exception leaves
  // the backend's callback: a failure is recovered from as above.
  template <typename Fn>
  void guarded(Fn&& fn) noexcept;
  void recover() noexcept;

  // What the backend reports (see WatchListener).
  void on_entry_event(int watch, std::string_view name) override;
  void on_directory_event(int watch) override;
  void on_watch_lost(int watch, bool still_registered) override;
  void on_events_lost() override;
  void on_backend_failure(const char* function, int error) override;
  void on_events_delivered() override;

  // Calls VISIT on each directory whose kernel watch a name with kernel
  // interest needs: its own directory, the name itself when registered with
  // its contents, and its symlink target's directory.  Stops at the first
  // VISIT that returns true, and returns whether one did.
  template <typename Visit>
  bool any_interest_dir(const WatchedPath& watched, Visit visit) const;
  void add_kernel_interest(WatchedPath& watched);
  void drop_kernel_interest(WatchedPath& watched);
  // Counts one more (or one fewer) registered name needing DIR watched, and
  // watches (or unwatches) it on the first (or the last).
  void add_interest(std::string_view dir);
  void drop_interest(std::string_view dir);
  bool ensure_backend();
  bool try_watch_directory(const std::string& dir, WatchedDir& watched);
  void unwatch_directory(const std::string& dir, WatchedDir& watched);
  void lose_watch(int watch, bool still_registered);
  // Stats, and re-decides the coverage of, every name with kernel interest
  // seen through one of DIRS: in it, linked into it, or DIRS itself.
  void restat_paths_in(const std::unordered_set<std::string>& dirs);
  void refresh_coverage(WatchedPath& watched);
  void update_poll_timer();
  void handle_overflow();
  void mark_all_pending();
  void request_stat(WatchedPath& watched);
  void schedule_flush(FlushUrgency urgency);
  void launch_sweeps();
  void apply_sweep(SweepJob& job);
  void update_link_target(WatchedPath& watched, const SweepEntry& entry);
  // VCS operations (see vcs.h).  Sweep thread: finds the entries'
  // repositories and looks into each once its files are stat'ed.
  static void probe_repositories(SweepJob& job);
  // Engine thread: hands the sweep's findings to the hold, returning the ids
  // whose held changes that ends; and tells whether the hold keeps the
  // change of ID (confirmed by a sweep).
  std::unordered_set<std::uint64_t> apply_repositories(const SweepJob& job);
  bool hold_change(std::uint64_t id, const SweepJob& job, const SweepEntry& entry);
  // Queues a file_changed record for each of IDS still registered, without
  // waking Emacs, and notes the changes of control files; returns how many
  // records.
  std::size_t emit_changes(const std::unordered_set<std::uint64_t>& ids);
  // A change to the file registered under ID, named PATH, is confirmed and
  // not held: queues its file_changed record, or, for a control file, notes
  // the change of its repository.  Returns whether a record was queued.
  bool report_change(std::uint64_t id, std::string_view path);

  // Repositories and their control files.  Every registered name that Emacs
  // visits as a file (not a listing, not a control file) is linked, through
  // its directory part, to the repository that its sweeps find it in.  The
  // watcher registers, under ids of its own, the control files of each
  // repository with linked names, and reports a change to one of them with a
  // vc_changed record for each id of those names.
  static constexpr std::uint64_t kControlIdBase = std::uint64_t{1} << 63;
  static bool is_control_id(std::uint64_t id) noexcept { return id >= kControlIdBase; }
  // Links WATCHED to the repository its sweep ENTRY of JOB found it in, or
  // to none.
  void link_repository(WatchedPath& watched, const SweepEntry& entry, const SweepJob& job);
  void unlink_repository(WatchedPath& watched);
  // One more (or one fewer) directory part is linked to the repository of
  // CONTROL_DIR; the first makes it, as JOB found it, with control files
  // watched by MODE, and the last forgets it.
  void add_repository_user(const std::string& control_dir, const SweepJob& job, WatchMode mode);
  void drop_repository_user(const std::string& control_dir);
  // Registers and unregisters the control files of the repository of
  // CONTROL_DIR so that they are those its state and the settings call for.
  // What changes before a control file's first look cannot be seen as a
  // change, so that first look reports its repository as changed, since
  // Emacs may have read the state before.  BRANCH, when not null, is what
  // the branch HEAD names looked like when HEAD was read, after a switch
  // that is itself reported: a branch file newly registered takes it as
  // its baseline, so that a move of the new branch is seen from then on.
  struct WatchedRepository;
  void sync_control_files(const std::string& control_dir, WatchedRepository& repository,
                          const FileSignature* branch = nullptr);
  // The sweep ENTRY read the HEAD registered under ID.
  void note_head(std::uint64_t id, const SweepEntry& entry);
  // Unregisters the control file ID of REPOSITORY.
  void forget_control_file(std::uint64_t id, WatchedRepository& repository);
  // Queues the vc_changed records of every repository whose control files
  // changed since the last call.
  void report_repository_changes();
  // Reports, as one batch, the changes of IDS whose hold ended on its timer;
  // and asks for a look into a repository on the hold's behalf.
  void report_held_changes(const std::unordered_set<std::uint64_t>& ids);
  void request_probe(const std::string& control_dir);
  // Emits one notice per failure kind (FUNCTION and ERROR) in the watcher's
  // lifetime.  CONSEQUENCE says what happens next; null means the fallback
  // to polling.
  void notice_failure_once(const char* function, int error, const char* consequence = nullptr);

  Engine& engine_;
  bool shutting_down_ = false;

  std::chrono::milliseconds poll_interval_{5000};
  std::chrono::milliseconds settle_delay_{30};
  bool poll_notified_ = false;

  WatchRegistry registry_;
  std::unordered_map<std::string, WatchedDir> dirs_;
  // Several directory names can lead to one inode (a symlinked directory),
  // and the backend then hands out one watch for all of them.
  std::unordered_map<int, std::vector<std::string>> dirs_by_watch_;
  std::unordered_set<std::string> polled_paths_;
  // Directories whose watch went away while events were being read; their
  // files are stat'ed once the read is done.
  std::unordered_set<std::string> lost_dirs_;
  // Paths whose stat_pending flag is set; may hold stale or repeated names,
  // the flag decides.
  std::vector<std::string> pending_paths_;

  std::unique_ptr<WatchBackend> backend_;
  bool backend_started_ = false;
  // A new directory watch may have cost other directories' events
  // (WatchBackend::add_may_lose_events): the next flush stats every name.
  bool restat_all_pending_ = false;
  // Whether an event read since the last delivery marked a name other
  // than a control file's, and a control file's.
  bool events_marked_ = false;
  bool control_events_marked_ = false;
  uv_timer_t flush_timer_{};
  uv_timer_t poll_timer_{};
  uv_timer_t visible_timer_{};
  // See set_visible().
  std::unordered_set<std::uint64_t> visible_ids_;

  bool flush_armed_ = false;
  bool urgent_flush_requested_ = false;
  std::uint64_t first_flush_request_at_ = 0;
  std::uint64_t flush_deadline_ = 0;

  std::uint64_t next_sweep_number_ = 1;
  std::uint64_t next_incarnation_ = 1;
  std::unordered_set<SweepJob*> sweeps_in_flight_;
  // Runs the sweeps; made on first use.
  std::unique_ptr<WorkerPool> sweep_pool_;
  // Changes held while a VCS operation runs, and the repositories the hold
  // has asked to look into with the next sweep.
  OperationHold hold_;
  std::unordered_set<std::string> pending_probes_;

  // A repository holding linked names, by its control directory.
  struct WatchedRepository {
    // Where its refs are (git_common_dir), and the ref HEAD named when last
    // read; empty until then, and while HEAD is detached.
    std::string common_dir;
    std::string head_ref;
    // The directory parts linked to it.
    std::size_t directories = 0;
    // How its control files are watched: as the name that made it was.
    WatchMode mode = WatchMode::notify;
    // Its control files, by id.
    std::vector<std::pair<std::uint64_t, std::string>> control_files;
    // What changed since it was last reported, a bit per ControlRole.
    unsigned changed = 0;
  };
  // The repository of a directory part's names, and how many are linked.
  struct RepositoryLink {
    std::string control_dir;
    std::uint32_t names = 0;
  };
  // A control file's repository and role, and whether its first look is
  // reported as a change (see sync_control_files).
  struct ControlId {
    std::string control_dir;
    ControlRole role = ControlRole::head;
    bool report_first_look = false;
  };
  std::unordered_map<std::string, WatchedRepository> repositories_;
  // By the directory part's number (WatchedPath::prefix_number).
  std::unordered_map<std::uint32_t, RepositoryLink> repository_links_;
  std::unordered_map<std::uint64_t, ControlId> control_ids_;
  std::uint64_t next_control_id_ = kControlIdBase;

  bool watch_index_ = false;
  // Failure kinds ("function:errno") already reported with a notice.
  std::set<std::pair<std::string, int>> noticed_failures_;
};

}  // namespace fastrevert
