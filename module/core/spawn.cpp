#include "core/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/errors.h"

extern char** environ;

namespace fastrevert {

namespace {

void close_quietly(int& fd) noexcept {
  if (fd >= 0) close(fd);
  fd = -1;
}

// Descriptors the parent opened for one spawn.  Whatever is still held when
// the spawn fails (or the child ends) is closed on destruction, so no error
// path leaks a descriptor.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(ScopedFd&& other) noexcept : fd_(other.release()) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { close_quietly(fd_); }

  int get() const noexcept { return fd_; }
  void reset(int fd) noexcept {
    close_quietly(fd_);
    fd_ = fd;
  }
  int release() noexcept { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

// Moves FD above 2 when it landed on a standard descriptor (possible only when
// the caller runs with 0, 1 or 2 closed).  Otherwise the child's dup2 actions
// could overwrite one pipe end with another before using it.
int above_stdio(int fd) {
  if (fd > 2) return fd;
  int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
  int saved_errno = errno;
  close(fd);
  if (moved < 0) {
    errno = saved_errno;
    throw_errno("fcntl");
  }
  return moved;
}

int open_cloexec(const std::string& path, int flags) {
  int fd;
  do {
    fd = open(path.c_str(), flags | O_CLOEXEC, 0666);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw_errno("open", path);
  return above_stdio(fd);
}

// Makes FD, one end of a pipe made here and so with no other status flag
// than its access mode (which F_SETFL ignores), non-blocking.
void set_nonblocking(int fd) {
  if (fcntl(fd, F_SETFL, O_NONBLOCK) < 0) throw_errno("fcntl");
}

// A pipe whose both ends are close-on-exec.  The parent's end is made
// non-blocking; the child's end stays blocking because most programs expect
// blocking standard descriptors (O_NONBLOCK lives in the open file
// description, which the child's dup shares).
struct Pipe {
  ScopedFd read_end;
  ScopedFd write_end;
};

Pipe make_pipe() {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) < 0) throw_errno("pipe2");
  Pipe made;
  made.read_end.reset(ends[0]);
  made.write_end.reset(ends[1]);
  made.read_end.reset(above_stdio(made.read_end.release()));
  made.write_end.reset(above_stdio(made.write_end.release()));
  return made;
}

int pidfd_open_or_minus_one(pid_t pid) noexcept {
#ifdef SYS_pidfd_open
  // A pidfd is always close-on-exec.  ENOSYS (old kernel) or EPERM (a seccomp
  // filter) leaves the caller to poll with waitpid instead.
  long fd = syscall(SYS_pidfd_open, pid, 0);
  return fd < 0 ? -1 : static_cast<int>(fd);
#else
  (void)pid;
  return -1;
#endif
}

// RAII for the posix_spawn attribute objects.
struct SpawnAttributes {
  posix_spawnattr_t attr;
  posix_spawn_file_actions_t actions;
  SpawnAttributes() {
    if (int error = posix_spawnattr_init(&attr)) throw SystemError(error, "posix_spawnattr_init");
    if (int error = posix_spawn_file_actions_init(&actions)) {
      posix_spawnattr_destroy(&attr);
      throw SystemError(error, "posix_spawn_file_actions_init");
    }
  }
  ~SpawnAttributes() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
  SpawnAttributes(const SpawnAttributes&) = delete;
  SpawnAttributes& operator=(const SpawnAttributes&) = delete;
};

void check_spawn_call(int error, const char* function) {
  if (error) throw SystemError(error, function);
}

std::vector<char*> c_string_vector(const std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  pointers.reserve(strings.size() + 1);
  for (const auto& string : strings) pointers.push_back(const_cast<char*>(string.c_str()));
  pointers.push_back(nullptr);
  return pointers;
}

}  // namespace

Child::Child(Child&& other) noexcept
    : pid(std::exchange(other.pid, -1)),
      pidfd(std::exchange(other.pidfd, -1)),
      stdin_fd(std::exchange(other.stdin_fd, -1)),
      stdout_fd(std::exchange(other.stdout_fd, -1)),
      stderr_fd(std::exchange(other.stderr_fd, -1)) {}

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    close_fds();
    pid = std::exchange(other.pid, -1);
    pidfd = std::exchange(other.pidfd, -1);
    stdin_fd = std::exchange(other.stdin_fd, -1);
    stdout_fd = std::exchange(other.stdout_fd, -1);
    stderr_fd = std::exchange(other.stderr_fd, -1);
  }
  return *this;
}

