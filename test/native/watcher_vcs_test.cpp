// Tests of the watcher in repositories: the operations that hold back their
// changes, and the control files whose changes are reported for the files of
// their repository.  Real files in a fresh temporary directory stand in for
// what Git and Mercurial write.
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "core/engine.h"
#include "core/vcs.h"
#include "core/watcher.h"
#include "support.h"
#include "watcher_harness.h"

using fastrevert::Record;
using fastrevert::RecordKind;
using fastrevert::Watcher;
using fastrevert::WatchMode;
using fastrevert::test::append_file;
using fastrevert::test::Clock;
using fastrevert::test::create_file;
using fastrevert::test::date_back;
using fastrevert::test::Harness;
using fastrevert::test::kReportTimeout;
using fastrevert::test::TempDir;
using namespace std::chrono_literals;

// ---------------------------------------------------------------------------
// VCS operations: changes in a repository while an operation runs in it.

namespace {

// Waits until the watcher holds COUNT changes.
bool wait_for_held(Harness& harness, std::size_t count) {
  return harness.wait_until(
      [&] {
        std::size_t held = 0;
        harness.call([&](Watcher& watcher) { held = watcher.held_changes(); });
        return held == count;
      },
      kReportTimeout);
}

// A work tree with a Git directory in DIR/repo, where nothing has happened
// lately.
void make_repository(const TempDir& dir) {
  REQUIRE(mkdir((dir / "repo").c_str(), 0755) == 0);
  REQUIRE(mkdir((dir / "repo/.git").c_str(), 0755) == 0);
  date_back({dir / "repo/.git"});
}

// The codes of the file_watched records received for ID, in order.
std::vector<std::int64_t> watched_codes(const Harness& harness, std::uint64_t id) {
  std::vector<std::int64_t> codes;
  for (const auto& record : harness.received()) {
    if (record.kind == RecordKind::file_watched && record.id == id) codes.push_back(record.code);
  }
  return codes;
}

// A work tree with a Git directory in DIR/repo, and a watched file in it.
std::string make_repository_with_file(Harness& harness, const TempDir& dir) {
  make_repository(dir);
  std::string file = dir / "repo/file";
  create_file(file, "x");
  harness.add(1, file);
  harness.settle();
  harness.clear();
  return file;
}

// Removes DIR/repo's index lock, as a Git operation ends, and expects the
// change to file 1 that it held to be reported once, with nothing left held.
void end_operation_expecting_one_change(Harness& harness, const TempDir& dir) {
  REQUIRE(unlink((dir / "repo/.git/index.lock").c_str()) == 0);
  harness.expect_one_change(1);
  CHECK(wait_for_held(harness, 0));
}

}  // namespace

TEST_CASE("watcher: changes made while the index is locked are reported once, when it is not") {
  Harness harness;
  TempDir dir;
  std::string file = make_repository_with_file(harness, dir);
  create_file(dir / "repo/.git/index.lock", "");
  for (int write = 0; write < 3; ++write) {
    append_file(file, "y");
    REQUIRE(wait_for_held(harness, 1));
    harness.settle();
  }
  CHECK(harness.changes_for(1) == 0);
  end_operation_expecting_one_change(harness, dir);
}

TEST_CASE("watcher: a write just before the lock goes away is reported once with the held ones") {
  Harness harness;
  TempDir dir;
  std::string file = make_repository_with_file(harness, dir);
  create_file(dir / "repo/.git/index.lock", "");
  append_file(file, "y");
  REQUIRE(wait_for_held(harness, 1));
  harness.settle();
  // The last write and the end of the operation reach the watcher
  // together, so one sweep confirms the write and finds the lock gone.
  append_file(file, "z");
  end_operation_expecting_one_change(harness, dir);
}

