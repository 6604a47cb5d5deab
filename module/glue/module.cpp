// Module entry point and the engine's Lisp interface: start, stop, drain,
// stats, and the round-trip and error hooks that the tests use.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/duration.h"
#include "core/engine.h"
#include "core/errors.h"
#include "core/handed_fds.h"
#include "glue/env.h"
#include "glue/state.h"

extern "C" {
__attribute__((visibility("default"))) int plugin_is_GPL_compatible;
__attribute__((visibility("default"))) int emacs_module_init(
    struct emacs_runtime* runtime) noexcept;
}

namespace fastrevert::glue {

namespace {

// The engine, owned by the main thread: every function in this file runs on
// Emacs's main thread, so no lock is needed around the pointer.  It is
// shared because a function that uses the engine across a call into Lisp
// (a drain calls handlers) or across a wait (which a signal handler may
// interrupt to run `kill-emacs') holds a reference of its own: stopping the
// engine meanwhile then leaves that frame a stopped engine, never a freed
// one.  The slot is made once and never destroyed, so that exit() runs no
// destructor that would stop an engine from under a frame it interrupted.
std::shared_ptr<Engine>& running_engine = *new std::shared_ptr<Engine>();

// Signals `wrong-type-argument' unless PROCESS is a live pipe process, the
// only kind `open_channel' can take a descriptor of.
void check_pipe_process(Env& env, emacs_value process) {
  if (!env.truthy(env.call("processp", {process})) ||
      !env.eq(env.call("process-type", {process}), env.intern("pipe")) ||
      !env.truthy(env.call("process-live-p", {process}))) {
    env.wrong_type("pipe-process-p", process);
  }
}

// A descriptor of PROCESS's pipe for the engine to write wake bytes to.
int wake_fd_of(Env& env, emacs_value process) {
  check_pipe_process(env, process);
  int fd = env.raw()->open_channel(env.raw(), process);
  env.check();
  return fd;
}

}  // namespace

Engine& engine(Env& env) {
  if (!running_engine) {
    env.signal("fastrevert-not-running",
               env.list({env.string("The fastrevert engine is not running")}));
  }
  return *running_engine;
}

Engine* engine_if_running() noexcept {
  return running_engine.get();
}

std::shared_ptr<Engine> engine_reference() noexcept {
  return running_engine;
}

void post_or_signal(Env& env, Engine::Command command) {
  if (!engine(env).post(std::move(command))) {
    env.signal("fastrevert-not-running",
               env.list({env.string("The fastrevert engine is stopping")}));
  }
}

}  // namespace fastrevert::glue

using namespace fastrevert;
using namespace fastrevert::glue;

FASTREVERT_DEFUN("fastrevert--mod-version", mod_version, 0, 0,
                 "Return the version string this module was built as.") {
  return env.string(FASTREVERT_VERSION);
}

FASTREVERT_DEFUN("fastrevert--mod-start", mod_start, 1, 1,
                 "Start the engine thread, waking PIPE-PROCESS when results wait.\n"
                 "PIPE-PROCESS must be a live pipe process made by `make-pipe-process';\n"
                 "its filter should call `fastrevert--mod-drain'.\n\n(fn PIPE-PROCESS)") {
  if (running_engine) {
    env.signal("fastrevert-error",
               env.list({env.string("The fastrevert engine is already running")}));
  }
  int wake_fd = wake_fd_of(env, args[0]);
  auto started = std::make_shared<Engine>(wake_fd);
  processes_attach(*started);
  running_engine = std::move(started);
  return env.t();
}

FASTREVERT_DEFUN("fastrevert--mod-set-wake-process", mod_set_wake_process, 1, 1,
                 "Make the running engine wake PIPE-PROCESS from now on.\n"
                 "For when the pipe process it was started with was deleted: every\n"
                 "watch, process and result of the engine carries over, and results\n"
                 "already waiting wake PIPE-PROCESS at once.  PIPE-PROCESS must be a\n"
                 "live pipe process whose filter calls `fastrevert--mod-drain'.\n\n"
                 "(fn PIPE-PROCESS)") {
  Engine& running = engine(env);
  running.set_wake_fd(wake_fd_of(env, args[0]));
  return env.t();
}

