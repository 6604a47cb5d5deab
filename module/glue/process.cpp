// The process glue: `fastrevert-call-process' (a synchronous child whose
// output reaches Lisp as a string when it is small, and otherwise lands in a
// memfd that Lisp inserts with `insert-file-contents') and
// `fastrevert-make-process' (asynchronous children run by the engine's
// ProcessTable).
//
// Every function here runs on Emacs's main thread; the copy thread of a
// synchronous call with a large output (core/copier.h) only moves bytes from
// a pipe to a memfd and never calls Emacs.  Children are spawned here,
// on the main thread, so that a spawn failure reaches Lisp synchronously.
//
// An asynchronous child then waits in the nursery (core/nursery.h).  When
// Lisp waits for output (`fastrevert--mod-wait'), the main thread takes the
// nursery's children into a process table of its own and serves them while
// it waits: a short-lived child is read and reaped there, and its output and
// exit reach Lisp without crossing threads.  Children still running when the
// wait ends go back to the nursery.  The engine adopts every child that
// stays in the nursery for kAdoptionDelay, and, before any command for a
// child is posted, the child is handed to it first; from then on only the
// engine thread touches it.
//
// Policy (which coding system, which buffer, which error to signal) lives in
// lisp/fastrevert-process.el.  These functions take file names and arguments
// already encoded, and report failures as data so that Lisp can signal exactly
// what the stock primitives signal.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/copier.h"
#include "core/engine.h"
#include "core/errors.h"
#include "core/framing.h"
#include "core/nursery.h"
#include "core/process.h"
#include "core/reader.h"
#include "core/spawn.h"
#include "glue/env.h"
#include "glue/state.h"

using namespace fastrevert;
using namespace fastrevert::glue;