TEST_CASE("watcher: a work tree's top directory listed with its contents is held by its lock") {
  Harness harness;
  TempDir dir;
  make_repository(dir);
  // Old times, so that the new entry below changes the directory's.
  timespec old_times[2] = {{1000000000, 0}, {1000000000, 0}};
  REQUIRE(utimensat(AT_FDCWD, (dir / "repo").c_str(), old_times, 0) == 0);
  harness.call([&](Watcher& watcher) { watcher.add(1, dir / "repo", WatchMode::notify, true); });
  harness.settle();
  harness.clear();
  // The directory is in the repository it is the top of, not in its
  // parent, which is in none: a checkout there holds its listing too.
  create_file(dir / "repo/.git/index.lock", "");
  create_file(dir / "repo/checked-out", "x");
  REQUIRE(wait_for_held(harness, 1));
  harness.settle();
  CHECK(harness.changes_for(1) == 0);
  end_operation_expecting_one_change(harness, dir);
}

TEST_CASE("watcher: the changes a lock held are all queued before Emacs is woken") {
  Harness harness;
  TempDir dir;
  std::string file = make_repository_with_file(harness, dir);
  constexpr std::uint64_t kFiles = 3000;
  for (std::uint64_t id = 2; id <= kFiles; ++id) {
    std::string name = dir / ("repo/file" + std::to_string(id));
    create_file(name, "x");
    harness.add(id, name);
  }
  harness.settle();
  harness.clear();
  create_file(dir / "repo/.git/index.lock", "");
  append_file(file, "y");
  for (std::uint64_t id = 2; id <= kFiles; ++id) {
    append_file(dir / ("repo/file" + std::to_string(id)), "y");
  }
  REQUIRE(wait_for_held(harness, kFiles));
  harness.settle();
  harness.clear();
  REQUIRE(unlink((dir / "repo/.git/index.lock").c_str()) == 0);
  // What Emacs drains as soon as it is woken is the whole batch.
  REQUIRE(harness.wait_for_wake(kReportTimeout));
  harness.pump();
  CHECK(harness.change_count() == kFiles);
}

TEST_CASE("watcher: a file first watched while the index is locked is checked when it is not") {
  Harness harness;
  TempDir dir;
  make_repository(dir);
  create_file(dir / "repo/.git/index.lock", "");
  std::string file = dir / "repo/file";
  create_file(file, "x");
  harness.add(1, file);
  REQUIRE(wait_for_held(harness, 1));
  harness.settle();
  // Watched, but its first check waits for the operation.
  CHECK(watched_codes(harness, 1) == std::vector<std::int64_t>{1});
  CHECK(harness.change_count() == 0);
  harness.clear();
  REQUIRE(unlink((dir / "repo/.git/index.lock").c_str()) == 0);
  harness.expect_one_change(1);
}

TEST_CASE("watcher: a file first watched in an idle repository is checked at once") {
  Harness harness;
  TempDir dir;
  std::string file = make_repository_with_file(harness, dir);
  harness.add(2, file);
  REQUIRE(harness.wait_until([&] { return !watched_codes(harness, 2).empty(); }, kReportTimeout));
  harness.settle();
  CHECK(watched_codes(harness, 1).empty());
  CHECK(watched_codes(harness, 2) == std::vector<std::int64_t>{0});
}

TEST_CASE("watcher: a rebase holds changes until it has been quiet, then reports them") {
  Harness harness;
  TempDir dir;
  std::string file = make_repository_with_file(harness, dir);
  REQUIRE(mkdir((dir / "repo/.git/rebase-merge").c_str(), 0755) == 0);
  auto start = Clock::now();
  append_file(file, "picked");
  REQUIRE(wait_for_held(harness, 1));
  // The rebase stays (stopped, say, on a conflict); its changes come once
  // it has been quiet.
  REQUIRE(harness.wait_for_change(1, kReportTimeout + fastrevert::OperationHold::kSequenceQuiet));
  CHECK(Clock::now() - start >= fastrevert::OperationHold::kSequenceQuiet);
  harness.settle();
  CHECK(harness.changes_for(1) == 1);
}