FASTREVERT_DEFUN("fastrevert--mod-stop", mod_stop, 0, 1,
                 "Stop the engine thread and wait for it; do nothing if it is not running.\n"
                 "Results not yet drained are discarded.  With TIMEOUT (seconds), wait\n"
                 "at most that long: an engine thread stuck in a file system that does\n"
                 "not answer is then left behind, and the function returns `abandoned'.\n\n"
                 "(fn &optional TIMEOUT)") {
  if (!running_engine) return env.nil();
  auto timeout = std::chrono::milliseconds::max();
  if (nargs > 0 && env.truthy(args[0])) timeout = ceil_milliseconds(env.to_duration(args[0]));
  // Taken out of the slot first: whatever happens below, the engine is no
  // longer the running one.
  std::shared_ptr<Engine> stopping = std::move(running_engine);
  running_engine.reset();
  processes_detach();
  if (!stopping->stop_within(timeout)) {
    // The detached thread still uses the engine, so it must outlive this
    // call; it is left to the end of the process.
    new std::shared_ptr<Engine>(std::move(stopping));
    return env.intern("abandoned");
  }
  // Descriptors in results nobody will see are closed, not leaked.
  std::deque<Record> undrained;
  if (stopping->try_drain(undrained)) HandedFds::discard(undrained);
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-running-p", mod_running_p, 0, 0,
                 "Return non-nil if the engine thread is running.") {
  return env.boolean(running_engine && running_engine->running());
}

FASTREVERT_DEFUN("fastrevert--mod-wait", mod_wait, 1, 1,
                 "Wait up to SECONDS for the engine to have a result ready.\n"
                 "Return non-nil if one is ready (drain it with `fastrevert--mod-drain'),\n"
                 "nil when the time ran out, the engine is not running, or the user\n"
                 "quit; a quit is then signalled as this function returns.  The wait\n"
                 "happens here, not in Emacs's event loop: no timer or process filter\n"
                 "runs meanwhile, so callers keep SECONDS short.  Children of\n"
                 "`fastrevert--mod-process-start' that the engine has not adopted yet\n"
                 "are read and reaped by this thread while it waits.\n\n(fn SECONDS)") {
  std::chrono::nanoseconds timeout = env.to_duration(args[0]);
  std::shared_ptr<Engine> current = engine_reference();
  if (!current) return env.nil();
  // Children not yet adopted by the engine are served right here.
  if (std::optional<bool> served = serve_children(env, timeout)) return env.boolean(*served);
  return env.boolean(current->wait_for_records(timeout, [&env] { return env.quit_requested(); }));
}

FASTREVERT_DEFUN("fastrevert--mod-drain", mod_drain, 1, 1,
                 "Call HANDLER on every result the engine has ready, in order.\n"
                 "HANDLER gets four arguments: KIND (a symbol), ID, CODE (integers)\n"
                 "and DATA (a unibyte string).  Return the number of results handled.\n"
                 "Results are taken one at a time: a HANDLER that drains again goes on\n"
                 "with the next result.  If HANDLER exits non-locally, the results after\n"
                 "the one it was handling stay queued and the exit propagates.\n\n"
                 "(fn HANDLER)") {
  // Checked before a result is taken: a HANDLER that cannot be called
  // would lose the one it was handed.
  if (!env.truthy(env.call("functionp", {args[0]}))) env.wrong_type("functionp", args[0]);
  std::shared_ptr<Engine> current = engine_reference();
  if (!current) return env.integer(0);
  DrainTimer timer(*current);
  std::uint64_t end = current->begin_drain();
  std::int64_t handled = 0;
  Record record;
  try {
    while (current->take(record, end)) {
      handed_fds.note_delivery(record);
      // DATA goes as unibyte bytes: paths and output need not be valid
      // UTF-8, and make_string would refuse them.
      env.funcall(args[0], {env.intern(record_kind_name(record.kind)),
                            env.integer(static_cast<std::int64_t>(record.id)),
                            env.integer(record.code), env.unibyte(record.data)});
      ++handled;
      timer.handled();
    }
  } catch (const PendingExit&) {
    current->rewake();
    throw;
  }
  return env.integer(handled);
}

