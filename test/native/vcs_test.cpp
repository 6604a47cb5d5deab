// Tests of finding a file's repository and of looking into it (vcs.h).
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "catch_compat.h"
#include "core/vcs.h"
#include "support.h"

using fastrevert::probe_repository;
using fastrevert::RepositoryFinder;
using fastrevert::test::TempDir;
using fastrevert::test::write_file;

namespace {

void make_dir(const std::string& path) { REQUIRE(mkdir(path.c_str(), 0755) == 0); }

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
  CHECK_FALSE(probe_repository(dir / ".hg").busy());
  REQUIRE(symlink("host:12345", (dir / ".hg/wlock").c_str()) == 0);
  CHECK(probe_repository(dir / ".hg").locked);
}