TEST_CASE("watcher: a lock left behind holds changes only up to the limit, and only once") {
  Harness harness;
  TempDir dir;
  std::string file = make_repository_with_file(harness, dir);
  harness.call([](Watcher& watcher) { watcher.set_hold_limit(300ms); });
  create_file(dir / "repo/.git/index.lock", "");
  auto start = Clock::now();
  append_file(file, "y");
  REQUIRE(harness.wait_for_change(1));
  CHECK(Clock::now() - start >= 300ms);
  harness.clear();
  // The lock is still there; from now on changes pass straight through.
  append_file(file, "z");
  REQUIRE(harness.wait_for_change(1));
  CHECK(wait_for_held(harness, 0));
  harness.clear();
  // Once the lock is gone and seen gone, a new one holds changes again.
  REQUIRE(unlink((dir / "repo/.git/index.lock").c_str()) == 0);
  append_file(file, "seen idle");
  REQUIRE(harness.wait_for_change(1));
  harness.settle();
  harness.clear();
  create_file(dir / "repo/.git/index.lock", "");
  append_file(file, "held again");
  CHECK(wait_for_held(harness, 1));
}

TEST_CASE("watcher: a zero hold limit reports changes in a locked repository at once") {
  Harness harness;
  TempDir dir;
  std::string file = make_repository_with_file(harness, dir);
  harness.call([](Watcher& watcher) { watcher.set_hold_limit(0ms); });
  create_file(dir / "repo/.git/index.lock", "");
  append_file(file, "y");
  harness.expect_one_change(1);
}

// ---------------------------------------------------------------------------
// Control files: a move of HEAD or of its branch, and (on request) a change
// of the index, reported for every file of the repository.

namespace {

constexpr const char* kCommitA = "1111111111111111111111111111111111111111\n";
constexpr const char* kCommitB = "2222222222222222222222222222222222222222\n";

void make_directory(const std::string& path) {
  REQUIRE(mkdir(path.c_str(), 0755) == 0);
}

// Replaces PATH with CONTENT as Git does: written to PATH.lock, then renamed
// over PATH.
void replace_as_git_does(const std::string& path, const std::string& content) {
  std::string lock = path + ".lock";
  create_file(lock, content);
  REQUIRE(rename(lock.c_str(), path.c_str()) == 0);
}

// A Git repository in DIR/repo on branch main, with two files watched under
// ids 1 and 2, and a file outside it watched under id 3.
struct GitRepository {
  explicit GitRepository(Harness& harness, bool with_index = false) : harness(harness) {
    make_directory(dir / "repo");
    make_directory(dir / "repo/.git");
    make_directory(dir / "repo/.git/refs");
    make_directory(dir / "repo/.git/refs/heads");
    create_file(dir / "repo/.git/HEAD", "ref: refs/heads/main\n");
    create_file(dir / "repo/.git/refs/heads/main", kCommitA);
    create_file(dir / "repo/.git/index", "index");
    make_directory(dir / "repo/sub");
    create_file(dir / "repo/a", "a");
    create_file(dir / "repo/sub/b", "b");
    create_file(dir / "outside", "c");
    date_back({git(""), git("refs/heads")});
    if (with_index) harness.call([](Watcher& watcher) { watcher.set_watch_index(true); });
    harness.add(1, dir / "repo/a");
    harness.add(2, dir / "repo/sub/b");
    harness.add(3, dir / "outside");
    harness.settle();
    // The first sweep finds the repository and registers its control files;
    // settling again lets them take their baselines.
    harness.settle();
    harness.clear();
  }

  std::string git(const std::string& name) const { return dir / ("repo/.git/" + name); }

