// Tests of spawning, reaping and quitting a child: argv, environment, directory, redirections,
// errors, and the clean state a child starts in.
#include "core/child.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "catch_compat.h"
#include "core/call.h"
#include "core/child_exit.h"
#include "core/errors.h"
#include "core/platform.h"
#include "support.h"

using namespace fastrevert;

using fastrevert::test::is_gone;
using fastrevert::test::never_exiting;
using fastrevert::test::shell;
using fastrevert::test::TempDir;
using fastrevert::test::TestPipe;
using fastrevert::test::write_file;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

struct Output {
  std::string out;
  std::string err;
  int status = -1;
};

// Spawns SPEC and collects everything it prints.
Output run(const SpawnSpec& spec, std::string_view input = {}) {
  Child child = spawn(spec);
  Output output;
  RunOptions options;
  options.stdin_data = input;
  RunResult result = run_to_completion(
      child, [&](std::string_view bytes) { output.out.append(bytes); },
      [&](std::string_view bytes) { output.err.append(bytes); }, options);
  output.status = result.wait_status;
  return output;
}

bool is_cloexec(int fd) {
  return (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
}
bool is_nonblocking(int fd) {
  return (fcntl(fd, F_GETFL) & O_NONBLOCK) != 0;
}

// The value of a "Name:\tvalue" line in /proc/<pid>/status text.
std::string status_field(const std::string& status_text, const std::string& name) {
  std::istringstream lines(status_text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + ":", 0) == 0) {
      std::string value = line.substr(name.size() + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      return value;
    }
  }
  return {};
}

}  // namespace

// A child starts by clone3 where that is built (core/spawn_vfork.h), else
// by posix_spawn, else by fork and exec (core/spawn_fork.h); the tests
// marked with each_start() run each way, so that the other systems' paths
// run here.
SpawnSpec::Start each_start() {
  return GENERATE(SpawnSpec::Start::fastest, SpawnSpec::Start::posix_spawn,
                  SpawnSpec::Start::fork);
}

TEST_CASE("spawn passes argv exactly, including spaces and empty arguments", "[spawn]") {
  SpawnSpec spec = shell("printf '%s|' \"$@\"");
  spec.start = each_start();
  spec.argv.insert(spec.argv.end(), {"sh", "a b", "", "c"});
  Output output = run(spec);
  CHECK(output.out == "a b||c|");
  CHECK(WIFEXITED(output.status));
  CHECK(WEXITSTATUS(output.status) == 0);
}

TEST_CASE("spawn gives the child exactly the environment it is given", "[spawn]") {
  SpawnSpec spec;
  spec.start = each_start();
  spec.program = "/usr/bin/env";
  spec.argv = {"env"};
  spec.env = std::make_shared<const std::vector<std::string>>(
      std::vector<std::string>{"FOO=bar", "EMPTY="});
  CHECK(run(spec).out == "FOO=bar\nEMPTY=\n");

  spec.env = std::make_shared<const std::vector<std::string>>();
  CHECK(run(spec).out.empty());
}

TEST_CASE("spawn without an environment inherits the caller's", "[spawn]") {
  setenv("FASTREVERT_SPAWN_TEST", "inherited", 1);
  SpawnSpec spec = shell("printf %s \"$FASTREVERT_SPAWN_TEST\"");
  CHECK(run(spec).out == "inherited");
  unsetenv("FASTREVERT_SPAWN_TEST");
}

TEST_CASE("spawn runs the child in the given working directory", "[spawn]") {
  TempDir dir;
  char resolved[PATH_MAX];
  REQUIRE(realpath(dir.path().c_str(), resolved));
  SpawnSpec spec;
  spec.start = each_start();
  spec.program = "/bin/pwd";
  spec.argv = {"pwd", "-P"};
  spec.cwd = dir.path();
  CHECK(run(spec).out == std::string(resolved) + "\n");
}

