// Helpers shared by the native tests.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <system_error>
#include <vector>

#include "catch_compat.h"
#include "core/child.h"

namespace fastrevert::test {

// A fresh directory under $TMPDIR (or /tmp), removed with its contents.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base && *base ? base : "/tmp") + "/fastrevert-test-XXXXXX";
    std::vector<char> buffer(pattern.begin(), pattern.end());
    buffer.push_back('\0');
    REQUIRE(mkdtemp(buffer.data()) != nullptr);
    path_ = buffer.data();
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  std::string operator/(const std::string& name) const { return file(name); }

 private:
  std::string path_;
};

// Writes CONTENT to the file PATH, created or truncated, with MODE.
// Dates each of PATHS a minute back, as if nothing had changed in it
// lately: a repository's control directory made by a test is then not one
// a command has just changed (vcs.h, RepositoryState::settling).
inline void date_back(std::initializer_list<std::string> paths) {
  for (const auto& path : paths) {
    timespec times[2];
    REQUIRE(clock_gettime(CLOCK_REALTIME, &times[0]) == 0);
    times[0].tv_sec -= 60;
    times[1] = times[0];
    REQUIRE(utimensat(AT_FDCWD, path.c_str(), times, 0) == 0);
  }
}

inline void write_file(const std::string& path, const std::string& content, mode_t mode = 0644) {
  std::ofstream out(path, std::ios::binary);
  out << content;
  out.close();
  REQUIRE(out.good());
  REQUIRE(chmod(path.c_str(), mode) == 0);
}

// A pipe whose read end is non-blocking, as a child's output pipe is; both
// ends are closed at scope exit unless released.
struct TestPipe {
  int read_end = -1;
  int write_end = -1;
  TestPipe() {
    int ends[2];
    REQUIRE(pipe2(ends, O_CLOEXEC) == 0);
    read_end = ends[0];
    write_end = ends[1];
    fcntl(read_end, F_SETFL, fcntl(read_end, F_GETFL) | O_NONBLOCK);
  }
  ~TestPipe() {
    if (read_end >= 0) close(read_end);
    if (write_end >= 0) close(write_end);
  }
  TestPipe(const TestPipe&) = delete;
  TestPipe& operator=(const TestPipe&) = delete;
  void write_all(const std::string& bytes) const {
    REQUIRE(write(write_end, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size()));
  }
  // Hands the write end over to the caller, who closes it.
  int release_writer() {
    int end = write_end;
    write_end = -1;
    return end;
  }
};

// A child that runs until it is killed.
inline SpawnSpec never_exiting() {
  SpawnSpec spec;
  spec.program = "/bin/sleep";
  spec.argv = {"sleep", "1000"};
  return spec;
}

// A child running SCRIPT under /bin/sh -c.
inline SpawnSpec shell(const std::string& script) {
  SpawnSpec spec;
  spec.program = "/bin/sh";
  spec.argv = {"sh", "-c", script};
  return spec;
}

// Deterministic bytes that make a reordering or a lost chunk visible.
inline std::string pattern_bytes(std::size_t size, std::uint32_t seed) {
  std::string bytes(size, '\0');
  std::uint32_t state = seed;
  for (std::size_t i = 0; i < size; ++i) {
    state = state * 1664525u + 1013904223u;
    bytes[i] = static_cast<char>(state >> 24);
  }
  return bytes;
}

// Whether PID was reaped and no longer exists.
inline bool is_gone(pid_t pid) {
  errno = 0;
  return waitpid(pid, nullptr, WNOHANG) == -1 && errno == ECHILD && kill(pid, 0) == -1;
}

}  // namespace fastrevert::test