  Harness& harness;
  TempDir dir;
};

std::vector<std::int64_t> vc_codes(const Harness& harness, std::uint64_t id) {
  std::vector<std::int64_t> codes;
  for (const auto& record : harness.received()) {
    if (record.kind == RecordKind::vc_changed && record.id == id) codes.push_back(record.code);
  }
  return codes;
}

// Waits for a vc_changed record for each of ids 1 and 2, lets the watcher
// settle, and checks that each came once, with CODE, and none for id 3 or
// as a file change; then forgets the records.
void expect_vc_change(Harness& harness, std::int64_t code) {
  REQUIRE(harness.wait_until(
      [&] { return !vc_codes(harness, 1).empty() && !vc_codes(harness, 2).empty(); },
      kReportTimeout));
  harness.settle();
  CHECK(vc_codes(harness, 1) == std::vector<std::int64_t>{code});
  CHECK(vc_codes(harness, 2) == std::vector<std::int64_t>{code});
  CHECK(vc_codes(harness, 3).empty());
  CHECK(harness.change_count() == 0);
  harness.clear();
}

std::size_t control_files_watched(Harness& harness) {
  std::size_t count = 0;
  harness.call([&](Watcher& watcher) { count = watcher.control_file_count(); });
  return count;
}

}  // namespace

TEST_CASE("watcher: a repository's first look is reported for the file that led to it") {
  Harness harness;
  TempDir dir;
  make_directory(dir / "repo");
  make_directory(dir / "repo/.git");
  create_file(dir / "repo/.git/HEAD", "ref: refs/heads/main\n");
  create_file(dir / "repo/a", "a");
  date_back({dir / "repo/.git"});
  harness.add(1, dir / "repo/a");
  // HEAD may have moved between Emacs's check of the file, which its
  // file_watched record asks for, and the watcher's first look at HEAD.
  REQUIRE(harness.wait_until([&] { return !vc_codes(harness, 1).empty(); }, kReportTimeout));
  harness.settle();
  CHECK(vc_codes(harness, 1) == std::vector<std::int64_t>{1});
}

TEST_CASE("watcher: a repository's HEAD, branch and packed refs are watched, not its index") {
  Harness harness;
  GitRepository repository(harness);
  std::size_t repositories = 0;
  std::size_t registrations = 0;
  harness.call([&](Watcher& watcher) {
    repositories = watcher.repository_count();
    registrations = watcher.registration_count();
  });
  CHECK(repositories == 1);
  CHECK(registrations == 3);
  CHECK(control_files_watched(harness) == 3);
  // Nothing Emacs watched changed, and nothing is reported.
  CHECK(harness.received().empty());
  create_file(repository.git("index"), "staged");
  append_file(repository.dir / "outside", "d");
  REQUIRE(harness.wait_for_change(3));
  harness.settle();
  CHECK(harness.received().size() == 1);
}

TEST_CASE("watcher: a switch of branch is reported for every file of the repository") {
  Harness harness;
  GitRepository repository(harness);
  replace_as_git_does(repository.git("HEAD"), "ref: refs/heads/other\n");
  expect_vc_change(harness, 1);
}

TEST_CASE("watcher: a commit, moving the branch HEAD names, is reported") {
  Harness harness;
  GitRepository repository(harness);
  replace_as_git_does(repository.git("refs/heads/main"), kCommitB);
  expect_vc_change(harness, 1);
}

namespace {

std::int64_t flush_in(Harness& harness) {
  std::int64_t in = -1;
  harness.call([&](Watcher& watcher) { in = watcher.flush_in(); });
  return in;
}

}  // namespace