TEST_CASE("spawn of a missing program throws ENOENT naming the program", "[spawn]") {
  SpawnSpec spec;
  spec.start = each_start();
  spec.program = "/nonexistent/fastrevert-no-such-program";
  try {
    spawn(spec);
    FAIL("spawn did not throw");
  } catch (const SystemError& error) {
    CHECK(error.code().value() == ENOENT);
    CHECK(error.function() == "posix_spawn");
    CHECK(error.path() == spec.program);
  }
}

TEST_CASE("spawn of a non-executable file throws EACCES naming the program", "[spawn]") {
  // Even root needs an execute bit to exec a file, so this holds for root.
  TempDir dir;
  std::string script = dir.file("not-executable");
  write_file(script, "#!/bin/sh\necho hi\n", 0644);
  SpawnSpec spec;
  spec.start = each_start();
  spec.program = script;
  try {
    spawn(spec);
    FAIL("spawn did not throw");
  } catch (const SystemError& error) {
    CHECK(error.code().value() == EACCES);
    CHECK(error.path() == script);
  }
}

TEST_CASE("spawn with a missing working directory throws naming the directory", "[spawn]") {
  SpawnSpec spec;
  spec.start = each_start();
  spec.program = "/bin/true";
  spec.cwd = "/nonexistent/fastrevert-no-such-dir";
  try {
    spawn(spec);
    FAIL("spawn did not throw");
  } catch (const SystemError& error) {
    CHECK(error.code().value() == ENOENT);
    CHECK(error.function() == "chdir");
    CHECK(error.path() == spec.cwd);
  }
}

TEST_CASE("spawn reads stdin from a file", "[spawn]") {
  TempDir dir;
  write_file(dir.file("input"), "line one\nline two\n");
  SpawnSpec spec;
  spec.program = "/bin/cat";
  spec.stdin_mode = SpawnSpec::Stdin::file;
  spec.stdin_file = dir.file("input");
  CHECK(run(spec).out == "line one\nline two\n");
}

TEST_CASE("spawn with a missing stdin file throws naming the file", "[spawn]") {
  SpawnSpec spec;
  spec.program = "/bin/cat";
  spec.stdin_mode = SpawnSpec::Stdin::file;
  spec.stdin_file = "/nonexistent/input";
  try {
    spawn(spec);
    FAIL("spawn did not throw");
  } catch (const SystemError& error) {
    CHECK(error.code().value() == ENOENT);
    CHECK(error.function() == "open");
    CHECK(error.path() == spec.stdin_file);
  }
}

TEST_CASE("spawn with stdin from /dev/null gives the child end of file at once", "[spawn]") {
  SpawnSpec spec;
  spec.program = "/bin/cat";
  Output output = run(spec);
  CHECK(output.out.empty());
  CHECK(WEXITSTATUS(output.status) == 0);
}

TEST_CASE("spawn with a stdin pipe carries the bytes written to it", "[spawn]") {
  SpawnSpec spec;
  spec.start = each_start();
  spec.program = "/bin/cat";
  spec.stdin_mode = SpawnSpec::Stdin::pipe;
  CHECK(run(spec, "through the pipe").out == "through the pipe");
}

TEST_CASE("spawn merges stderr into the stdout pipe in write order", "[spawn]") {
  SpawnSpec spec = shell("echo out1; echo err1 >&2; echo out2; echo err2 >&2");
  spec.stderr_mode = SpawnSpec::Stderr::merge;
  spec.start = each_start();
  Child child = spawn(spec);
  CHECK(child.stderr_fd == -1);
  std::string out;
  run_to_completion(
      child, [&](std::string_view bytes) { out.append(bytes); }, nullptr);
  CHECK(out == "out1\nerr1\nout2\nerr2\n");
}

TEST_CASE("spawn keeps stderr separate when asked", "[spawn]") {
  SpawnSpec spec = shell("echo out; echo err >&2");
  spec.start = each_start();
  Output output = run(spec);
  CHECK(output.out == "out\n");
  CHECK(output.err == "err\n");
}

