// Tests of the files output spills to: a memfd where Linux has them, and
// the file removed as it is made that stands in for one elsewhere, run here
// beside it.
#include "core/spill.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "catch_compat.h"
#include "core/pipe.h"
#include "core/platform.h"
#include "support.h"

using namespace fastrevert;

namespace {

bool is_cloexec(int fd) {
  return (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
}

// What /proc/self/fd says descriptor FD is.
std::string link_of(int fd) {
  std::string link = "/proc/self/fd/" + std::to_string(fd);
  char target[PATH_MAX];
  ssize_t length = readlink(link.c_str(), target, sizeof target - 1);
  REQUIRE(length > 0);
  return std::string(target, static_cast<std::size_t>(length));
}

// The directory file spills go to, as the environment the tests run in
// names it.
std::string spill_directory() {
  const char* chosen = std::getenv("TMPDIR");
  std::string directory = chosen && *chosen ? chosen : "/tmp";
  while (directory.size() > 1 && directory.back() == '/') directory.pop_back();
  return directory;
}

// Reads all FD holds through NAME, as Emacs's `insert-file-contents' does.
std::string read_by_name(const std::string& name) {
  int opened = open(name.c_str(), O_RDONLY | O_CLOEXEC);
  REQUIRE(opened >= 0);
  std::string bytes;
  char buffer[4096];
  for (;;) {
    ssize_t got = read(opened, buffer, sizeof buffer);
    REQUIRE(got >= 0);
    if (got == 0) break;
    bytes.append(buffer, static_cast<std::size_t>(got));
  }
  close(opened);
  return bytes;
}

}  // namespace

TEST_CASE("spill: a file spill is a close-on-exec regular file with no name left", "[spill]") {
  int fd = open_file_spill("fastrevert-spill-test");
  REQUIRE(fd >= 0);
  CHECK(is_cloexec(fd));
  struct stat status;
  REQUIRE(fstat(fd, &status) == 0);
  CHECK(S_ISREG(status.st_mode));
  CHECK(status.st_size == 0);
  CHECK(status.st_nlink == 0);
  CHECK((status.st_mode & 0777) == 0600);
  // Made in the directory of temporary files, under the name asked for,
  // and removed already.
  std::string target = link_of(fd);
  std::string expected_start = spill_directory() + "/fastrevert-spill-test-";
  CHECK(target.compare(0, expected_start.size(), expected_start) == 0);
  CHECK(target.size() > 10);
  CHECK(target.compare(target.size() - 10, 10, " (deleted)") == 0);
  std::string path = target.substr(0, target.size() - 10);
  CHECK(access(path.c_str(), F_OK) != 0);
  close(fd);
}

TEST_CASE("spill: a file spill is written and read at offsets, and opened by its descriptor's name",
          "[spill]") {
  int fd = open_file_spill("fastrevert-spill-test");
  REQUIRE(fd >= 0);
  std::string bytes = fastrevert::test::pattern_bytes(100000, 3);
  CHECK(write_all_at(fd, bytes.substr(50000), 50000) == 0);
  CHECK(write_all_at(fd, bytes.substr(0, 50000), 0) == 0);
  CHECK(read_at(fd, 0, 200000) == bytes);
  CHECK(read_at(fd, 99990, 100010) == bytes.substr(99990));
  // The offset of the descriptor itself never moved: a duplicate of it,
  // which is what /dev/fd/N opens on macOS and the BSDs, reads from 0.
  CHECK(lseek(fd, 0, SEEK_CUR) == 0);
  // The names Emacs opens it by (fastrevert--memfd-file-name): on Linux
  // both open the file anew, nameless as it is.
  CHECK(read_by_name("/proc/self/fd/" + std::to_string(fd)) == bytes);
  CHECK(read_by_name("/dev/fd/" + std::to_string(fd)) == bytes);
  close(fd);
}

TEST_CASE("spill: file spills made at once are distinct files", "[spill]") {
  constexpr int kCount = 64;
  int fds[kCount];
  for (int& fd : fds) {
    fd = open_file_spill("fastrevert-spill-test");
    REQUIRE(fd >= 0);
  }
  for (int i = 0; i < kCount; ++i) {
    REQUIRE(write_all_at(fds[i], std::to_string(i), 0) == 0);
  }
  for (int i = 0; i < kCount; ++i) {
    CHECK(read_at(fds[i], 0, 100) == std::to_string(i));
    close(fds[i]);
  }
}

TEST_CASE("spill: open_spill makes what spill_mechanism names, and spill_call names its call",
          "[spill]") {
  int fd = open_spill("fastrevert-spill-test");
  REQUIRE(fd >= 0);
  CHECK(is_cloexec(fd));
  std::string target = link_of(fd);
  if (spill_mechanism() == SpillMechanism::memfd) {
    CHECK(target == "/memfd:fastrevert-spill-test (deleted)");
    CHECK(std::string(spill_call()) == "memfd_create");
  } else {
    CHECK(target.find("/fastrevert-spill-test-") != std::string::npos);
    CHECK(std::string(spill_call()) == "open");
  }
#if !FASTREVERT_HAVE_MEMFD_CREATE
  CHECK(spill_mechanism() == SpillMechanism::file);
#endif
  close(fd);
}

TEST_CASE("spill: giving bytes back keeps the file's size and the bytes after them", "[spill]") {
  int fd = open_spill("fastrevert-spill-test");
  REQUIRE(fd >= 0);
  std::string bytes = fastrevert::test::pattern_bytes(std::size_t{4} << 20, 5);
  REQUIRE(write_all_at(fd, bytes, 0) == 0);
  struct stat before;
  REQUIRE(fstat(fd, &before) == 0);
  const std::uint64_t half = bytes.size() / 2;
  give_back_spilled(fd, static_cast<off_t>(half));
  struct stat after;
  REQUIRE(fstat(fd, &after) == 0);
  CHECK(static_cast<std::uint64_t>(after.st_size) == bytes.size());
  CHECK(read_at(fd, half, bytes.size()) == bytes.substr(half));
  if (kSpillGivesBackMemory && spill_mechanism() == SpillMechanism::memfd) {
    // A memfd gives the memory back at once, and the bytes read as zeros.
    CHECK(after.st_blocks * 512 <= before.st_blocks * 512 - static_cast<blkcnt_t>(half) + 65536);
    CHECK(read_at(fd, 0, 4096) == std::string(4096, '\0'));
  } else if (!kSpillGivesBackMemory) {
    // Nothing is given back before the close.
    CHECK(read_at(fd, 0, half) == bytes.substr(0, half));
  }
  close(fd);
}