TEST_CASE("watcher: a control file's change is looked at after a short settle, not the whole") {
  // An operation's last change is to HEAD, a branch or the index.  The look
  // that follows it finds the repository over, or busy and holding the
  // changes of the files it wrote, which need not wait for their whole
  // settle delay then.
  Harness harness;
  GitRepository repository(harness);
  const auto settle = std::chrono::milliseconds(5000);
  harness.call([&](Watcher& watcher) { watcher.set_settle_delay(settle); });
  append_file(repository.dir / "repo/a", "written");
  // Only that write's event, put off by the settle delay, is this far out.
  REQUIRE(harness.wait_until([&] { return flush_in(harness) > settle.count() / 2; },
                             kReportTimeout));
  // The branch's move brings that sweep forward: the write and the move
  // are reported long before the settle delay could end.  (Looking for the
  // sweep itself would race with it: it comes kControlSettle later.)
  replace_as_git_does(repository.git("refs/heads/main"), kCommitB);
  REQUIRE(harness.wait_until(
      [&] {
        return harness.changes_for(1) > 0 && !vc_codes(harness, 1).empty() &&
               !vc_codes(harness, 2).empty();
      },
      settle / 2));
  // A change of a visited file alone still waits for the settle delay.
  harness.settle();
  harness.clear();
  append_file(repository.dir / "repo/a", "again");
  CHECK(harness.wait_until([&] { return flush_in(harness) > settle.count() / 2; },
                           kReportTimeout));
}

TEST_CASE("watcher: after a switch the new branch is watched and the old one is not") {
  Harness harness;
  GitRepository repository(harness);
  create_file(repository.git("refs/heads/other"), kCommitA);
  replace_as_git_does(repository.git("HEAD"), "ref: refs/heads/other\n");
  expect_vc_change(harness, 1);
  replace_as_git_does(repository.git("refs/heads/other"), kCommitB);
  expect_vc_change(harness, 1);
  // The old branch moves (a push to it from another work tree, say): the
  // files here are not on it.
  replace_as_git_does(repository.git("refs/heads/main"), kCommitB);
  append_file(repository.dir / "outside", "d");
  REQUIRE(harness.wait_for_change(3));
  harness.settle();
  CHECK(vc_codes(harness, 1).empty());
  CHECK(control_files_watched(harness) == 3);
}

TEST_CASE("watcher: a detached HEAD is watched, and so is the branch it later names") {
  Harness harness;
  GitRepository repository(harness);
  replace_as_git_does(repository.git("HEAD"), kCommitB);
  expect_vc_change(harness, 1);
  CHECK(control_files_watched(harness) == 2);
  replace_as_git_does(repository.git("HEAD"), "ref: refs/heads/main\n");
  expect_vc_change(harness, 1);
  CHECK(control_files_watched(harness) == 3);
  replace_as_git_does(repository.git("refs/heads/main"), kCommitB);
  expect_vc_change(harness, 1);
}

TEST_CASE("watcher: packing the refs is reported, as it may move the branch") {
  Harness harness;
  GitRepository repository(harness);
  replace_as_git_does(repository.git("packed-refs"),
                      std::string("# pack-refs with: peeled\n") + "x refs/heads/main\n");
  expect_vc_change(harness, 1);
}

TEST_CASE("watcher: the index is watched only while asked for, and reported as such") {
  Harness harness;
  GitRepository repository(harness);
  harness.call([](Watcher& watcher) { watcher.set_watch_index(true); });
  CHECK(control_files_watched(harness) == 4);
  // The index may have changed since Emacs last read the state: its first
  // look counts as a change.
  expect_vc_change(harness, 2);
  replace_as_git_does(repository.git("index"), "staged");
  expect_vc_change(harness, 2);
  harness.call([](Watcher& watcher) { watcher.set_watch_index(false); });
  CHECK(control_files_watched(harness) == 3);
  replace_as_git_does(repository.git("index"), "staged again");
  append_file(repository.dir / "outside", "d");
  REQUIRE(harness.wait_for_change(3));
  harness.settle();
  CHECK(vc_codes(harness, 1).empty());
}