TEST_CASE("spawn sends stderr to a file or to /dev/null", "[spawn]") {
  TempDir dir;
  SpawnSpec spec = shell("echo out; echo err >&2");
  spec.stderr_mode = SpawnSpec::Stderr::file;
  spec.stderr_file = dir.file("errors");
  Output output = run(spec);
  CHECK(output.out == "out\n");
  CHECK(read_file(dir.file("errors")) == "err\n");

  spec.stderr_mode = SpawnSpec::Stderr::null;
  output = run(spec);
  CHECK(output.out == "out\n");
  CHECK(output.err.empty());
}

TEST_CASE("spawn sends stdout to a file, truncating it", "[spawn]") {
  TempDir dir;
  write_file(dir.file("out"), "old content that is longer");
  SpawnSpec spec = shell("echo new");
  spec.stdout_mode = SpawnSpec::Stdout::file;
  spec.stdout_file = dir.file("out");
  Child child = spawn(spec);
  CHECK(child.stdout_fd == -1);
  run_to_completion(child, nullptr, nullptr);
  CHECK(read_file(dir.file("out")) == "new\n");
}

TEST_CASE("spawn returns close-on-exec descriptors, non-blocking pipe ends and an exit descriptor",
          "[spawn]") {
  SpawnSpec spec;
  spec.program = "/bin/cat";
  spec.stdin_mode = SpawnSpec::Stdin::pipe;
  spec.start = each_start();
  Child child = spawn(spec);
  REQUIRE(child.pid > 0);
  // A pidfd needs Linux 5.3 or later; a portable build has none.
  CHECK((child.pidfd >= 0) == (kChildExitMechanism != ChildExitMechanism::waitpid));
  for (int fd : {child.stdin_fd, child.stdout_fd, child.stderr_fd}) {
    REQUIRE(fd > 2);
    CHECK(is_cloexec(fd));
  }
  if (child.pidfd >= 0) {
    CHECK(child.pidfd > 2);
    CHECK(is_cloexec(child.pidfd));
  }
  for (int fd : {child.stdin_fd, child.stdout_fd, child.stderr_fd}) CHECK(is_nonblocking(fd));
  RunResult result = run_to_completion(child, nullptr, nullptr);
  CHECK(WIFEXITED(result.wait_status));
  CHECK(child.pid == -1);
  CHECK(child.stdout_fd == -1);
}

TEST_CASE("spawn starts the child with no signal blocked, and ignoring only what stock's would",
          "[spawn]") {
  sigset_t blocked;
  sigset_t previous_mask;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &blocked, &previous_mask);
  // Emacs resets SIGINT, SIGQUIT, SIGPROF and SIGPIPE for its children; any
  // other signal it ignores, its children ignore too.
  struct sigaction ignore = {};
  ignore.sa_handler = SIG_IGN;
  const int ignored_here[] = {SIGUSR2, SIGINT, SIGPIPE, SIGPROF};
  struct sigaction previous_actions[std::size(ignored_here)];
  for (std::size_t i = 0; i < std::size(ignored_here); ++i) {
    sigaction(ignored_here[i], &ignore, &previous_actions[i]);
  }

  SpawnSpec spec;
  spec.program = "/bin/cat";
  spec.argv = {"cat", "/proc/self/status"};
  spec.start = each_start();
  Output output = run(spec);

  for (std::size_t i = 0; i < std::size(ignored_here); ++i) {
    sigaction(ignored_here[i], &previous_actions[i], nullptr);
  }
  pthread_sigmask(SIG_SETMASK, &previous_mask, nullptr);

  CHECK(status_field(output.out, "SigBlk") == "0000000000000000");
  // glibc's posix_spawn leaves its two internal signals (32 and 33, below
  // SIGRTMIN, which no program may use) ignored.
  unsigned long long ignored = std::stoull(status_field(output.out, "SigIgn"), nullptr, 16);
  unsigned long long glibc_internal = (1ull << (32 - 1)) | (1ull << (33 - 1));
  CHECK((ignored & ~glibc_internal) == (1ull << (SIGUSR2 - 1)));
}