namespace {

// A descriptor closed when the scope ends unless released: the memfd must
// not leak when a quit or an error unwinds the synchronous call.
class OwnedFd {
 public:
  explicit OwnedFd(int fd) noexcept : fd_(fd) {}
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const noexcept { return fd_; }
  int release() noexcept { return std::exchange(fd_, -1); }
  void reset(int fd) noexcept {
    if (fd_ >= 0) close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

bool is_nil(Env& env, emacs_value value) {
  return !env.truthy(value);
}

// The bytes of the Lisp string VALUE (UTF-8 for a multibyte string, the bytes
// themselves for a unibyte one); signals `wrong-type-argument' otherwise.
// Kept here rather than using Env's converter so this file does not depend on
// that method's name.
std::string string_bytes(Env& env, emacs_value value) {
  if (!env.is_string(value)) env.wrong_type("stringp", value);
  emacs_env* raw = env.raw();
  std::ptrdiff_t size = 0;
  raw->copy_string_contents(raw, value, nullptr, &size);
  env.check();
  std::string bytes(static_cast<std::size_t>(size), '\0');
  raw->copy_string_contents(raw, value, bytes.data(), &size);
  env.check();
  // SIZE counts the terminating NUL that Emacs writes.
  bytes.resize(static_cast<std::size_t>(size) - 1);
  return bytes;
}

// The strings of the Lisp vector VALUE.
std::vector<std::string> string_vector(Env& env, emacs_value value) {
  emacs_env* raw = env.raw();
  emacs_value type = raw->type_of(raw, value);
  env.check();
  if (!env.eq(type, env.intern("vector"))) env.wrong_type("vectorp", value);
  std::ptrdiff_t size = raw->vec_size(raw, value);
  env.check();
  std::vector<std::string> strings;
  strings.reserve(static_cast<std::size_t>(size));
  for (std::ptrdiff_t i = 0; i < size; ++i) {
    emacs_value item = raw->vec_get(raw, value, i);
    env.check();
    strings.push_back(string_bytes(env, item));
  }
  return strings;
}

std::int64_t integer_arg(Env& env, emacs_value value) {
  if (!env.is_integer(value)) env.wrong_type("integerp", value);
  return env.to_integer(value);
}

// The child's environment from ENTRIES in `process-environment' order: the
// first definition of a name wins, and a lone NAME (no "=") removes the
// variable, as Emacs's own environment block does.
std::vector<std::string> child_environment(const std::vector<std::string>& entries) {
  std::unordered_set<std::string_view> seen;
  std::vector<std::string> environment;
  environment.reserve(entries.size());
  for (const std::string& entry : entries) {
    std::size_t equals = entry.find('=');
    std::string_view name(entry.data(), equals == std::string::npos ? entry.size() : equals);
    if (!seen.insert(name).second) continue;
    if (equals != std::string::npos) environment.push_back(entry);
  }
  return environment;
}

// The condition Emacs's report_file_errno raises for ERROR.
const char* file_error_condition(int error) {
  switch (error) {
    case ENOENT:
      return "file-missing";
    case EACCES:
      return "permission-denied";
    case EEXIST:
      return "file-already-exists";
    default:
      return "file-error";
  }
}

// (:error CONDITION FUNCTION STRERROR PATH) for Lisp to turn into the signal
// the stock primitive would raise; PATH and STRERROR are unibyte (locale
// bytes), for Lisp to decode.
emacs_value error_data(Env& env, const SystemError& error) {
  int code = error.code().value();
  return env.list({env.intern(":error"), env.intern(file_error_condition(code)),
                   env.unibyte(error.function()), env.unibyte(std::strerror(code)),
                   env.unibyte(error.path())});
}

// Which of the stock redirection modes a Lisp argument names.
SpawnSpec::Stdin stdin_mode(Env& env, emacs_value value, std::string& file) {
  if (is_nil(env, value)) return SpawnSpec::Stdin::null;
  if (env.eq(value, env.t())) return SpawnSpec::Stdin::pipe;
  file = string_bytes(env, value);
  return SpawnSpec::Stdin::file;
}

SpawnSpec::Stderr stderr_mode(Env& env, emacs_value value, std::string& file) {
  if (is_nil(env, value)) return SpawnSpec::Stderr::null;
  if (env.eq(value, env.t())) return SpawnSpec::Stderr::merge;
  if (env.eq(value, env.intern("pipe"))) return SpawnSpec::Stderr::pipe;
  file = string_bytes(env, value);
  return SpawnSpec::Stderr::file;
}

Framing framing_arg(Env& env, emacs_value value) {
  if (is_nil(env, value)) return Framing::none;
  if (env.eq(value, env.intern("lines"))) return Framing::lines;
  if (env.eq(value, env.intern("lsp"))) return Framing::lsp;
  env.signal("wrong-type-argument", env.list({env.intern("fastrevert-framing-p"), value}));
}

// The child's environment from the Lisp list VALUE, whose strings each hold
// one or more "NAME=VALUE" entries separated by NUL bytes, in
// `process-environment' order.  The last one made is kept: a run of
// children in the same environment costs one comparison each.
std::shared_ptr<const std::vector<std::string>> environment_from(Env& env, emacs_value value) {
  static std::string last_key;
  static std::shared_ptr<const std::vector<std::string>> last_environment;
  emacs_value car = env.intern("car-safe");
  emacs_value cdr = env.intern("cdr-safe");
  // Each string, preceded by its length, so that no two lists share a key.
  std::string key;
  for (;;) {
    emacs_value item = env.funcall(car, {value});
    if (!env.is_string(item)) break;
    std::string block = string_bytes(env, item);
    key += std::to_string(block.size());
    key += ':';
    key += block;
    value = env.funcall(cdr, {value});
  }
  if (last_environment && key == last_key) return last_environment;
  std::vector<std::string> entries;
  std::size_t at = 0;
  while (at < key.size()) {
    std::size_t colon = key.find(':', at);
    std::size_t size = std::stoul(key.substr(at, colon - at));
    std::string_view block(key.data() + colon + 1, size);
    std::size_t start = 0;
    for (;;) {
      std::size_t end = block.find('\0', start);
      entries.emplace_back(block.substr(start, end == std::string_view::npos ? end : end - start));
      if (end == std::string_view::npos) break;
      start = end + 1;
    }
    at = colon + 1 + size;
  }
  last_environment = std::make_shared<const std::vector<std::string>>(child_environment(entries));
  last_key = std::move(key);
  return last_environment;
}

// Fills the common part of SPEC from PROGRAM ARGV ENV CWD.
void fill_spec(Env& env, emacs_value* args, SpawnSpec& spec) {
  spec.program = string_bytes(env, args[0]);
  spec.argv = string_vector(env, args[1]);
  spec.env = environment_from(env, args[2]);
  spec.cwd = string_bytes(env, args[3]);
}

// Writes every byte of DATA to FD (a memfd: never short in practice, but a
// short write must not lose the rest).
void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t written = write(fd, data.data(), data.size());
    if (written < 0) {
      if (errno == EINTR) continue;
      throw_errno("write", "memfd");
    }
    data.remove_prefix(static_cast<std::size_t>(written));
  }
}

// Signal names as `signal-process' accepts them, without the "SIG" prefix.
struct SignalName {
  const char* name;
  int number;
};
constexpr SignalName kSignalNames[] = {
    {"HUP", SIGHUP},       {"INT", SIGINT},     {"QUIT", SIGQUIT}, {"ILL", SIGILL},
    {"TRAP", SIGTRAP},     {"ABRT", SIGABRT},   {"IOT", SIGIOT},   {"BUS", SIGBUS},
    {"FPE", SIGFPE},       {"KILL", SIGKILL},   {"USR1", SIGUSR1}, {"SEGV", SIGSEGV},
    {"USR2", SIGUSR2},     {"PIPE", SIGPIPE},   {"ALRM", SIGALRM}, {"TERM", SIGTERM},
    {"STKFLT", SIGSTKFLT}, {"CHLD", SIGCHLD},   {"CLD", SIGCHLD},  {"CONT", SIGCONT},
    {"STOP", SIGSTOP},     {"TSTP", SIGTSTP},   {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU},
    {"URG", SIGURG},       {"XCPU", SIGXCPU},   {"XFSZ", SIGXFSZ}, {"VTALRM", SIGVTALRM},
    {"PROF", SIGPROF},     {"WINCH", SIGWINCH}, {"IO", SIGIO},     {"POLL", SIGPOLL},
    {"PWR", SIGPWR},       {"SYS", SIGSYS},
};

// Spawns SPEC.  When the exec itself fails (a file that is not a valid
// executable, a script whose interpreter is missing), stock Emacs still
// starts a child, which prints "ARGV0: PROGRAM: STRERROR" on its standard
// error and exits with 126 (127 for ENOENT); posix_spawn reports the failure
// to the parent instead.  A /bin/sh stand-in reproduces the stock outcome,
// through every redirection, so both primitives see what stock shows.
Child spawn_like_emacs(Env& env, const SpawnSpec& spec) {
  try {
    return spawn(spec);
  } catch (const SystemError& error) {
    if (error.function() != "posix_spawn") throw;
    int code = error.code().value();
    emacs_value invoked_as =
        env.call("car-safe", {env.call("symbol-value", {env.intern("command-line-args")})});
    std::string argv0 = env.is_string(invoked_as) ? string_bytes(env, invoked_as) : "emacs";
    SpawnSpec stand_in = spec;
    stand_in.program = "/bin/sh";
    stand_in.argv = {"sh",
                     "-c",
                     "printf '%s: %s: %s\\n' \"$1\" \"$2\" \"$3\" >&2; exit " +
                         std::to_string(code == ENOENT ? 127 : 126),
                     "sh",
                     argv0,
                     spec.program,
                     std::strerror(code)};
    try {
      return spawn(stand_in);
    } catch (const SystemError&) {
      throw error;
    }
  }
}

// The end of the longest prefix of MEMFD[FROM, TO) that ends in a newline,
// or FROM when there is none.  A newline is a character boundary in every
// coding system the caller streams with (ASCII-compatible ones), and never
// splits a CRLF.
std::uint64_t line_boundary(int memfd, std::uint64_t from, std::uint64_t to) {
  constexpr std::uint64_t kWindow = 65536;
  char window[kWindow];
  std::uint64_t end = to;
  while (end > from) {
    std::uint64_t start = end - from > kWindow ? end - kWindow : from;
    ssize_t got = pread(memfd, window, end - start, static_cast<off_t>(start));
    if (got <= 0) return from;
    const void* newline = memrchr(window, '\n', static_cast<std::size_t>(got));
    if (newline)
      return start + static_cast<std::uint64_t>(static_cast<const char*>(newline) - window) + 1;
    end = start;
  }
  return from;
}

// Waits for CHILD to exit and reaps it, asking SHOULD_QUIT every 50 ms; a
// quit sends SIGINT to the child's process group, and a second of grace
// later SIGKILL.  Sets QUIT when that happened.  Returns the wait status, or
// -1 if someone else reaped the child.
int reap_with_quit(Child& child, const std::function<bool()>& should_quit, bool& quit) {
  auto quit_time = std::chrono::steady_clock::time_point{};
  bool killed = false;
  for (;;) {
    int status = 0;
    pid_t reaped = waitpid(child.pid, &status, WNOHANG);
    if (reaped == child.pid || (reaped < 0 && errno != EINTR)) {
      child.pid = -1;
      return reaped < 0 ? -1 : status;
    }
    if (child.pidfd >= 0) {
      pollfd fd = {child.pidfd, POLLIN, 0};
      poll(&fd, 1, 50);
    } else {
      usleep(5000);
    }
    if (!quit && should_quit()) {
      quit = true;
      quit_time = std::chrono::steady_clock::now();
      kill(-child.pid, SIGINT);
    } else if (quit && !killed &&
               std::chrono::steady_clock::now() - quit_time >= std::chrono::seconds(1)) {
      killed = true;
      kill(-child.pid, SIGKILL);
    }
  }
}

// Kills and reaps the child when the call unwinds early (a quit, or an
// error signalled by the inserter), so that nothing is left running.  The
// copy thread, declared after it, has stopped by then.
struct CallCleanup {
  Child& child;
  ~CallCleanup() {
    if (child.pid > 0) {
      kill(-child.pid, SIGKILL);
      kill_and_reap(child);
    }
  }
};

emacs_value how_it_ended(Env& env, int status) {
  if (status != -1 && WIFSIGNALED(status)) {
    const char* description = strsignal(WTERMSIG(status));
    return env.list({env.intern("signal"), env.unibyte(description ? description : "unknown"),
                     env.boolean(WCOREDUMP(status))});
  }
  // -1: someone else reaped the child (SIGCHLD ignored); its status is lost.
  return env.list(
      {env.intern("exit"), env.integer(status == -1 ? -1 : WEXITSTATUS(status)), env.nil()});
}

// The end of a synchronous call once all of CHILD's output (WRITTEN bytes)
// is inserted: counts it in `fastrevert-stats', reaps CHILD (a quit kills
// it and unwinds) and returns how it ended.
emacs_value finish_call(Env& env, Child& child, std::uint64_t written,
                        const std::function<bool()>& should_quit) {
  // Synchronous children count in `fastrevert-stats' too; the counters are
  // relaxed atomics, safe to bump from this thread.
  if (Engine* running = engine_if_running()) {
    running->stats().processes.fetch_add(1, std::memory_order_relaxed);
    running->stats().bytes_read.fetch_add(written, std::memory_order_relaxed);
  }
  bool quit = false;
  int status = reap_with_quit(child, should_quit, quit);
  if (quit) env.check();
  return how_it_ended(env, status);
}

// How many bytes of a child's output go to Lisp as strings before a memfd
// takes over (see core/process.h): a small output is cheaper as a string
// than as a file, and a large one makes no garbage through the file.
constexpr std::size_t kMemfdThreshold = 16384;

// How long a child may wait in the nursery before the engine adopts it: long
// enough for Lisp to get from `fastrevert-make-process' to its first wait,
// short enough that the output of a child nobody waits for is read at once.
constexpr std::chrono::microseconds kAdoptionDelay(2000);

// How long a wait that has results for Lisp goes on serving children that
// are still running: a child that has just written its output is usually
// about to exit, and its exit then comes with the same return to Lisp
// instead of another round.  Only children that were never sent anything
// wait this way (a command hands a child to the engine for good); the wait's
// own deadline still ends it, and so does a child whose output streams,
// which goes to the engine to be read while Lisp inserts.
constexpr std::chrono::microseconds kLinger(3000);

// How long after its start a child served here has only its exit watched
// (see ProcessTable::watched): a child that ends within that time costs one
// wake-up, and the first output of one that lives on comes at most that
// late.  Short, since a child that streams stalls meanwhile on a full pipe.
constexpr std::chrono::microseconds kQuietStart(1000);

// The nursery, and the table (without a loop) the main thread serves its
// children with while it waits; they exist while the engine runs.
struct Nearby {
  Engine* engine = nullptr;
  std::shared_ptr<Nursery> nursery;
  std::unique_ptr<ProcessTable> table;
  // Reused from wait to wait.
  std::vector<pollfd> fds;
  std::vector<std::pair<std::uint64_t, ProcessTable::Watch>> owners;
};
std::unique_ptr<Nearby> nearby;

// Posts CHILD to the engine's table as ID; returns whether it was posted.  A
// Command must be copyable, so the handover travels in a shared_ptr; if the
// command never runs, the handover dies with it and kills its child.
bool post_adoption(Engine& running, std::uint64_t id, std::unique_ptr<ProcessHandover> child) {
  auto shared = std::make_shared<std::unique_ptr<ProcessHandover>>(std::move(child));
  return running.post(
      [id, shared](Engine& e) { e.service<ProcessTable>().adopt_or_report(id, std::move(*shared)); });
}

// Hands child ID to the engine if it waits in the nursery, so that a command
// posted next finds it in the engine's table.
void hand_to_engine(Engine& running, std::uint64_t id) {
  if (!nearby) return;
  std::unique_ptr<ProcessHandover> child = nearby->nursery->take(id);
  if (child) post_adoption(running, id, std::move(child));
}

// Posts COMMAND for process ID, after handing the child to the engine.
void post_for_process(Env& env, std::uint64_t id, Engine::Command command) {
  hand_to_engine(engine(env), id);
  post_or_signal(env, std::move(command));
}

}  // namespace

