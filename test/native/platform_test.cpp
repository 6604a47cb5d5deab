// Tests of the platform layer: each mechanism that stands in for another on
// some system, run here wherever Linux has it, beside the Linux fast path it
// replaces elsewhere.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "catch_compat.h"
#include "core/alarm.h"
#include "core/child.h"
#include "core/child_exit.h"
#include "core/cloexec_pipe.h"
#include "core/errors.h"
#include "core/find_last.h"
#include "core/platform.h"
#include "core/poll_wait.h"
#include "core/stat_time.h"
#include "core/wake_signal.h"
#include "support.h"

using namespace fastrevert;
using namespace std::chrono_literals;

using fastrevert::test::never_exiting;
using fastrevert::test::TempDir;

namespace {

using Clock = std::chrono::steady_clock;

bool readable(int fd, std::chrono::milliseconds wait = 0ms) {
  pollfd entry{fd, POLLIN, 0};
  return poll(&entry, 1, static_cast<int>(wait.count())) == 1 && (entry.revents & POLLIN);
}

bool is_cloexec(int fd) {
  return (fcntl(fd, F_GETFD) & FD_CLOEXEC) != 0;
}

// Long enough for anything due to have happened, even under a sanitizer.
constexpr auto kDeadline = 5000ms;

}  // namespace

#if FASTREVERT_HAVE_EVENTFD
#define FASTREVERT_WAKE_SIGNALS EventfdWakeSignal, PipeWakeSignal
#else
#define FASTREVERT_WAKE_SIGNALS PipeWakeSignal
#endif

TEMPLATE_TEST_CASE("a wake signal is readable from a signal until a reset", "[platform]",
                   FASTREVERT_WAKE_SIGNALS) {
  TestType signal;
  REQUIRE(signal.fd() >= 0);
  CHECK(is_cloexec(signal.fd()));
  CHECK_FALSE(readable(signal.fd()));
  signal.signal();
  CHECK(readable(signal.fd()));
  signal.reset();
  CHECK_FALSE(readable(signal.fd()));
  // However many signals wait, one reset takes them all, and a full pipe
  // never blocks a signal.
  for (int i = 0; i < 100000; ++i) signal.signal();
  CHECK(readable(signal.fd()));
  signal.reset();
  CHECK_FALSE(readable(signal.fd()));
  signal.close();
  CHECK(signal.fd() == -1);
  signal.signal();
  signal.reset();
}

#if FASTREVERT_HAVE_TIMERFD
#define FASTREVERT_ALARMS TimerfdAlarm, ThreadAlarm
#else
#define FASTREVERT_ALARMS ThreadAlarm
#endif

TEMPLATE_TEST_CASE("an alarm becomes readable once its delay has passed, until acknowledged",
                   "[platform]", FASTREVERT_ALARMS) {
  TestType alarm;
  REQUIRE(alarm.fd() >= 0);
  CHECK(is_cloexec(alarm.fd()));
  CHECK_FALSE(readable(alarm.fd()));
  auto armed_at = Clock::now();
  alarm.arm(std::chrono::microseconds(20000));
  REQUIRE(readable(alarm.fd(), kDeadline));
  CHECK(Clock::now() - armed_at >= 20ms);
  // It stays readable until acknowledged.
  CHECK(readable(alarm.fd()));
  alarm.acknowledge();
  CHECK_FALSE(readable(alarm.fd()));

  // Armed again, it comes due again.
  alarm.arm(std::chrono::microseconds(1));
  CHECK(readable(alarm.fd(), kDeadline));
  alarm.acknowledge();
}

TEMPLATE_TEST_CASE("a disarmed alarm does not come due", "[platform]", FASTREVERT_ALARMS) {
  TestType alarm;
  alarm.arm(std::chrono::microseconds(30000));
  alarm.disarm();
  // Well past the delay it was armed with.
  CHECK_FALSE(readable(alarm.fd(), 200ms));
  // Due and not acknowledged, then disarmed: no longer readable.
  alarm.arm(std::chrono::microseconds(1));
  REQUIRE(readable(alarm.fd(), kDeadline));
  alarm.disarm();
  CHECK_FALSE(readable(alarm.fd()));
}