namespace {

// Where a handler run by a child before its exec reports.
pid_t handler_owner = -1;
int handler_report_fd = -1;

void report_foreign_run(int) {
  int saved_errno = errno;
  if (getpid() != handler_owner) {
    ssize_t ignored = write(handler_report_fd, "!", 1);
    (void)ignored;
  }
  errno = saved_errno;
}

}  // namespace

TEST_CASE("no handler of the caller's runs in a child that a signal reaches before its exec",
          "[spawn]") {
  // Where the child runs code of the module's before its exec (clone3 and
  // fork; glibc's posix_spawn has its own child), it sends itself SIGUSR1
  // while every signal is blocked: the signal arrives as it unblocks them,
  // where a handler of the caller's would run.
  SpawnSpec::Start start = GENERATE(SpawnSpec::Start::fastest, SpawnSpec::Start::fork);
  TestPipe report;
  handler_owner = getpid();
  handler_report_fd = report.write_end;
  struct sigaction reporting = {};
  reporting.sa_handler = report_foreign_run;
  sigemptyset(&reporting.sa_mask);
  struct sigaction previous = {};
  sigaction(SIGUSR1, &reporting, &previous);

  SpawnSpec spec;
  spec.program = "/bin/true";
  spec.stdout_mode = SpawnSpec::Stdout::null;
  spec.stderr_mode = SpawnSpec::Stderr::null;
  spec.start = start;
  spec.signal_before_exec = SIGUSR1;
  Child child = spawn(spec);
  int status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(child.pid, &status, 0);
  } while (reaped < 0 && errno == EINTR);
  sigaction(SIGUSR1, &previous, nullptr);

  REQUIRE(reaped == child.pid);
  child.pid = -1;
  // The signal reached the child, at its default disposition.
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGUSR1);
  char byte;
  CHECK(read(report.read_end, &byte, 1) < 0);
  CHECK(errno == EAGAIN);
}

TEST_CASE("spawn gives the child the limit on open files it is asked to", "[spawn]") {
  struct rlimit own;
  REQUIRE(getrlimit(RLIMIT_NOFILE, &own) == 0);
  REQUIRE(own.rlim_cur > 64);
  SpawnSpec spec = shell("ulimit -Sn; ulimit -Hn");
  spec.start = each_start();
  SECTION("as given") {
    spec.file_limit = FileLimit{own.rlim_cur - 1, own.rlim_max};
    CHECK(run(spec).out == std::to_string(own.rlim_cur - 1) + "\n" +
                               (own.rlim_max == RLIM_INFINITY ? std::string("unlimited")
                                                              : std::to_string(own.rlim_max)) +
                               "\n");
  }
  SECTION("or its caller's") {
    CHECK(run(spec).out == std::to_string(own.rlim_cur) + "\n" +
                               (own.rlim_max == RLIM_INFINITY ? std::string("unlimited")
                                                              : std::to_string(own.rlim_max)) +
                               "\n");
  }
}

TEST_CASE("spawn leaks no close-on-exec descriptor into the child", "[spawn]") {
  int kept = open("/dev/null", O_RDONLY | O_CLOEXEC);
  REQUIRE(kept >= 0);
  int high = fcntl(kept, F_DUPFD_CLOEXEC, 77);
  REQUIRE(high >= 77);
  close(kept);
  SpawnSpec spec = shell("if [ -e /proc/self/fd/" + std::to_string(high) +
                         " ]; then echo leaked; else echo closed; fi");
  spec.start = each_start();
  Output output = run(spec);
  close(high);
  CHECK(output.out == "closed\n");
}