namespace fastrevert::glue {

void processes_attach(Engine& running) {
  auto near = std::make_unique<Nearby>();
  near->engine = &running;
  near->nursery = std::make_shared<Nursery>(kAdoptionDelay);
  near->table = std::make_unique<ProcessTable>(running, nullptr, Engine::Wake::no);
  std::shared_ptr<Nursery> nursery = near->nursery;
  nearby = std::move(near);
  running.post([nursery](Engine& e) { e.service<ProcessTable>().attend(nursery); });
}

void processes_detach() noexcept {
  if (!nearby) return;
  // Between waits the main thread's table holds no child.
  nearby->table->shutdown();
  nearby->table.reset();
  // The engine's table keeps the nursery until it shuts down and kills the
  // children left in it.
  nearby.reset();
}

std::optional<bool> serve_children(Env& env, std::chrono::microseconds timeout) {
  if (!nearby || nearby->nursery->size() == 0) return std::nullopt;
  Nearby& near = *nearby;
  Engine& running = *near.engine;
  for (auto& entry : near.nursery->take_all()) {
    near.table->adopt_or_report(entry.first, std::move(entry.second));
  }
  using Clock = std::chrono::steady_clock;
  const Clock::time_point deadline = Clock::now() + timeout;
  std::optional<Clock::time_point> linger_end;
  // The engine's results (other children, files) end the wait too.
  running.watch_records(true);
  bool ready = false;
  bool quit = false;
  for (;;) {
    ready = running.pending() > 0;
    Clock::time_point now = Clock::now();
    if (ready) {
      if (near.table->size() == 0 || near.table->streams(kMemfdThreshold)) break;
      if (!linger_end) linger_end = now + kLinger;
      if (now >= *linger_end) break;
    }
    if (now >= deadline) break;
    if (env.quit_requested()) {
      quit = true;
      break;
    }
    near.fds.clear();
    near.owners.clear();
    Clock::time_point changes = near.table->watched(near.fds, near.owners, now, kQuietStart);
    near.fds.push_back(pollfd{running.records_fd(), POLLIN, 0});
    // Quit is looked at least this often.
    Clock::time_point until = std::min({deadline, now + std::chrono::milliseconds(10),
                                        linger_end.value_or(deadline), changes});
    auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - now);
    timespec span{static_cast<time_t>(left.count() / 1000000000),
                  static_cast<long>(left.count() % 1000000000)};
    if (ppoll(near.fds.data(), near.fds.size(), &span, nullptr) > 0 &&
        (near.fds.back().revents & POLLIN)) {
      std::uint64_t count;
      ssize_t ignored = read(running.records_fd(), &count, sizeof count);
      (void)ignored;
    }
    near.table->serve(near.fds, near.owners);
  }
  running.watch_records(false);
  // Children still running go back, to be served by the next wait or
  // adopted by the engine; a child that streams goes to the engine at once,
  // which reads it while Lisp handles what came.
  for (std::uint64_t id : near.table->ids()) {
    bool streams = near.table->bytes_read(id) > kMemfdThreshold;
    std::unique_ptr<ProcessHandover> child = near.table->hand_over(id);
    if (streams) {
      post_adoption(running, id, std::move(child));
    } else {
      near.nursery->put(id, std::move(child));
    }
  }
  // Results Lisp will not drain now must wake it later.
  if (!ready || quit) running.wake_if_pending();
  return ready && !quit;
}

}  // namespace fastrevert::glue