Child::~Child() {
  close_fds();
}

void Child::close_fds() noexcept {
  close_quietly(pidfd);
  close_quietly(stdin_fd);
  close_quietly(stdout_fd);
  close_quietly(stderr_fd);
}

Child spawn(const SpawnSpec& spec) {
  // The child's ends, dup'ed onto 0, 1 and 2 by the file actions and closed
  // here once the child has them.
  ScopedFd child_stdin;
  ScopedFd child_stdout;
  ScopedFd child_stderr;
  // The parent's ends, handed to the Child on success.
  ScopedFd parent_stdin;
  ScopedFd parent_stdout;
  ScopedFd parent_stderr;

  switch (spec.stdin_mode) {
    case SpawnSpec::Stdin::pipe: {
      Pipe pipe = make_pipe();
      set_nonblocking(pipe.write_end.get());
      child_stdin.reset(pipe.read_end.release());
      parent_stdin.reset(pipe.write_end.release());
      break;
    }
    case SpawnSpec::Stdin::null:
      child_stdin.reset(open_cloexec("/dev/null", O_RDONLY));
      break;
    case SpawnSpec::Stdin::file:
      child_stdin.reset(open_cloexec(spec.stdin_file, O_RDONLY));
      break;
  }

  constexpr int kCreateFlags = O_WRONLY | O_CREAT | O_TRUNC;
  switch (spec.stdout_mode) {
    case SpawnSpec::Stdout::pipe: {
      Pipe pipe = make_pipe();
      set_nonblocking(pipe.read_end.get());
      child_stdout.reset(pipe.write_end.release());
      parent_stdout.reset(pipe.read_end.release());
      break;
    }
    case SpawnSpec::Stdout::null:
      child_stdout.reset(open_cloexec("/dev/null", O_WRONLY));
      break;
    case SpawnSpec::Stdout::file:
      child_stdout.reset(open_cloexec(spec.stdout_file, kCreateFlags));
      break;
  }

  switch (spec.stderr_mode) {
    case SpawnSpec::Stderr::pipe: {
      Pipe pipe = make_pipe();
      set_nonblocking(pipe.read_end.get());
      child_stderr.reset(pipe.write_end.release());
      parent_stderr.reset(pipe.read_end.release());
      break;
    }
    case SpawnSpec::Stderr::merge:
      break;
    case SpawnSpec::Stderr::null:
      child_stderr.reset(open_cloexec("/dev/null", O_WRONLY));
      break;
    case SpawnSpec::Stderr::file:
      child_stderr.reset(open_cloexec(spec.stderr_file, kCreateFlags));
      break;
  }

  SpawnAttributes spawn_attributes;
  posix_spawnattr_t* attr = &spawn_attributes.attr;
  posix_spawn_file_actions_t* actions = &spawn_attributes.actions;

  // The caller may be Emacs's main thread with signals blocked, or the engine
  // thread with every signal blocked; the child must start clean.
  sigset_t empty_mask;
  sigset_t all_signals;
  sigemptyset(&empty_mask);
  sigfillset(&all_signals);
  short flags = POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF;
  if (spec.new_session) flags |= POSIX_SPAWN_SETSID;
  check_spawn_call(posix_spawnattr_setflags(attr, flags), "posix_spawnattr_setflags");
  check_spawn_call(posix_spawnattr_setsigmask(attr, &empty_mask), "posix_spawnattr_setsigmask");
  check_spawn_call(posix_spawnattr_setsigdefault(attr, &all_signals),
                   "posix_spawnattr_setsigdefault");

  // dup2 clears close-on-exec on the copy, so exactly 0, 1 and 2 survive the
  // exec.  closefrom(3) also drops any descriptor a careless library in the
  // caller opened without O_CLOEXEC.
  check_spawn_call(posix_spawn_file_actions_adddup2(actions, child_stdin.get(), 0),
                   "posix_spawn_file_actions_adddup2");
  check_spawn_call(posix_spawn_file_actions_adddup2(actions, child_stdout.get(), 1),
                   "posix_spawn_file_actions_adddup2");
  int stderr_source = spec.stderr_mode == SpawnSpec::Stderr::merge ? 1 : child_stderr.get();
  check_spawn_call(posix_spawn_file_actions_adddup2(actions, stderr_source, 2),
                   "posix_spawn_file_actions_adddup2");
  check_spawn_call(posix_spawn_file_actions_addclosefrom_np(actions, 3),
                   "posix_spawn_file_actions_addclosefrom_np");
  if (!spec.cwd.empty()) {
    check_spawn_call(posix_spawn_file_actions_addchdir_np(actions, spec.cwd.c_str()),
                     "posix_spawn_file_actions_addchdir_np");
  }

  std::vector<std::string> default_argv;
  if (spec.argv.empty()) default_argv.push_back(spec.program);
  std::vector<char*> argv = c_string_vector(spec.argv.empty() ? default_argv : spec.argv);
  std::vector<char*> envp;
  if (spec.env) envp = c_string_vector(*spec.env);

  pid_t pid = -1;
  int error = posix_spawn(&pid, spec.program.c_str(), actions, attr, argv.data(),
                          spec.env ? envp.data() : environ);
  if (error) {
    // glibc reports a failed chdir and a failed exec the same way, so tell
    // them apart by looking at the directory: the user must learn which
    // name was wrong.
    if (!spec.cwd.empty()) {
      struct stat status;
      if (stat(spec.cwd.c_str(), &status) < 0) throw_errno("chdir", spec.cwd);
      if (!S_ISDIR(status.st_mode)) throw SystemError(ENOTDIR, "chdir", spec.cwd);
      if (access(spec.cwd.c_str(), X_OK) < 0) throw_errno("chdir", spec.cwd);
    }
    throw SystemError(error, "posix_spawn", spec.program);
  }

  Child child;
  child.pid = pid;
  child.pidfd = pidfd_open_or_minus_one(pid);
  child.stdin_fd = parent_stdin.release();
  child.stdout_fd = parent_stdout.release();
  child.stderr_fd = parent_stderr.release();
  return child;
}

