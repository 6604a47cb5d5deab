// Repositories, and the operations that change them, for the watcher.
//
// A checkout, a rebase or a stash rewrites many files over a while.  A buffer
// reverted in the middle shows a state that no commit has, and is reverted
// again a moment later; a rebase of ten commits would revert it ten times.
// So the watcher holds back the changes of a repository while an operation
// runs in it, and reports them once it has ended.
//
// Two questions are answered here.  Which repository holds a file, and is an
// operation running in it: both look at the file system, so a sweep answers
// them off the loop, right after it has stat'ed its files (RepositoryFinder,
// probe_repository).  And whether a change is reported now or held: the
// engine thread decides that (OperationHold), from what the sweeps found.
#pragma once

#include <uv.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace fastrevert {

// What a look into a repository's control directory (a Git directory or a
// ".hg") found.
struct RepositoryState {
  // A command holds one of the repository's locks.  Git writes the work tree
  // and the index under index.lock, then moves HEAD under HEAD.lock and a
  // branch under its ref's lock (or packed-refs.lock); Mercurial works under
  // wlock and its store's lock.
  bool locked = false;
  // A command of several steps is under way or has stopped half-way: a
  // rebase (rebase-merge, rebase-apply) or a series of cherry-picks or
  // reverts (sequencer).
  bool sequence = false;
  // How long until the latest lock that came or went is kLockQuiet old,
  // rounded up; zero once it is.  An entry of the control directory (or of
  // the directory of branches) changed that recently, by its modification
  // time.  Git takes its locks one after another, with no lock at all for
  // the moment in between.
  std::chrono::milliseconds quiet_in{0};
  // Where a Git repository's refs are: git_common_dir's answer.  Empty for
  // Mercurial.
  std::string common_dir;

  // A lock came or went less than kLockQuiet ago.
  bool settling() const noexcept { return quiet_in.count() > 0; }
  bool busy() const noexcept { return locked || sequence || settling(); }
};

// How long after a lock of a repository came or went it still counts as
// busy (RepositoryState::settling).  Git leaves microseconds between two of
// its locks; this also covers a command that the system holds back for a
// few ms.  A move of HEAD that comes later still refreshes the mode lines
// again (see fastrevert--vc-follow-up-seconds), so a longer pause costs a
// second refresh, not a wrong one.
constexpr std::chrono::milliseconds kLockQuiet{10};

// How long the watcher waits after a change of a control file (HEAD, a
// branch, the index) before it looks: a little past kLockQuiet, so that
// the look that follows an operation's last change finds it over.  It
// waits no longer for the files the operation wrote: the look finds the
// repository busy while the operation runs, and holds their changes.
constexpr std::chrono::milliseconds kControlSettle{kLockQuiet + std::chrono::milliseconds(2)};

// Any thread.  Looks into CONTROL_DIR now; what cannot be seen counts as
// absent.
RepositoryState probe_repository(const std::string& control_dir);

// Whether CONTROL_DIR is Mercurial's (a ".hg"), not a Git directory.
bool is_mercurial(const std::string& control_dir) noexcept;

// Any thread.  The Git directory that holds CONTROL_DIR's refs: the one its
// "commondir" file names (a linked work tree's), else CONTROL_DIR itself.
std::string git_common_dir(const std::string& control_dir);

// The ref that the text of a Git HEAD file names: "refs/heads/main" for
// "ref: refs/heads/main\n".  Empty when HEAD is detached (it holds a commit)
// or the text is no symbolic ref.
std::string head_ref_of(std::string_view text);

// Any thread.  The ref the Git HEAD file HEAD_FILE names now (head_ref_of);
// empty if it names none or cannot be read.
std::string read_head_ref(const std::string& head_file);

// What a control file tells VC, and so what its change means.
enum class ControlRole : std::uint8_t {
  // Which commit and branch the work tree is on: Git's HEAD and the ref it
  // names (loose, or in packed-refs); Mercurial's branch, bookmarks and
  // dirstate (which holds the working directory's parents).  A commit, a
  // checkout or a branch switch changes one of them.
  head,
  // Which files are tracked and staged: Git's index.  Watched only when
  // asked for (auto-revert-check-vc-info).
  index,
};

struct ControlFile {
  ControlRole role;
  std::string path;
};

// The control files of the repository of CONTROL_DIR whose change changes
// what VC shows for its files.  For Git, COMMON_DIR is git_common_dir's
// answer and HEAD_REF the ref HEAD names (head_ref_of), empty if none; the
// loose ref file is listed only then.  WITH_INDEX adds the index role's.
std::vector<ControlFile> control_files(const std::string& control_dir,
                                       const std::string& common_dir, std::string_view head_ref,
                                       bool with_index);