FASTREVERT_DEFUN("fastrevert--mod-call-process", mod_call_process, 8, 8,
                 "Run PROGRAM synchronously and return how it ended.\n"
                 "PROGRAM is the encoded absolute file name, ARGV a vector of encoded\n"
                 "arguments (argv[0] included), ENV a list of strings, each holding\n"
                 "one or more \"NAME=VALUE\" entries separated by NUL bytes, in\n"
                 "`process-environment' order (the first definition of a name wins),\n"
                 "CWD the encoded working directory.\n"
                 "INFILE is nil (/dev/null) or an encoded file name for stdin.\n"
                 "STDOUT is nil (/dev/null), an encoded file name, or a function\n"
                 "INSERTER.  Output of up to 1 KiB is then handed over whole, once\n"
                 "the child has closed its output, as (INSERTER BYTES nil nil) with\n"
                 "BYTES a unibyte string.  Longer output is copied into a memfd as it\n"
                 "arrives and INSERTER is called as (INSERTER FD BEG END) for each byte\n"
                 "range [BEG, END) of memfd FD to insert, in order.  With CHUNK positive,\n"
                 "ranges of at least CHUNK bytes ending in a newline are handed over\n"
                 "while the child runs; the rest (all of it when CHUNK is 0) comes at\n"
                 "the end.  STDERR is nil (/dev/null), t (with stdout) or an encoded\n"
                 "file name.\n"
                 "Return (exit CODE nil) or (signal DESCRIPTION CORE-DUMPED), where\n"
                 "DESCRIPTION is unibyte strsignal text.  A spawn failure returns\n"
                 "(:error CONDITION FUNCTION STRERROR PATH).  A quit kills the child\n"
                 "(SIGINT, then SIGKILL), reaps it and signals `quit'.\n\n"
                 "(fn PROGRAM ARGV ENV CWD INFILE STDOUT STDERR CHUNK)") {
  SpawnSpec spec;
  fill_spec(env, args, spec);
  spec.stdin_mode = stdin_mode(env, args[4], spec.stdin_file);
  if (spec.stdin_mode == SpawnSpec::Stdin::pipe) env.wrong_type("stringp", args[4]);
  emacs_value inserter = nullptr;
  if (is_nil(env, args[5])) {
    spec.stdout_mode = SpawnSpec::Stdout::null;
  } else if (env.is_string(args[5])) {
    spec.stdout_mode = SpawnSpec::Stdout::file;
    spec.stdout_file = string_bytes(env, args[5]);
  } else {
    spec.stdout_mode = SpawnSpec::Stdout::pipe;
    inserter = args[5];
  }
  spec.stderr_mode = stderr_mode(env, args[6], spec.stderr_file);
  if (spec.stderr_mode == SpawnSpec::Stderr::pipe) env.wrong_type("stringp", args[6]);
  std::int64_t chunk = integer_arg(env, args[7]);
  // Like stock call-process, the child leads a process group of its own, so
  // that a quit signals everything it started (a shell's pipeline too).
  spec.new_session = true;

  // Emacs keeps reporting a pending quit once it has been seen; latch it,
  // so that the child gets SIGINT and a grace period before SIGKILL, as a
  // single C-g gives it with stock call-process.
  bool quit_seen = false;
  std::function<bool()> should_quit = [&env, &quit_seen] {
    if (quit_seen) return false;
    quit_seen = env.quit_requested();
    return quit_seen;
  };

  if (!inserter) {
    Child child;
    try {
      child = spawn_like_emacs(env, spec);
    } catch (const SystemError& error) {
      return error_data(env, error);
    }
    RunOptions options;
    options.signal_process_group = true;
    options.should_quit = should_quit;
    RunResult result = run_to_completion(child, ByteSink(), ByteSink(), options);
    // On a quit the `quit' signal is already pending: returning lets Emacs
    // raise it.
    if (result.quit) env.check();
    return how_it_ended(env, result.wait_status);
  }

  Child child;
  try {
    child = spawn_like_emacs(env, spec);
  } catch (const SystemError& error) {
    return error_data(env, error);
  }
  CallCleanup cleanup{child};
  auto step = static_cast<std::uint64_t>(chunk > 0 ? chunk : 0);
  // A quit: the child gets SIGINT and a second of grace before SIGKILL, and
  // is reaped, without waiting for a pipe a grandchild may hold.  `quit' is
  // pending, so env.check() unwinds.
  auto quit_now = [&] {
    bool first = true;
    bool quit = false;
    reap_with_quit(
        child, [&first] { return std::exchange(first, false); }, quit);
    env.check();
  };

  // Most children write little: up to kStringLimit bytes of output reach
  // Lisp as one unibyte string, which costs less than a file to insert
  // from.  Beyond that the strings would be garbage worth collecting, so
  // output that outgrows HEAD goes into a memfd, and Lisp inserts ranges of
  // it with `insert-file-contents': Emacs decodes straight into the buffer
  // gap, with no Lisp string, while the copy thread keeps reading the child.
  constexpr std::size_t kStringLimit = 1024;
  std::string head;
  OwnedFd output(-1);
  int memfd = -1;
  auto open_memfd = [&] {
    if (memfd >= 0) return;
    output.reset(memfd_create("fastrevert-call-process", MFD_CLOEXEC));
    if (output.get() < 0) throw_errno("memfd_create");
    memfd = output.get();
    write_all(memfd, head);
    head = std::string();
  };
  // While the copy thread runs, it gives back the memory of what Emacs has
  // decoded; what is left when the call ends goes with the memfd.
  MemfdCopier* copier = nullptr;
  auto insert = [&](std::uint64_t from, std::uint64_t to) {
    env.funcall(inserter, {env.integer(memfd), env.integer(static_cast<std::int64_t>(from)),
                           env.integer(static_cast<std::int64_t>(to))});
    if (copier) copier->release(to);
  };

  // Phase one, on this thread: most children write little and end soon, and
  // for them a copy thread would cost more than the copy.  Only output that
  // outgrows a chunk moves to a copy thread, so that Emacs can decode one
  // chunk while the child writes the next.
  std::uint64_t written = 0;
  bool eof = false;
  {
    char buffer[65536];
    while (!eof && !(step > 0 && written >= step)) {
      pollfd fd = {child.stdout_fd, POLLIN, 0};
      int ready = poll(&fd, 1, 50);
      if (ready < 0 && errno != EINTR) throw_errno("poll");
      if (should_quit()) quit_now();
      if (ready <= 0) continue;
      for (;;) {
        ssize_t got = read(child.stdout_fd, buffer, sizeof buffer);
        if (got > 0) {
          std::string_view bytes(buffer, static_cast<std::size_t>(got));
          if (memfd < 0 && head.size() + bytes.size() <= kStringLimit) {
            head.append(bytes);
          } else {
            open_memfd();
            write_all(memfd, bytes);
          }
          written += static_cast<std::uint64_t>(got);
          if (step > 0 && written >= step) break;
          continue;
        }
        if (got == 0) {
          eof = true;
        } else if (errno == EINTR) {
          continue;
        } else if (errno != EAGAIN) {
          throw_errno("read", "process output");
        }
        break;
      }
    }
  }

  if (eof && memfd < 0) {
    if (!head.empty()) env.funcall(inserter, {env.unibyte(head), env.nil(), env.nil()});
    return finish_call(env, child, written, should_quit);
  }
  open_memfd();

  std::uint64_t consumed = 0;
  // The copy thread, when the output outgrows phase one.  It is stopped only
  // once the last range is inserted, so that giving back the memory of the
  // ranges before runs meanwhile.
  std::optional<MemfdCopier> capture;
  if (!eof) {
    capture.emplace(child.stdout_fd, memfd, written);
    copier = &*capture;
    // Bytes before CONSUMED are inserted; bytes in [CONSUMED, SCANNED) hold
    // no newline, so each byte is searched once however long a line is.
    std::uint64_t scanned = 0;
    bool done = false;
    while (!done) {
      written = capture->wait(scanned + step, std::chrono::milliseconds(50), done);
      if (should_quit()) {
        copier = nullptr;
        capture->stop();
        quit_now();
      }
      if (!done && written >= scanned + step) {
        std::uint64_t boundary = line_boundary(memfd, scanned, written);
        scanned = written;
        if (boundary > consumed) {
          insert(consumed, boundary);
          consumed = boundary;
        }
      }
    }
    copier = nullptr;
    if (int error = capture->error()) throw SystemError(error, "read", "process output");
  }
  if (written > consumed) insert(consumed, written);
  if (capture) capture->stop();
  return finish_call(env, child, written, should_quit);
}

