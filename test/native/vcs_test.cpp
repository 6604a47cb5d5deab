// Tests of finding a file's repository and of looking into it (vcs.h).
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include <chrono>
#include <string>
#include <unordered_set>
#include <vector>

#include "catch_compat.h"
#include "core/vcs.h"
#include "support.h"

using fastrevert::control_files;
using fastrevert::ControlFile;
using fastrevert::ControlRole;
using fastrevert::git_common_dir;
using fastrevert::head_ref_of;
using fastrevert::kLockQuiet;
using fastrevert::OperationHold;
using fastrevert::probe_repository;
using fastrevert::read_head_ref;
using fastrevert::RepositoryFinder;
using fastrevert::RepositoryState;
using fastrevert::test::date_back;
using fastrevert::test::TempDir;
using fastrevert::test::write_file;
using namespace std::chrono_literals;

namespace {

void make_dir(const std::string& path) {
  REQUIRE(mkdir(path.c_str(), 0755) == 0);
}

}  // namespace

TEST_CASE("vcs: a directory belongs to the nearest repository above it", "[vcs]") {
  TempDir dir;
  make_dir(dir / "top");
  make_dir(dir / "top/.git");
  make_dir(dir / "top/a");
  make_dir(dir / "top/a/b");
  make_dir(dir / "top/hg");
  make_dir(dir / "top/hg/.hg");
  make_dir(dir / "top/sub");
  // A submodule or linked work tree: a .git file names the Git directory,
  // relative to the file's directory.
  write_file(dir / "top/sub/.git", "gitdir: ../.git/modules/sub\n");
  make_dir(dir / "outside");

  RepositoryFinder finder;
  CHECK(finder.control_dir_of(dir / "top/a/b") == dir / "top/.git");
  CHECK(finder.control_dir_of(dir / "top/a") == dir / "top/.git");
  CHECK(finder.control_dir_of(dir / "top") == dir / "top/.git");
  CHECK(finder.control_dir_of(dir / "top/hg") == dir / "top/hg/.hg");
  CHECK(finder.control_dir_of(dir / "top/sub") == dir / "top/sub/../.git/modules/sub");
  CHECK(finder.control_dir_of(dir / "outside").empty());
  // Answers are memoized: a repository made later is not seen by this finder.
  make_dir(dir / "outside/.git");
  CHECK(finder.control_dir_of(dir / "outside").empty());
  CHECK(RepositoryFinder().control_dir_of(dir / "outside") == dir / "outside/.git");
}

TEST_CASE("vcs: a look into a repository sees its lock and a sequence under way", "[vcs]") {
  TempDir dir;
  make_dir(dir / ".git");
  date_back({dir / ".git"});
  CHECK_FALSE(probe_repository(dir / ".git").busy());

  write_file(dir / ".git/index.lock", "");
  CHECK(probe_repository(dir / ".git").locked);
  REQUIRE(unlink((dir / ".git/index.lock").c_str()) == 0);

  for (const char* sequence : {"rebase-merge", "rebase-apply", "sequencer"}) {
    make_dir(dir / ".git" + "/" + sequence);
    auto state = probe_repository(dir / ".git");
    CHECK(state.sequence);
    CHECK_FALSE(state.locked);
    REQUIRE(rmdir((dir / ".git" + "/" + sequence).c_str()) == 0);
  }

  // Mercurial's wlock is a symlink to a name that does not exist.
  make_dir(dir / ".hg");
  date_back({dir / ".hg"});
  CHECK_FALSE(probe_repository(dir / ".hg").busy());
  REQUIRE(symlink("host:12345", (dir / ".hg/wlock").c_str()) == 0);
  CHECK(probe_repository(dir / ".hg").locked);
}