std::optional<std::size_t> first_executable(const std::string& candidates) {
  std::size_t index = 0;
  // Each name is read in place: its NUL byte, or the string's own, ends it.
  for (std::size_t start = 0; start < candidates.size(); ++index) {
    const char* candidate = candidates.c_str() + start;
    std::size_t end = candidates.find('\0', start);
    start = end == std::string::npos ? candidates.size() : end + 1;
    if (*candidate == '\0') continue;
    if (faccessat(AT_FDCWD, candidate, X_OK, AT_EACCESS) != 0) continue;
    struct stat status;
    if (stat(candidate, &status) == 0 && S_ISDIR(status.st_mode)) continue;
    return index;
  }
  return std::nullopt;
}

int kill_and_reap(Child& child) noexcept {
  int status = -1;
  if (child.pid > 0) {
    kill(child.pid, SIGKILL);
    pid_t reaped;
    do {
      reaped = waitpid(child.pid, &status, 0);
    } while (reaped < 0 && errno == EINTR);
    if (reaped < 0) status = -1;
    child.pid = -1;
  }
  child.close_fds();
  return status;
}

std::size_t pipe_max_size() noexcept {
  // A function-local static: C++11 makes its one-time initialization
  // thread-safe, and the value never changes afterwards.
  static const std::size_t cached = [] {
    std::size_t value = 1 << 20;
    if (FILE* file = std::fopen("/proc/sys/fs/pipe-max-size", "re")) {
      unsigned long read_value = 0;
      if (std::fscanf(file, "%lu", &read_value) == 1 && read_value >= 4096) value = read_value;
      std::fclose(file);
    }
    return value;
  }();
  return cached;
}

std::size_t grow_pipe(int fd, std::size_t size) noexcept {
  int current = fcntl(fd, F_GETPIPE_SZ);
  if (current < 0) return 0;
  std::size_t wanted = size < pipe_max_size() ? size : pipe_max_size();
  if (wanted <= static_cast<std::size_t>(current)) return static_cast<std::size_t>(current);
  int granted = fcntl(fd, F_SETPIPE_SZ, static_cast<int>(wanted));
  return granted < 0 ? static_cast<std::size_t>(current) : static_cast<std::size_t>(granted);
}

}  // namespace fastrevert