TEST_CASE("a child's exit descriptor is readable once it exits, and only then", "[platform]") {
  Child child = spawn(never_exiting());
  int exit_fd = open_exit_descriptor(child.pid);
  if (kChildExitMechanism == ChildExitMechanism::waitpid) {
    // No descriptor: whoever waits for the child polls with waitpid.
    CHECK(exit_fd == -1);
    kill(child.pid, SIGKILL);
  } else {
    REQUIRE(exit_fd >= 0);
    CHECK(is_cloexec(exit_fd));
    CHECK_FALSE(readable(exit_fd, 50ms));
    kill(child.pid, SIGKILL);
    CHECK(readable(exit_fd, kDeadline));
    // Still readable: nothing needs to be read from it.
    CHECK(readable(exit_fd));
  }
  int status = 0;
  CHECK(waitpid(child.pid, &status, 0) == child.pid);
  child.pid = -1;
  if (exit_fd >= 0) close(exit_fd);
}

TEST_CASE("a child that exited before its exit descriptor was made is seen at once", "[platform]") {
  Child child = spawn(fastrevert::test::shell("exit 0"));
  // Wait until it is a zombie, without reaping it.
  siginfo_t info{};
  REQUIRE(waitid(P_PID, static_cast<id_t>(child.pid), &info, WEXITED | WNOWAIT) == 0);
  int exit_fd = open_exit_descriptor(child.pid);
  if (exit_fd >= 0) CHECK(readable(exit_fd));
  CHECK(waitpid(child.pid, nullptr, 0) == child.pid);
  child.pid = -1;
  if (exit_fd >= 0) close(exit_fd);
}

TEST_CASE("poll_for waits at least its timeout, to the sub-millisecond", "[platform]") {
  CloexecPipe pipe = make_cloexec_pipe();
  pollfd entry{pipe.read_end.get(), POLLIN, 0};
  auto started = Clock::now();
  CHECK(poll_for(&entry, 1, std::chrono::microseconds(1500)) == 0);
  CHECK(Clock::now() - started >= std::chrono::microseconds(1500));
  REQUIRE(write(pipe.write_end.get(), "x", 1) == 1);
  CHECK(poll_for(&entry, 1, std::chrono::seconds(10)) == 1);
  CHECK((entry.revents & POLLIN) != 0);
}

TEST_CASE("a close-on-exec pipe has both ends close-on-exec", "[platform]") {
  CloexecPipe pipe = make_cloexec_pipe();
  CHECK(is_cloexec(pipe.read_end.get()));
  CHECK(is_cloexec(pipe.write_end.get()));
}

TEST_CASE("errno names come from the module's own table where the C library has none",
          "[platform]") {
  CHECK(errno_name(ENOSPC) == "ENOSPC");
  CHECK(errno_name(EMFILE) == "EMFILE");
  CHECK(errno_name(99999) == "errno 99999");
  CHECK(std::string(errno_table_name(ENOENT)) == "ENOENT");
  CHECK(errno_table_name(0) == nullptr);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
  // The table agrees with glibc for every errno it has.
  for (int error = 1; error < 200; ++error) {
    const char* ours = errno_table_name(error);
    if (!ours) continue;
    INFO("errno " << error);
    CHECK(std::string(ours) == strerrorname_np(error));
  }
#endif
}

TEST_CASE("find_last finds the last occurrence of a byte, or none", "[platform]") {
  const char text[] = "one\ntwo\nthree";
  CHECK(find_last(text, '\n', sizeof text - 1) == text + 7);
  CHECK(find_last(text, '\n', 4) == text + 3);
  CHECK(find_last(text, '\n', 3) == nullptr);
  CHECK(find_last(text, 'o', 0) == nullptr);
  CHECK(find_last(text, 'o', 1) == text);
}

TEST_CASE("a file's times are read to the nanosecond", "[platform]") {
  TempDir dir;
  std::string file = dir / "timed";
  fastrevert::test::write_file(file, "x");
  timespec times[2] = {{1600000000, 123456789}, {1700000000, 987654321}};
  REQUIRE(utimensat(AT_FDCWD, file.c_str(), times, 0) == 0);
  struct stat status;
  REQUIRE(stat(file.c_str(), &status) == 0);
  CHECK(mtime_ns(status) == 1700000000987654321);
  CHECK(ctime_ns(status) > 0);
}