TEST_CASE("vcs: every lock a Git command takes on the way to a new HEAD keeps it busy", "[vcs]") {
  TempDir dir;
  make_dir(dir / ".git");
  make_dir(dir / ".git/refs");
  make_dir(dir / ".git/refs/heads");
  make_dir(dir / ".git/refs/heads/feature");
  make_dir(dir / ".git/refs/tags");
  for (const char* lock : {"index.lock", "HEAD.lock", "packed-refs.lock", "refs/heads/main.lock",
                           "refs/heads/feature/x.lock"}) {
    INFO(lock);
    std::string path = dir / ".git" + "/" + lock;
    write_file(path, "");
    CHECK(probe_repository(dir / ".git").locked);
    REQUIRE(unlink(path.c_str()) == 0);
    date_back({dir / ".git", dir / ".git/refs/heads", dir / ".git/refs/heads/feature"});
    CHECK_FALSE(probe_repository(dir / ".git").busy());
  }
  // A tag's lock moves no branch: no work tree or mode line depends on it.
  write_file(dir / ".git/refs/tags/v1.lock", "");
  CHECK_FALSE(probe_repository(dir / ".git").locked);

  // Mercurial's store lock counts as its working directory's.
  make_dir(dir / ".hg");
  make_dir(dir / ".hg/store");
  write_file(dir / ".hg/store/lock", "");
  CHECK(probe_repository(dir / ".hg").locked);
}

TEST_CASE("vcs: a lock that has just gone leaves its repository busy for a moment", "[vcs]") {
  TempDir dir;
  make_dir(dir / ".git");
  make_dir(dir / ".git/refs");
  make_dir(dir / ".git/refs/heads");
  // The index committed: its lock is renamed over it, and HEAD's lock is
  // not taken yet.  A machine busy enough to come back from the rename
  // only kLockQuiet later would find the change quiet already: the look
  // that counts is one made soon enough after it.
  RepositoryState state;
  bool soon_enough = false;
  for (int attempt = 0; attempt < 100 && !soon_enough; ++attempt) {
    write_file(dir / ".git/index.lock", "");
    auto renamed = std::chrono::steady_clock::now();
    REQUIRE(rename((dir / ".git/index.lock").c_str(), (dir / ".git/index").c_str()) == 0);
    state = probe_repository(dir / ".git");
    soon_enough = std::chrono::steady_clock::now() - renamed < kLockQuiet / 2;
  }
  REQUIRE(soon_enough);
  CHECK_FALSE(state.locked);
  CHECK(state.settling());
  CHECK(state.busy());
  // Until the rename is kLockQuiet old.
  CHECK(state.quiet_in > 0ms);
  CHECK(state.quiet_in <= kLockQuiet);
  // A while later, with nothing come or gone since, it is idle.
  date_back({dir / ".git", dir / ".git/refs/heads"});
  CHECK_FALSE(probe_repository(dir / ".git").busy());
  // A branch's lock gone from the directory of branches counts the same.
  write_file(dir / ".git/refs/heads/main.lock", "");
  REQUIRE(unlink((dir / ".git/refs/heads/main.lock").c_str()) == 0);
  CHECK(probe_repository(dir / ".git").settling());
  date_back({dir / ".git/refs/heads"});
  CHECK_FALSE(probe_repository(dir / ".git").settling());
  // And Mercurial's wlock.
  make_dir(dir / ".hg");
  write_file(dir / ".hg/wlock", "");
  REQUIRE(unlink((dir / ".hg/wlock").c_str()) == 0);
  CHECK(probe_repository(dir / ".hg").settling());
  date_back({dir / ".hg"});
  CHECK_FALSE(probe_repository(dir / ".hg").busy());
}

TEST_CASE("vcs: a linked work tree's refs are found in its common directory", "[vcs]") {
  TempDir dir;
  make_dir(dir / "main.git");
  make_dir(dir / "main.git/worktrees");
  make_dir(dir / "main.git/worktrees/wt");
  CHECK(git_common_dir(dir / "main.git") == dir / "main.git");
  write_file(dir / "main.git/worktrees/wt/commondir", "../..\n");
  CHECK(git_common_dir(dir / "main.git/worktrees/wt") == dir / "main.git/worktrees/wt/../..");
  // A branch lock in the common directory keeps the linked work tree busy.
  make_dir(dir / "main.git/refs");
  make_dir(dir / "main.git/refs/heads");
  write_file(dir / "main.git/refs/heads/wt-branch.lock", "");
  auto state = probe_repository(dir / "main.git/worktrees/wt");
  CHECK(state.locked);
  CHECK(state.common_dir == dir / "main.git/worktrees/wt/../..");
}