#if FASTREVERT_HAVE_ADDCLOSEFROM_NP || FASTREVERT_HAVE_CLONE3_VFORK
// Only where clone3's child or posix_spawn can close every other descriptor
// for the child (see spawn_with_posix_spawn).
TEST_CASE("spawn leaks no descriptor into the child, even one without close-on-exec", "[spawn]") {
  int leaky = open("/dev/null", O_RDONLY);  // Deliberately without O_CLOEXEC.
  REQUIRE(leaky >= 0);
  int high = dup2(leaky, 77);
  REQUIRE(high == 77);
  close(leaky);
  Output output = run(shell("if [ -e /proc/self/fd/77 ]; then echo leaked; else echo closed; fi"));
  close(high);
  CHECK(output.out == "closed\n");
}
#endif

TEST_CASE("spawn with new_session makes the child a session and group leader", "[spawn]") {
  SpawnSpec spec = shell("set -- $(cat /proc/$$/stat); echo $1 $5 $6");
  spec.new_session = true;
  spec.start = each_start();
  std::istringstream fields(run(spec).out);
  long pid = 0, group = 0, session = 0;
  fields >> pid >> group >> session;
  CHECK(pid > 0);
  CHECK(group == pid);
  CHECK(session == pid);
}

TEST_CASE("first_executable picks the first executable non-directory like exec-path", "[spawn]") {
  TempDir first;
  TempDir second;
  write_file(first.file("tool"), "#!/bin/sh\n", 0644);  // Not executable: skipped.
  mkdir(first.file("dir-tool").c_str(), 0755);          // A directory: skipped.
  write_file(second.file("tool"), "#!/bin/sh\n", 0755);
  write_file(second.file("dir-tool"), "#!/bin/sh\n", 0755);
  symlink(first.file("dir-tool").c_str(), second.file("link-to-dir").c_str());
  // The names, each ended by a NUL byte.
  auto joined = [](std::initializer_list<std::string> names) {
    std::string all;
    for (const std::string& name : names) all += name + '\0';
    return all;
  };

  CHECK(first_executable(joined({"/nonexistent/tool", first.file("tool"), second.file("tool")})) ==
        std::optional<std::size_t>(2));
  CHECK(first_executable(joined({first.file("dir-tool"), second.file("dir-tool")})) ==
        std::optional<std::size_t>(1));
  // A symlink to a directory counts as the directory it names.
  CHECK(first_executable(joined({second.file("link-to-dir")})) == std::nullopt);
  // An empty name is never executable, and counts in the index.
  CHECK(first_executable(joined({"", first.file("no-such-tool"), "/bin/sh"})) ==
        std::optional<std::size_t>(2));
  CHECK(first_executable("") == std::nullopt);
  // The last name may end with the string.
  CHECK(first_executable(std::string("/nonexistent/sh") + '\0' + "/bin/sh") ==
        std::optional<std::size_t>(1));
}