FASTREVERT_DEFUN("fastrevert--mod-hold-wakes", mod_hold_wakes, 1, 1,
                 "Hold the engine's wake bytes back while HOLD is non-nil.\n"
                 "Calls nest: each non-nil HOLD needs a nil one.  For a wait that\n"
                 "drains the engine itself while Emacs's event loop runs: a busy stream\n"
                 "would otherwise keep the wake pipe readable, and the event loop reads\n"
                 "it for as long as it stays so.  The last release wakes the pipe if\n"
                 "results wait.  Do nothing when the engine is not running.\n\n"
                 "(fn HOLD)") {
  if (Engine* running = engine_if_running()) running->hold_wakes(env.truthy(args[0]));
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-echo", mod_echo, 2, 2,
                 "Ask the engine thread to send back TOKEN and STRING as an `echo' result.\n"
                 "TOKEN is an integer; STRING a string.  This is the engine's round trip.\n\n"
                 "(fn TOKEN STRING)") {
  std::int64_t token = env.to_integer(args[0]);
  std::string payload = env.to_bytes(args[1]);
  post_or_signal(env, [token, payload = std::move(payload)](Engine& e) {
    e.emit(Record{RecordKind::echo, static_cast<std::uint64_t>(token), 0, payload});
  });
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-stats", mod_stats, 0, 0,
                 "Return a plist of the engine's counters, or nil if it is not running.") {
  Engine* current = engine_if_running();
  if (current == nullptr) return env.nil();
  std::vector<emacs_value> plist;
  for (const StatsCounter& entry : kStatsCounters) {
    std::uint64_t count = (current->stats().*entry.counter).load(std::memory_order_relaxed);
    plist.push_back(env.intern((std::string(":") + entry.name).c_str()));
    plist.push_back(env.integer(static_cast<std::int64_t>(count)));
  }
  return env.list(plist);
}

FASTREVERT_DEFUN("fastrevert--mod-test-throw", mod_test_throw, 1, 1,
                 "Throw a C++ exception of KIND inside the module, for tests.\n"
                 "KIND is one of the symbols `system', `bad-alloc', `runtime' or `other'.\n\n"
                 "(fn KIND)") {
  if (env.eq(args[0], env.intern("system"))) {
    throw SystemError(ENOENT, "open", "/nonexistent/fastrevert");
  }
  if (env.eq(args[0], env.intern("bad-alloc"))) throw std::bad_alloc();
  if (env.eq(args[0], env.intern("runtime"))) throw std::runtime_error("test exception");
  if (env.eq(args[0], env.intern("other"))) throw 42;
  env.wrong_type("symbolp", args[0]);
}

int emacs_module_init(struct emacs_runtime* runtime) noexcept {
  if (runtime->size < static_cast<std::ptrdiff_t>(sizeof(*runtime))) return 1;
  emacs_env* raw = runtime->get_environment(runtime);
  if (raw->size < static_cast<std::ptrdiff_t>(sizeof(struct emacs_env_28))) {
    // Only the Emacs 25 part of the environment is safe to use here.
    const char text[] =
        "fastrevert needs the Emacs 28 module API (open_channel); this Emacs is too old";
    emacs_value message = raw->make_string(raw, text, sizeof text - 1);
    raw->funcall(raw, raw->intern(raw, "message"), 1, &message);
    return 2;
  }
  Env env(raw);
  try {
    emacs_value defalias = env.intern("defalias");
    for (const FunctionSpec& spec : function_registry()) {
      emacs_value function = raw->make_function(raw, spec.min_arity, spec.max_arity, spec.entry,
                                                spec.docstring, nullptr);
      env.check();
      env.funcall(defalias, {env.intern(spec.lisp_name), function});
    }
    env.call("provide", {env.intern("fastrevert-module")});
  } catch (const PendingExit&) {
    return 3;
  } catch (...) {
    return 4;
  }
  return 0;
}