FASTREVERT_DEFUN("fastrevert--mod-first-executable", mod_first_executable, 1, 1,
                 "Return the index of the first of CANDIDATES that can be executed, or nil.\n"
                 "CANDIDATES is a unibyte string of encoded file names in search order,\n"
                 "each ended by a NUL byte; an empty name is never executable.  The\n"
                 "one found is a file the effective user may execute that is not a\n"
                 "directory, as the program search of `call-process' decides.\n\n"
                 "(fn CANDIDATES)") {
  std::optional<std::size_t> found = first_executable(string_bytes(env, args[0]));
  return found ? env.integer(static_cast<std::int64_t>(*found)) : env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-accessible-directory-p", mod_accessible_directory_p, 1, 1,
                 "Return non-nil if DIRECTORY, an encoded local file name, can be entered.\n"
                 "That is what `file-accessible-directory-p' decides when no file name\n"
                 "handler is involved: DIRECTORY/. exists for the effective user.\n\n"
                 "(fn DIRECTORY)") {
  std::string directory = string_bytes(env, args[0]);
  directory += "/.";
  return env.boolean(faccessat(AT_FDCWD, directory.c_str(), F_OK, AT_EACCESS) == 0);
}

FASTREVERT_DEFUN("fastrevert--mod-memfd-read", mod_memfd_read, 3, 3,
                 "Return bytes [BEG, END) of the memfd FD as a unibyte string.\n"
                 "Bytes past the end of the file are missing from the string.\n\n"
                 "(fn FD BEG END)") {
  std::int64_t fd = integer_arg(env, args[0]);
  std::int64_t beg = integer_arg(env, args[1]);
  std::int64_t end = integer_arg(env, args[2]);
  if (fd < 0 || fd > INT32_MAX) env.signal("args-out-of-range", env.list({args[0]}));
  if (beg < 0 || end < beg) env.signal("args-out-of-range", env.list({args[1], args[2]}));
  std::string bytes(static_cast<std::size_t>(end - beg), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t got = pread(static_cast<int>(fd), bytes.data() + done, bytes.size() - done,
                        static_cast<off_t>(beg) + static_cast<off_t>(done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw_errno("pread");
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  bytes.resize(done);
  return env.unibyte(bytes);
}

FASTREVERT_DEFUN("fastrevert--mod-close-fd", mod_close_fd, 1, 1,
                 "Close the file descriptor FD returned by a fastrevert primitive.\n\n"
                 "(fn FD)") {
  std::int64_t fd = integer_arg(env, args[0]);
  if (fd < 0 || fd > INT32_MAX) env.signal("args-out-of-range", env.list({args[0]}));
  return env.boolean(close(static_cast<int>(fd)) == 0);
}

FASTREVERT_DEFUN("fastrevert--mod-process-start", mod_process_start, 10, 10,
                 "Spawn a child for the engine to run as process ID; return its pid.\n"
                 "PROGRAM, ARGV, ENV and CWD are as for `fastrevert--mod-call-process'.\n"
                 "STDIN is t (a pipe), nil (/dev/null) or an encoded file name.\n"
                 "STDOUT is t (a pipe), nil (/dev/null) or `memfd': a pipe whose bytes,\n"
                 "once more than `fastrevert--mod-memfd-threshold' of them were read, go\n"
                 "to a memfd instead of results: a `process-output' result of code 4\n"
                 "then gives Lisp the number of a descriptor of that memfd, to read and\n"
                 "to close with `fastrevert--mod-memfd-release', and results of code 3\n"
                 "tell how far it is written (see core/process.h).  STDERR is t (with stdout),\n"
                 "`pipe' (a pipe of its own), nil (/dev/null) or an encoded file name.\n"
                 "FRAMING is nil, `lines' or `lsp', for stdout.  READ-SIZE is the first\n"
                 "read size.  A spawn failure returns (:error CONDITION FUNCTION\n"
                 "STRERROR PATH).  Output and exit arrive as engine results.\n\n"
                 "(fn ID PROGRAM ARGV ENV CWD STDIN STDOUT STDERR FRAMING READ-SIZE)") {
  std::int64_t id = integer_arg(env, args[0]);
  SpawnSpec spec;
  fill_spec(env, args + 1, spec);
  spec.stdin_mode = stdin_mode(env, args[5], spec.stdin_file);
  spec.stdout_mode = is_nil(env, args[6]) ? SpawnSpec::Stdout::null : SpawnSpec::Stdout::pipe;
  spec.stderr_mode = stderr_mode(env, args[7], spec.stderr_file);
  // As Emacs does for its asynchronous children: a session of its own, so
  // that signals go to its whole process group and the terminal's job
  // control stays Emacs's.
  spec.new_session = true;
  ProcessTable::Options options;
  options.framing = framing_arg(env, args[8]);
  std::int64_t read_size = integer_arg(env, args[9]);
  options.initial_read_size = read_size > 0 ? static_cast<std::size_t>(read_size) : 4096;
  options.signal_process_group = true;
  options.stdout_to_memfd = env.eq(args[6], env.intern("memfd"));
  options.memfd_threshold = kMemfdThreshold;

  // Checked before spawning, so that no child is started that nobody runs.
  Engine& running = engine(env);
  if (!running.running()) {
    env.signal("fastrevert-not-running",
               env.list({env.string("The fastrevert engine is stopping")}));
  }
  Child child;
  try {
    child = spawn_like_emacs(env, spec);
  } catch (const SystemError& error) {
    return error_data(env, error);
  }
  pid_t pid = child.pid;
  auto identifier = static_cast<std::uint64_t>(id);
  auto handover = std::make_unique<ProcessHandover>(std::move(child), options);
  if (nearby) {
    nearby->nursery->put(identifier, std::move(handover));
  } else if (!post_adoption(running, identifier, std::move(handover))) {
    env.signal("fastrevert-not-running",
               env.list({env.string("The fastrevert engine is stopping")}));
  }
  return env.integer(pid);
}

FASTREVERT_DEFUN("fastrevert--mod-memfd-threshold", mod_memfd_threshold, 0, 0,
                 "Return how many bytes of output go as strings before a memfd takes over.\n"
                 "See `fastrevert--mod-process-start'.") {
  return env.integer(static_cast<std::int64_t>(kMemfdThreshold));
}

FASTREVERT_DEFUN("fastrevert--mod-memfd-release", mod_memfd_release, 3, 3,
                 "Give back the memory of bytes [0, END) of the memfd FD; with CLOSE, close FD.\n"
                 "The file keeps its size, so later offsets stay valid.  When the file\n"
                 "holds more than a few pages, the work is done on the engine thread,\n"
                 "in order with earlier calls, so that Emacs does not wait while the\n"
                 "kernel frees them; otherwise, and when the engine is not running,\n"
                 "here.  After a call with CLOSE non-nil, FD must not be used.\n\n"
                 "(fn FD END CLOSE)") {
  std::int64_t fd = integer_arg(env, args[0]);
  std::int64_t end = integer_arg(env, args[1]);
  if (fd < 0 || fd > INT32_MAX) env.signal("args-out-of-range", env.list({args[0]}));
  if (end < 0) env.signal("args-out-of-range", env.list({args[1]}));
  auto descriptor = static_cast<int>(fd);
  auto length = static_cast<off_t>(end);
  bool close_it = env.truthy(args[2]);
  auto release = [descriptor, length, close_it] {
    if (length > 0) fallocate(descriptor, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, length);
    if (close_it) close(descriptor);
  };
  // Freeing a few pages costs less than waking the engine for it.  Calls
  // posted earlier must run first, though: a close here could otherwise
  // hand the number to a new file before the engine punches holes in it.
  constexpr blkcnt_t kInlineBlocks = (256 * 1024) / 512;
  static std::atomic<int> releases_posted{0};
  struct stat status;
  Engine* running = engine_if_running();
  bool small = fstat(descriptor, &status) == 0 && status.st_blocks <= kInlineBlocks;
  if (running && !(small && releases_posted.load(std::memory_order_acquire) == 0)) {
    releases_posted.fetch_add(1, std::memory_order_acq_rel);
    if (running->post([release](Engine&) {
          release();
          releases_posted.fetch_sub(1, std::memory_order_acq_rel);
        })) {
      return env.nil();
    }
    releases_posted.fetch_sub(1, std::memory_order_acq_rel);
  }
  release();
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-send", mod_process_send, 2, 2,
                 "Queue the unibyte STRING for the stdin of engine process ID.\n"
                 "Never blocks: what the pipe does not take now is written later.\n\n"
                 "(fn ID STRING)") {
  auto id = static_cast<std::uint64_t>(integer_arg(env, args[0]));
  std::string data = string_bytes(env, args[1]);
  post_for_process(env, id, [id, data = std::move(data)](Engine& e) mutable {
    if (!e.service<ProcessTable>().write_stdin(id, std::move(data))) {
      e.emit(Record{RecordKind::notice, id, 0,
                    "fastrevert: process " + std::to_string(id) + " no longer reads its input"});
    }
  });
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-eof", mod_process_eof, 1, 1,
                 "Close the stdin of engine process ID once its queued input is written.\n\n"
                 "(fn ID)") {
  auto id = static_cast<std::uint64_t>(integer_arg(env, args[0]));
  post_for_process(env, id, [id](Engine& e) { e.service<ProcessTable>().close_stdin(id); });
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-signal", mod_process_signal, 2, 2,
                 "Send signal number SIGNAL to engine process ID (its process group).\n\n"
                 "(fn ID SIGNAL)") {
  auto id = static_cast<std::uint64_t>(integer_arg(env, args[0]));
  std::int64_t number = integer_arg(env, args[1]);
  if (number < 0 || number > 64) env.signal("args-out-of-range", env.list({args[1]}));
  post_for_process(env, id, [id, number](Engine& e) {
    e.service<ProcessTable>().signal(id, static_cast<int>(number));
  });
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-remove", mod_process_remove, 1, 1,
                 "Forget engine process ID: kill it if it runs and reap it in the background.\n"
                 "No further result arrives for it.  Do nothing if the engine is stopped.\n\n"
                 "(fn ID)") {
  auto id = static_cast<std::uint64_t>(integer_arg(env, args[0]));
  if (Engine* running = engine_if_running()) {
    hand_to_engine(*running, id);
    running->post([id](Engine& e) { e.service<ProcessTable>().remove(id); });
  }
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-signal-number", mod_signal_number, 1, 1,
                 "Return the number of the signal NAME (a string such as \"SIGINT\",\n"
                 "\"int\" or \"KILL\"), or nil if there is no such signal.\n\n"
                 "(fn NAME)") {
  std::string name = string_bytes(env, args[0]);
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::string_view bare(name);
  if (bare.substr(0, 3) == "SIG") bare.remove_prefix(3);
  for (const SignalName& entry : kSignalNames) {
    if (bare == entry.name) return env.integer(entry.number);
  }
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-strsignal", mod_strsignal, 1, 1,
                 "Return the C library's description of signal number SIGNAL, unibyte.\n\n"
                 "(fn SIGNAL)") {
  std::int64_t number = integer_arg(env, args[0]);
  const char* description =
      number > 0 && number < 65 ? strsignal(static_cast<int>(number)) : nullptr;
  return description ? env.unibyte(description) : env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-strerror", mod_strerror, 1, 1,
                 "Return the C library's text for the error named NAME, unibyte.\n"
                 "NAME is one of the symbols `ENOENT', `EACCES', `EISDIR', `ENOTDIR'.\n\n"
                 "(fn NAME)") {
  static const std::pair<const char*, int> kErrors[] = {
      {"ENOENT", ENOENT}, {"EACCES", EACCES}, {"EISDIR", EISDIR}, {"ENOTDIR", ENOTDIR}};
  for (const auto& entry : kErrors) {
    if (env.eq(args[0], env.intern(entry.first))) return env.unibyte(std::strerror(entry.second));
  }
  env.wrong_type("symbolp", args[0]);
}
