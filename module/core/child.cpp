#include "core/child.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <unordered_set>
#include <utility>

#include "core/child_exit.h"
#include "core/cloexec_pipe.h"
#include "core/errors.h"
#include "core/fd.h"
#include "core/platform.h"
#include "core/spawn_fork.h"

extern char** environ;

namespace fastrevert {

namespace {

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

// A pipe whose both ends are close-on-exec and above 2.  The parent's end is
// made non-blocking; the child's end stays blocking because most programs
// expect blocking standard descriptors (O_NONBLOCK lives in the open file
// description, which the child's dup shares).
CloexecPipe make_pipe() {
  CloexecPipe made = make_cloexec_pipe();
  made.read_end.reset(above_stdio(made.read_end.release()));
  made.write_end.reset(above_stdio(made.write_end.release()));
  return made;
}

// Whether posix_spawn can start the child SPEC asks for on this system, or
// it takes fork and exec (core/spawn_fork.h): a working directory needs
// posix_spawn_file_actions_addchdir_np, and a new session
// POSIX_SPAWN_SETSID.
bool posix_spawn_can_start(const SpawnSpec& spec) {
  if (spec.force_fork) return false;
  if (!spec.cwd.empty() && !FASTREVERT_HAVE_ADDCHDIR_NP) return false;
  if (spec.new_session && !FASTREVERT_HAVE_POSIX_SPAWN_SETSID) return false;
  return true;
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

// Starts the child with posix_spawn, every file action and attribute it
// needs done by the C library: see spawn().  Returns its pid.
pid_t spawn_with_posix_spawn(const SpawnSpec& spec, char* const* argv, char* const* envp,
                             int stdin_fd, int stdout_fd, int stderr_fd) {
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
#if FASTREVERT_HAVE_POSIX_SPAWN_SETSID
  if (spec.new_session) flags |= POSIX_SPAWN_SETSID;
#endif
#if !FASTREVERT_HAVE_ADDCLOSEFROM_NP && FASTREVERT_HAVE_POSIX_SPAWN_CLOEXEC_DEFAULT
  // Only 0, 1 and 2 may reach the program.  Every descriptor the module
  // opens is close-on-exec; one that a careless library in Emacs opened
  // without it is closed by closefrom(3) where the C library has that as a
  // file action (below), and by Darwin's close-on-exec default here.
  // Elsewhere (musl, glibc before 2.34) such a descriptor stays open in the
  // child.
  flags |= POSIX_SPAWN_CLOEXEC_DEFAULT;
#endif
  check_spawn_call(posix_spawnattr_setflags(attr, flags), "posix_spawnattr_setflags");
  check_spawn_call(posix_spawnattr_setsigmask(attr, &empty_mask), "posix_spawnattr_setsigmask");
  check_spawn_call(posix_spawnattr_setsigdefault(attr, &all_signals),
                   "posix_spawnattr_setsigdefault");

  // dup2 clears close-on-exec on the copy, so 0, 1 and 2 survive the exec.
  check_spawn_call(posix_spawn_file_actions_adddup2(actions, stdin_fd, 0),
                   "posix_spawn_file_actions_adddup2");
  check_spawn_call(posix_spawn_file_actions_adddup2(actions, stdout_fd, 1),
                   "posix_spawn_file_actions_adddup2");
  check_spawn_call(posix_spawn_file_actions_adddup2(actions, stderr_fd >= 0 ? stderr_fd : 1, 2),
                   "posix_spawn_file_actions_adddup2");
#if FASTREVERT_HAVE_ADDCLOSEFROM_NP
  check_spawn_call(posix_spawn_file_actions_addclosefrom_np(actions, 3),
                   "posix_spawn_file_actions_addclosefrom_np");
#endif
#if FASTREVERT_HAVE_ADDCHDIR_NP
  if (!spec.cwd.empty()) {
    check_spawn_call(posix_spawn_file_actions_addchdir_np(actions, spec.cwd.c_str()),
                     "posix_spawn_file_actions_addchdir_np");
  }
#endif

  pid_t pid = -1;
  int error = posix_spawn(&pid, spec.program.c_str(), actions, attr, argv, envp);
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
  return pid;
}

// Signal names as `signal-process' accepts them, without the "SIG" prefix.
struct SignalName {
  const char* name;
  int number;
};
// POSIX's signals, then those of Linux, macOS and the BSDs that the system
// defines.
constexpr SignalName kSignalNames[] = {
    {"HUP", SIGHUP},       {"INT", SIGINT},   {"QUIT", SIGQUIT},   {"ILL", SIGILL},
    {"TRAP", SIGTRAP},     {"ABRT", SIGABRT}, {"BUS", SIGBUS},     {"FPE", SIGFPE},
    {"KILL", SIGKILL},     {"USR1", SIGUSR1}, {"SEGV", SIGSEGV},   {"USR2", SIGUSR2},
    {"PIPE", SIGPIPE},     {"ALRM", SIGALRM}, {"TERM", SIGTERM},   {"CHLD", SIGCHLD},
    {"CONT", SIGCONT},     {"STOP", SIGSTOP}, {"TSTP", SIGTSTP},   {"TTIN", SIGTTIN},
    {"TTOU", SIGTTOU},     {"URG", SIGURG},   {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ},
    {"VTALRM", SIGVTALRM}, {"PROF", SIGPROF}, {"WINCH", SIGWINCH}, {"SYS", SIGSYS},
#ifdef SIGIOT
    {"IOT", SIGIOT},
#endif
#ifdef SIGSTKFLT
    {"STKFLT", SIGSTKFLT},
#endif
    {"CLD", SIGCHLD},
#ifdef SIGIO
    {"IO", SIGIO},
#endif
#ifdef SIGPOLL
    {"POLL", SIGPOLL},
#endif
#ifdef SIGPWR
    {"PWR", SIGPWR},
#endif
#ifdef SIGEMT
    {"EMT", SIGEMT},
#endif
#ifdef SIGINFO
    {"INFO", SIGINFO},
#endif
#ifdef SIGLOST
    {"LOST", SIGLOST},
#endif
};

}  // namespace

std::optional<int> signal_number(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string_view bare(upper);
  if (bare.substr(0, 3) == "SIG") bare.remove_prefix(3);
  for (const SignalName& entry : kSignalNames) {
    if (bare == entry.name) return entry.number;
  }
  return std::nullopt;
}

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
  close_fd(pidfd);
  close_fd(stdin_fd);
  close_fd(stdout_fd);
  close_fd(stderr_fd);
}

std::vector<std::string> child_environment(const std::vector<std::string_view>& entries) {
  std::unordered_set<std::string_view> seen;
  std::vector<std::string> environment;
  environment.reserve(entries.size());
  for (std::string_view entry : entries) {
    std::size_t equals = entry.find('=');
    if (!seen.insert(entry.substr(0, equals)).second) continue;
    if (equals != std::string_view::npos) environment.emplace_back(entry);
  }
  return environment;
}

bool accessible_directory(std::string directory) {
  directory += "/.";
  return faccessat(AT_FDCWD, directory.c_str(), F_OK, AT_EACCESS) == 0;
}

std::shared_ptr<const std::vector<std::string>> EnvironmentCache::get(
    std::vector<std::string> blocks) {
  if (environment_ && blocks == blocks_) return environment_;
  std::vector<std::string_view> entries;
  for (const std::string& block : blocks) {
    std::string_view rest(block);
    for (;;) {
      std::size_t end = rest.find('\0');
      entries.push_back(rest.substr(0, end));
      if (end == std::string_view::npos) break;
      rest.remove_prefix(end + 1);
    }
  }
  environment_ = std::make_shared<const std::vector<std::string>>(child_environment(entries));
  blocks_ = std::move(blocks);
  return environment_;
}

Child spawn(const SpawnSpec& spec) {
  // The child's ends, dup'ed onto 0, 1 and 2 by the file actions and closed
  // here once the child has them.
  UniqueFd child_stdin;
  UniqueFd child_stdout;
  UniqueFd child_stderr;
  // The parent's ends, handed to the Child on success.
  UniqueFd parent_stdin;
  UniqueFd parent_stdout;
  UniqueFd parent_stderr;

  switch (spec.stdin_mode) {
    case SpawnSpec::Stdin::pipe: {
      CloexecPipe pipe = make_pipe();
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
      CloexecPipe pipe = make_pipe();
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
      CloexecPipe pipe = make_pipe();
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

  std::vector<std::string> default_argv;
  if (spec.argv.empty()) default_argv.push_back(spec.program);
  std::vector<char*> argv = c_string_vector(spec.argv.empty() ? default_argv : spec.argv);
  std::vector<char*> envp;
  if (spec.env) envp = c_string_vector(*spec.env);
  char* const* child_env = spec.env ? envp.data() : environ;
  int stderr_source = spec.stderr_mode == SpawnSpec::Stderr::merge ? -1 : child_stderr.get();

  pid_t pid = -1;
  if (posix_spawn_can_start(spec)) {
    pid = spawn_with_posix_spawn(spec, argv.data(), child_env, child_stdin.get(),
                                 child_stdout.get(), stderr_source);
  } else {
    ForkExec plan;
    plan.program = spec.program.c_str();
    plan.argv = argv.data();
    plan.envp = child_env;
    plan.stdin_fd = child_stdin.get();
    plan.stdout_fd = child_stdout.get();
    plan.stderr_fd = stderr_source;
    plan.cwd = spec.cwd.empty() ? nullptr : spec.cwd.c_str();
    plan.new_session = spec.new_session;
    pid = fork_exec(plan);
  }

  Child child;
  child.pid = pid;
  child.pidfd = open_exit_descriptor(pid);
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

Child spawn_or_stand_in(const SpawnSpec& spec,
                        const std::function<std::optional<std::string>()>& argv0) {
  try {
    return spawn(spec);
  } catch (const SystemError& error) {
    if (error.function() != "posix_spawn") throw;
    std::optional<std::string> invoked_as = argv0();
    if (!invoked_as) throw;
    int code = error.code().value();
    SpawnSpec stand_in = spec;
    stand_in.program = "/bin/sh";
    stand_in.argv = {"sh",
                     "-c",
                     "printf '%s: %s: %s\\n' \"$1\" \"$2\" \"$3\" >&2; exit " +
                         std::to_string(code == ENOENT ? 127 : 126),
                     "sh",
                     *invoked_as,
                     spec.program,
                     std::strerror(code)};
    try {
      return spawn(stand_in);
    } catch (const SystemError&) {
      throw error;
    }
  }
}

ExitStatus exit_status(int wait_status) noexcept {
  ExitStatus status;
  if (wait_status == -1) return status;
  if (WIFSIGNALED(wait_status)) {
    status.how = ExitStatus::How::signaled;
    status.code = WTERMSIG(wait_status);
    status.core_dumped = WCOREDUMP(wait_status);
  } else {
    status.how = ExitStatus::How::exited;
    status.code = WEXITSTATUS(wait_status);
  }
  return status;
}

const char* exit_how_name(const ExitStatus& status) noexcept {
  switch (status.how) {
    case ExitStatus::How::exited:
      return "exited";
    case ExitStatus::How::signaled:
      return status.core_dumped ? "core-dumped" : "signaled";
    case ExitStatus::How::lost:
      break;
  }
  return "lost";
}

QuitEscalation::QuitEscalation(const Child& child, bool process_group, int quit_signal,
                               std::chrono::milliseconds grace) noexcept
    : child_(child), process_group_(process_group), quit_signal_(quit_signal), grace_(grace) {}

void QuitEscalation::update(bool quit_requested) noexcept {
  if (killed_) return;
  if (quit_requested && !quit_) {
    quit_ = true;
    quit_time_ = std::chrono::steady_clock::now();
    if (quit_signal_ == SIGKILL) killed_ = true;
    send(quit_signal_);
    return;
  }
  if (quit_ && (quit_requested || std::chrono::steady_clock::now() - quit_time_ >= grace_)) {
    killed_ = true;
    send(SIGKILL);
  }
}

void QuitEscalation::send(int signal_number) noexcept {
  // The pid cannot have been reused: it stays the child's until it is
  // reaped, and reaping sets it to -1.
  if (child_.pid > 0) kill(process_group_ ? -child_.pid : child_.pid, signal_number);
}

int reap_with_quit(Child& child, const std::function<bool()>& should_quit, bool process_group,
                   bool& quit, int poll_ms) {
  QuitEscalation escalation(child, process_group);
  if (child.pid <= 0) return -1;
  for (;;) {
    int status = 0;
    pid_t reaped = waitpid(child.pid, &status, WNOHANG);
    if (reaped == child.pid || (reaped < 0 && errno != EINTR)) {
      child.pid = -1;
      quit = escalation.quit();
      return reaped < 0 ? -1 : status;
    }
    if (child.pidfd >= 0) {
      pollfd fd = {child.pidfd, POLLIN, 0};
      poll(&fd, 1, poll_ms);
    } else {
      usleep(static_cast<useconds_t>(std::min(poll_ms, 5)) * 1000);
    }
    escalation.update(!escalation.quit() && should_quit && should_quit());
  }
}

int kill_and_reap(pid_t pid, bool process_group) noexcept {
  if (pid <= 0) return -1;
  kill(process_group ? -pid : pid, SIGKILL);
  int status = 0;
  pid_t reaped;
  do {
    reaped = waitpid(pid, &status, 0);
  } while (reaped < 0 && errno == EINTR);
  return reaped < 0 ? -1 : status;
}

int kill_and_reap(Child& child) noexcept {
  int status = kill_and_reap(child.pid, false);
  child.pid = -1;
  child.close_fds();
  return status;
}

}  // namespace fastrevert