TEST_CASE("vcs: HEAD's text names a branch, or none when it is detached", "[vcs]") {
  CHECK(head_ref_of("ref: refs/heads/main\n") == "refs/heads/main");
  CHECK(head_ref_of("ref: refs/heads/with space\r\n") == "refs/heads/with space");
  CHECK(head_ref_of("ref: refs/heads/x") == "refs/heads/x");
  CHECK(head_ref_of("4b825dc642cb6eb9a060e54bf8d69288fbee4904\n").empty());
  CHECK(head_ref_of("").empty());
  TempDir dir;
  write_file(dir / "HEAD", "ref: refs/heads/topic\n");
  CHECK(read_head_ref(dir / "HEAD") == "refs/heads/topic");
  CHECK(read_head_ref(dir / "missing").empty());
}

TEST_CASE("vcs: the control files are HEAD, its branch and packed-refs, and the index on request",
          "[vcs]") {
  auto paths = [](const std::vector<ControlFile>& files, ControlRole role) {
    std::vector<std::string> found;
    for (const auto& file : files) {
      if (file.role == role) found.push_back(file.path);
    }
    return found;
  };
  auto git = control_files("/r/.git", "/r/.git", "refs/heads/main", false);
  CHECK(paths(git, ControlRole::head) ==
        std::vector<std::string>{"/r/.git/HEAD", "/r/.git/refs/heads/main", "/r/.git/packed-refs"});
  CHECK(paths(git, ControlRole::index).empty());
  auto detached = control_files("/r/.git", "/r/.git", "", true);
  CHECK(paths(detached, ControlRole::head) ==
        std::vector<std::string>{"/r/.git/HEAD", "/r/.git/packed-refs"});
  CHECK(paths(detached, ControlRole::index) == std::vector<std::string>{"/r/.git/index"});
  // A linked work tree: HEAD and the index are its own, the refs shared.
  auto linked = control_files("/m/.git/worktrees/w", "/m/.git", "refs/heads/w", true);
  CHECK(paths(linked, ControlRole::head) == std::vector<std::string>{"/m/.git/worktrees/w/HEAD",
                                                                     "/m/.git/refs/heads/w",
                                                                     "/m/.git/packed-refs"});
  CHECK(paths(linked, ControlRole::index) == std::vector<std::string>{"/m/.git/worktrees/w/index"});
  // Refs in the reftable format are listed in one file.
  auto reftable = control_files("/r/.git", "/r/.git", "refs/heads/.invalid", false);
  CHECK(paths(reftable, ControlRole::head) ==
        std::vector<std::string>{"/r/.git/HEAD", "/r/.git/reftable/tables.list"});
  auto hg = control_files("/h/.hg", "", "", false);
  CHECK(paths(hg, ControlRole::head) ==
        std::vector<std::string>{"/h/.hg/branch", "/h/.hg/bookmarks", "/h/.hg/bookmarks.current",
                                 "/h/.hg/dirstate"});
  CHECK(paths(hg, ControlRole::index).empty());
}

TEST_CASE("vcs: a hold looks again as soon as a lock's coming and going is quiet", "[vcs]") {
  // Git takes its locks one after another: a look that finds only that one
  // came or went lately is followed by another as soon as that is
  // kLockQuiet old, not a whole probe interval later.  A lock or a
  // sequence under way is looked at every probe interval.
  uv_loop_t loop{};
  REQUIRE(uv_loop_init(&loop) == 0);
  {
    OperationHold hold(
        &loop, [](const std::unordered_set<std::uint64_t>&) {}, [](const std::string&) {});
    RepositoryState settling;
    settling.quiet_in = 7ms;
    RepositoryState locked;
    locked.locked = true;
    locked.quiet_in = 7ms;
    RepositoryState sequence;
    sequence.sequence = true;
    sequence.quiet_in = 7ms;
    REQUIRE(hold.offer(1, "/a/.git", settling));
    REQUIRE(hold.offer(2, "/b/.git", locked));
    REQUIRE(hold.offer(3, "/c/.git", sequence));
    CHECK(hold.next_probe_in("/a/.git") == 7);
    CHECK(hold.next_probe_in("/b/.git") == OperationHold::kProbeInterval.count());
    CHECK(hold.next_probe_in("/c/.git") == OperationHold::kProbeInterval.count());
    // A look that finds the lock gone, but lately, looks again soon too.
    CHECK(hold.update("/b/.git", settling).empty());
    CHECK(hold.next_probe_in("/b/.git") == 7);
    CHECK(hold.next_probe_in("/d/.git") == -1);
    hold.shutdown();
  }
  uv_run(&loop, UV_RUN_DEFAULT);
  REQUIRE(uv_loop_close(&loop) == 0);
}