TEST_CASE("watcher: a commit moving the branch and the index is reported once, for both") {
  Harness harness;
  GitRepository repository(harness, true);
  // git commit: the branch moves under its lock while the index is locked,
  // then the index is committed.
  create_file(repository.git("index.lock"), "new index");
  replace_as_git_does(repository.git("refs/heads/main"), kCommitB);
  REQUIRE(rename(repository.git("index.lock").c_str(), repository.git("index").c_str()) == 0);
  expect_vc_change(harness, 3);
}

TEST_CASE("watcher: a repository's control files go with the last file watched in it") {
  Harness harness;
  GitRepository repository(harness);
  harness.remove(1);
  CHECK(control_files_watched(harness) == 3);
  harness.remove(2);
  CHECK(control_files_watched(harness) == 0);
  std::size_t repositories = 1;
  std::size_t registrations = 0;
  harness.call([&](Watcher& watcher) {
    repositories = watcher.repository_count();
    registrations = watcher.registration_count();
  });
  CHECK(repositories == 0);
  CHECK(registrations == 1);
}

TEST_CASE("watcher: a file of the Git directory itself gets no VC change") {
  Harness harness;
  GitRepository repository(harness);
  create_file(repository.git("COMMIT_EDITMSG"), "message");
  date_back({repository.git("")});
  harness.add(4, repository.git("COMMIT_EDITMSG"));
  harness.settle();
  harness.clear();
  replace_as_git_does(repository.git("HEAD"), "ref: refs/heads/other\n");
  expect_vc_change(harness, 1);
}

TEST_CASE("watcher: HEAD moved while the index is locked comes with the held changes, once") {
  Harness harness;
  GitRepository repository(harness);
  create_file(repository.git("index.lock"), "");
  append_file(repository.dir / "repo/a", "checked out");
  replace_as_git_does(repository.git("HEAD"), "ref: refs/heads/other\n");
  REQUIRE(wait_for_held(harness, 1));
  harness.settle();
  CHECK(harness.received().empty());
  REQUIRE(unlink(repository.git("index.lock").c_str()) == 0);
  REQUIRE(harness.wait_for_change(1));
  // The same drain that brings the change brings the move of HEAD.
  CHECK(vc_codes(harness, 1) == std::vector<std::int64_t>{1});
  CHECK(vc_codes(harness, 2) == std::vector<std::int64_t>{1});
  harness.settle();
  CHECK(harness.changes_for(1) == 1);
  CHECK(vc_codes(harness, 1).size() == 1);
}

TEST_CASE(
    "watcher: a lock on HEAD, a branch or the packed refs holds changes as the index's does") {
  for (const char* lock : {"HEAD.lock", "packed-refs.lock", "refs/heads/main.lock"}) {
    INFO(lock);
    Harness harness;
    GitRepository repository(harness);
    create_file(repository.git(lock), "");
    append_file(repository.dir / "repo/a", "y");
    REQUIRE(wait_for_held(harness, 1));
    harness.settle();
    CHECK(harness.changes_for(1) == 0);
    REQUIRE(unlink(repository.git(lock).c_str()) == 0);
    harness.expect_one_change(1);
  }
}

TEST_CASE("watcher: the index committed a moment before HEAD moves is one operation") {
  Harness harness;
  GitRepository repository(harness);
  // A checkout: the work tree and the index under index.lock, then HEAD
  // under its own lock, with no lock at all in between.
  create_file(repository.git("index.lock"), "");
  append_file(repository.dir / "repo/a", "checked out");
  REQUIRE(wait_for_held(harness, 1));
  harness.settle();
  REQUIRE(rename(repository.git("index.lock").c_str(), repository.git("index").c_str()) == 0);
  replace_as_git_does(repository.git("HEAD"), "ref: refs/heads/other\n");
  REQUIRE(harness.wait_for_change(1));
  CHECK(vc_codes(harness, 1) == std::vector<std::int64_t>{1});
  harness.settle();
  CHECK(harness.changes_for(1) == 1);
}