TEST_CASE("kill_and_reap kills a running child and leaves no zombie", "[spawn]") {
  Child child = spawn(never_exiting());
  pid_t pid = child.pid;
  int status = kill_and_reap(child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(child.pid == -1);
  CHECK(child.stdout_fd == -1);
  CHECK(is_gone(pid));
}

TEST_CASE("spawn_or_stand_in reports a failed exec through a stand-in child", "[spawn]") {
  TempDir dir;
  write_file(dir / "not-a-program",
             "\x7f"
             "ELF garbage",
             0755);
  SpawnSpec spec;
  spec.program = dir.file("not-a-program");
  spec.stderr_mode = SpawnSpec::Stderr::merge;
  spec.start = each_start();
  int asked = 0;
  Child child = spawn_or_stand_in(spec, [&asked]() -> std::optional<std::string> {
    ++asked;
    return std::string("emacs");
  });
  Output output;
  RunResult result = run_to_completion(
      child, [&](std::string_view bytes) { output.out.append(bytes); }, nullptr);
  CHECK(asked == 1);
  CHECK(WEXITSTATUS(result.wait_status) == 126);
  CHECK(output.out == "emacs: " + spec.program + ": " + std::strerror(ENOEXEC) + "\n");
}

TEST_CASE("spawn_or_stand_in throws a failed exec when no stand-in is wanted", "[spawn]") {
  SpawnSpec spec;
  spec.program = "/nonexistent/fastrevert-program";
  CHECK_THROWS_AS(spawn_or_stand_in(spec, [] { return std::optional<std::string>(); }),
                  SystemError);
}

TEST_CASE("spawn_or_stand_in asks for argv0 only after a failed exec", "[spawn]") {
  int asked = 0;
  Child child = spawn_or_stand_in(shell("exit 0"), [&asked] {
    ++asked;
    return std::optional<std::string>("emacs");
  });
  run_to_completion(child, nullptr, nullptr);
  CHECK(asked == 0);
}

TEST_CASE("signal_number accepts names in any case with or without the SIG prefix", "[spawn]") {
  CHECK(signal_number("SIGINT") == std::optional<int>(SIGINT));
  CHECK(signal_number("int") == std::optional<int>(SIGINT));
  CHECK(signal_number("Kill") == std::optional<int>(SIGKILL));
  CHECK(signal_number("sigusr2") == std::optional<int>(SIGUSR2));
  CHECK_FALSE(signal_number("SIG").has_value());
  CHECK_FALSE(signal_number("NOSUCH").has_value());
}

TEST_CASE("the environment cache splits blocks at NUL bytes, the first definition winning",
          "[spawn]") {
  EnvironmentCache cache;
  std::string first("A=1\0B=2", 7);
  std::string second("A=3\0C\0D=4", 9);
  auto environment = cache.get({first, second});
  // C, a lone name, removes the variable; A keeps its first value.
  CHECK(*environment == std::vector<std::string>{"A=1", "B=2", "D=4"});
}

TEST_CASE("the environment cache makes an environment once for a run of the same blocks",
          "[spawn]") {
  EnvironmentCache cache;
  auto first = cache.get({"A=1", "B=2"});
  auto again = cache.get({"A=1", "B=2"});
  CHECK(again == first);
  auto other = cache.get({"A=1", "B=3"});
  CHECK(other != first);
  CHECK(*other == std::vector<std::string>{"A=1", "B=3"});
  // The one made first is still whole for the children that hold it.
  CHECK(*first == std::vector<std::string>{"A=1", "B=2"});
}

TEST_CASE("exit_how_name names each way a child ends in the word Lisp knows", "[spawn]") {
  ExitStatus exited;
  exited.how = ExitStatus::How::exited;
  exited.code = 3;
  CHECK(std::string(exit_how_name(exited)) == "exited");
  ExitStatus signaled;
  signaled.how = ExitStatus::How::signaled;
  signaled.code = SIGTERM;
  CHECK(std::string(exit_how_name(signaled)) == "signaled");
  signaled.core_dumped = true;
  CHECK(std::string(exit_how_name(signaled)) == "core-dumped");
  CHECK(std::string(exit_how_name(exit_status(-1))) == "lost");
}

TEST_CASE("accessible_directory accepts a directory one may enter and nothing else", "[spawn]") {
  TempDir dir;
  CHECK(accessible_directory(dir.path()));
  CHECK(accessible_directory("/"));
  write_file(dir.file("plain"), "x");
  CHECK_FALSE(accessible_directory(dir.file("plain")));
  CHECK_FALSE(accessible_directory(dir.file("missing")));
  std::string closed = dir.file("closed");
  REQUIRE(mkdir(closed.c_str(), 0) == 0);
  // Root enters any directory, as Emacs running as root would.
  CHECK(accessible_directory(closed) == (geteuid() == 0));
}