// Any thread.  Finds the repository that holds a directory, memoizing every
// directory it looks at; a sweep makes one for its files.
class RepositoryFinder {
 public:
  // Returns the control directory of the nearest repository that holds DIR,
  // an absolute directory name: DIR/.git or an ancestor's, the directory a
  // ".git" file names (a linked work tree, a submodule), or a ".hg".  Returns
  // an empty string if there is none.
  const std::string& control_dir_of(const std::string& dir);

 private:
  std::unordered_map<std::string, std::string> control_dirs_;
};

// Engine thread.  Decides, for each change a sweep confirms, whether it is
// reported now or held until the operation running in its repository ends.
//
// A change is held when the sweep that confirmed it found its repository
// locked or in a sequence.  A hold ends, and reports every change it holds
// at once, when a look into the repository finds the lock gone and, for a
// sequence, no change for kSequenceQuiet: a rebase picks commit after commit
// with the lock released in between, and one that stops on a conflict is
// quiet from then on.  While a hold lasts, the repository is looked into
// every kProbeInterval, or kLockQuiet after a look that found nothing but a
// lock's recent coming or going.  No hold lasts longer than the limit; after
// that the repository's changes are reported at once until a look finds it
// idle, so a lock left behind by a crashed command delays one batch, once.
class OperationHold {
 public:
  using Report = std::function<void(const std::unordered_set<std::uint64_t>& ids)>;
  using Probe = std::function<void(const std::string& control_dir)>;

  // How long a sequence must be quiet before its changes are reported.
  static constexpr std::chrono::milliseconds kSequenceQuiet{500};
  // How often a held repository is looked into.
  static constexpr std::chrono::milliseconds kProbeInterval{50};

  // REPORT reports the held changes of a set of ids.  PROBE asks for a look into a
  // control directory, whose result comes back through update().
  OperationHold(uv_loop_t* loop, Report report, Probe probe);

  OperationHold(const OperationHold&) = delete;
  OperationHold& operator=(const OperationHold&) = delete;

  // The longest a hold lasts; zero holds nothing.  Default 5 s.
  void set_limit(std::chrono::milliseconds limit);

  // A sweep confirmed a change to the file registered under ID, in the
  // repository of CONTROL_DIR, and found that repository in STATE after it
  // had stat'ed the file.  Returns true if the change is held.
  bool offer(std::uint64_t id, const std::string& control_dir, const RepositoryState& state);

  // A sweep found the repository of CONTROL_DIR in STATE; a hold may end.
  // Returns the ids whose changes that ends, for the caller to report with
  // the sweep's own: they do not go through REPORT.
  std::unordered_set<std::uint64_t> update(const std::string& control_dir,
                                           const RepositoryState& state);

  // ID is no longer registered; nothing is reported for it.
  void forget(std::uint64_t id);

  // Closes the timer; nothing is reported after this.
  void shutdown();

  // Test hook: in how many ms of the loop's time the repository of
  // CONTROL_DIR is looked into next; -1 if it is not held.
  std::int64_t next_probe_in(const std::string& control_dir) const;

  // How many held changes' ids COUNTED accepts.
  template <typename Counted>
  std::size_t held_changes(Counted counted) const {
    std::size_t count = 0;
    for (const auto& [control_dir, hold] : holds_) {
      for (std::uint64_t id : hold.ids) count += counted(id) ? 1 : 0;
    }
    return count;
  }

 private:
  struct Hold {
    std::unordered_set<std::uint64_t> ids;
    RepositoryState state;
    std::uint64_t started_at = 0;
    std::uint64_t last_change_at = 0;
    std::uint64_t next_probe_at = 0;
    bool probe_requested = false;
  };

  static void on_timer(uv_timer_t* handle) noexcept;
  // Releases the holds past the limit at NOW and asks for the probes due.
  void expire(std::uint64_t now);
  // Ends HOLD if its operation is over or past the limit; returns its ids.
  std::unordered_set<std::uint64_t> evaluate(const std::string& control_dir, Hold& hold,
                                             std::uint64_t now);
  // Forgets the hold of CONTROL_DIR and returns the ids it held.  OVERDUE
  // marks the repository as one whose changes pass through until it is seen
  // idle.
  std::unordered_set<std::uint64_t> end_hold(const std::string& control_dir, bool overdue);
  // end_hold(), then reports the ids through REPORT.
  void release(const std::string& control_dir, bool overdue);
  void arm_timer(std::uint64_t now);

  uv_loop_t* loop_;
  Report report_;
  Probe probe_;
  uv_timer_t timer_{};
  bool shut_down_ = false;
  std::chrono::milliseconds limit_{5000};
  std::unordered_map<std::string, Hold> holds_;
  // Repositories whose hold reached the limit while they stayed busy.
  std::unordered_set<std::string> overdue_;
};

}  // namespace fastrevert