TEST_CASE("watcher: a linked work tree's branch is watched in the common directory") {
  Harness harness;
  TempDir dir;
  make_directory(dir / "main.git");
  make_directory(dir / "main.git/refs");
  make_directory(dir / "main.git/refs/heads");
  make_directory(dir / "main.git/worktrees");
  make_directory(dir / "main.git/worktrees/wt");
  create_file(dir / "main.git/worktrees/wt/commondir", "../..\n");
  create_file(dir / "main.git/worktrees/wt/HEAD", "ref: refs/heads/wt\n");
  create_file(dir / "main.git/refs/heads/wt", kCommitA);
  make_directory(dir / "wt");
  create_file(dir / "wt/.git", "gitdir: " + dir / "main.git/worktrees/wt\n");
  create_file(dir / "wt/file", "x");
  date_back({dir / "main.git", dir / "main.git/refs/heads", dir / "main.git/worktrees/wt"});
  harness.add(1, dir / "wt/file");
  harness.settle();
  harness.settle();
  harness.clear();
  replace_as_git_does(dir / "main.git/refs/heads/wt", kCommitB);
  REQUIRE(harness.wait_until([&] { return !vc_codes(harness, 1).empty(); }, kReportTimeout));
  harness.settle();
  CHECK(vc_codes(harness, 1) == std::vector<std::int64_t>{1});
}

TEST_CASE("watcher: Mercurial's branch, bookmarks and dirstate are watched") {
  Harness harness;
  TempDir dir;
  make_directory(dir / "repo");
  make_directory(dir / "repo/.hg");
  create_file(dir / "repo/.hg/branch", "default\n");
  create_file(dir / "repo/.hg/dirstate", "d");
  create_file(dir / "repo/file", "x");
  date_back({dir / "repo/.hg"});
  harness.add(1, dir / "repo/file");
  harness.settle();
  harness.settle();
  harness.clear();
  CHECK(control_files_watched(harness) == 4);
  // An active bookmark, as `hg bookmark' makes; then a commit, which
  // rewrites the dirstate's parents.
  create_file(dir / "repo/.hg/bookmarks.current", "feature");
  REQUIRE(harness.wait_until([&] { return !vc_codes(harness, 1).empty(); }, kReportTimeout));
  harness.settle();
  CHECK(vc_codes(harness, 1) == std::vector<std::int64_t>{1});
  harness.clear();
  replace_as_git_does(dir / "repo/.hg/dirstate", "d2");
  REQUIRE(harness.wait_until([&] { return !vc_codes(harness, 1).empty(); }, kReportTimeout));
  harness.settle();
  CHECK(vc_codes(harness, 1) == std::vector<std::int64_t>{1});
  // A lock of Mercurial's holds changes as Git's do.
  create_file(dir / "repo/.hg/wlock", "");
  append_file(dir / "repo/file", "y");
  REQUIRE(wait_for_held(harness, 1));
  harness.settle();
  CHECK(harness.changes_for(1) == 0);
  REQUIRE(unlink((dir / "repo/.hg/wlock").c_str()) == 0);
  harness.expect_one_change(1);
}

TEST_CASE("watcher: polled files have their repository's control files polled too") {
  Harness harness;
  TempDir dir;
  make_directory(dir / "repo");
  make_directory(dir / "repo/.git");
  create_file(dir / "repo/.git/HEAD", "ref: refs/heads/main\n");
  create_file(dir / "repo/file", "x");
  date_back({dir / "repo/.git"});
  harness.set_poll_interval(50ms);
  harness.add(1, dir / "repo/file", WatchMode::poll);
  harness.settle();
  harness.settle();
  harness.clear();
  std::uint64_t watches = harness.stats().watches.load();
  CHECK(watches == 0);
  replace_as_git_does(dir / "repo/.git/HEAD", "ref: refs/heads/other\n");
  REQUIRE(harness.wait_until([&] { return !vc_codes(harness, 1).empty(); }, kReportTimeout));
}
