// Module entry point and the engine's Lisp interface: start, stop, drain,
// stats, and the round-trip and error hooks that the tests use.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/duration.h"
#include "core/engine.h"
#include "core/errors.h"
#include "glue/env.h"
#include "glue/process.h"
#include "glue/state.h"

extern "C" {
__attribute__((visibility("default"))) int plugin_is_GPL_compatible;
__attribute__((visibility("default"))) int emacs_module_init(
    struct emacs_runtime* runtime) noexcept;
}

namespace fastrevert::glue {

Runtime& runtime = *new Runtime();

void check_posted(Env& env, Runtime::Posted posted) {
  if (posted == Runtime::Posted::yes) return;
  env.signal("fastrevert-not-running",
             env.list({env.string(posted == Runtime::Posted::not_running
                                      ? "The fastrevert engine is not running"
                                      : "The fastrevert engine is stopping")}));
}

void post_or_signal(Env& env, Engine::Command command) {
  check_posted(env, runtime.post(std::move(command)));
}

}  // namespace fastrevert::glue

using namespace fastrevert;
using namespace fastrevert::glue;

namespace {

// A descriptor of PROCESS's pipe for the engine to write wake bytes to;
// signals `wrong-type-argument' unless PROCESS is a live pipe process, the
// only kind `open_channel' can take a descriptor of.
int wake_fd_of(Env& env, emacs_value process) {
  if (!env.truthy(env.call("processp", {process})) ||
      !env.eq(env.call("process-type", {process}), env.intern("pipe")) ||
      !env.truthy(env.call("process-live-p", {process}))) {
    env.wrong_type("pipe-process-p", process);
  }
  int fd = env.raw()->open_channel(env.raw(), process);
  env.check();
  return fd;
}

}  // namespace

FASTREVERT_DEFUN("fastrevert--mod-version", mod_version, 0, 0,
                 "Return the version string this module was built as.") {
  return env.string(FASTREVERT_VERSION);
}

FASTREVERT_DEFUN("fastrevert--mod-module-api", mod_module_api, 0, 0,
                 "Return the module API this module was built for, an Emacs major version.\n"
                 "It is that of the emacs-module.h it was compiled against.") {
  return env.integer(EMACS_MAJOR_VERSION);
}

FASTREVERT_DEFUN("fastrevert--mod-start", mod_start, 1, 1,
                 "Start the engine thread, waking PIPE-PROCESS when results wait.\n"
                 "PIPE-PROCESS must be a live pipe process made by `make-pipe-process';\n"
                 "its filter should call `fastrevert--mod-drain'.\n\n(fn PIPE-PROCESS)") {
  if (runtime.engine()) {
    env.signal("fastrevert-error",
               env.list({env.string("The fastrevert engine is already running")}));
  }
  runtime.start(wake_fd_of(env, args[0]));
  return env.t();
}

FASTREVERT_DEFUN("fastrevert--mod-set-wake-process", mod_set_wake_process, 1, 1,
                 "Make the running engine wake PIPE-PROCESS from now on.\n"
                 "PIPE-PROCESS is as for `fastrevert--mod-start', for when the one it was\n"
                 "started with was deleted: every watch, process and result carries\n"
                 "over, and results already waiting wake PIPE-PROCESS at once.\n\n"
                 "(fn PIPE-PROCESS)") {
  check_posted(env, runtime.can_post());
  int wake_fd = wake_fd_of(env, args[0]);
  runtime.engine()->set_wake_fd(wake_fd);
  return env.t();
}

FASTREVERT_DEFUN("fastrevert--mod-stop", mod_stop, 0, 1,
                 "Stop the engine thread and wait for it; do nothing if it is not running.\n"
                 "Results not yet drained are discarded.  With TIMEOUT (seconds), wait\n"
                 "at most that long: an engine thread stuck in a file system that does\n"
                 "not answer is then left behind, and the function returns `abandoned'.\n\n"
                 "(fn &optional TIMEOUT)") {
  if (!runtime.engine()) return env.nil();
  auto timeout = std::chrono::milliseconds::max();
  if (nargs > 0 && env.truthy(args[0])) timeout = ceil_milliseconds(env.to_duration(args[0]));
  bool abandoned = runtime.stop(timeout) == Runtime::Stopped::abandoned;
  // Stopping killed its processes; Lisp reports their end.
  forget_all_processes(env);
  return abandoned ? env.intern("abandoned") : env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-running-p", mod_running_p, 0, 0,
                 "Return non-nil if the engine thread is running.") {
  return env.boolean(runtime.can_post() == Runtime::Posted::yes);
}

namespace {

// Hands every record ready now to HANDLER, or, for the output of a process,
// to the process glue; returns how many were handled.  When Lisp exits
// non-locally, the drain stops there with the exit pending: the caller
// returns at once, for Emacs to raise it.
std::size_t drain_records(Env& env, emacs_value handler) {
  return runtime.drain([&env, handler](const Record& record) {
    if (record.kind == RecordKind::process_ready) return deliver_process_output(env, record);
    // DATA goes as unibyte bytes: paths and output need not be valid UTF-8,
    // and make_string would refuse them.
    return env.funcall_may_exit(handler, {env.intern(record_kind_name(record.kind)),
                                          env.integer(static_cast<std::int64_t>(record.id)),
                                          env.integer(record.code), env.unibyte(record.data)});
  });
}

}  // namespace

FASTREVERT_DEFUN("fastrevert--mod-wait", mod_wait, 1, 1,
                 "Wait up to SECONDS for the engine to have a result ready.\n"
                 "Return non-nil if one is ready (drain it with `fastrevert--mod-drain'),\n"
                 "nil when the time ran out, the engine is not running, or the user\n"
                 "quit; a quit is then signalled as this function returns.  The wait\n"
                 "happens here, not in Emacs's event loop: no timer or process filter\n"
                 "runs meanwhile, so callers keep SECONDS short.\n\n(fn SECONDS)") {
  std::chrono::nanoseconds timeout = env.to_duration(args[0]);
  return env.boolean(runtime.wait(timeout, [&env] { return env.quit_requested(); }));
}

FASTREVERT_DEFUN("fastrevert--mod-drain", mod_drain, 1, 1,
                 "Handle every result the engine has ready, in order.\n"
                 "Process output goes to the `fastrevert--deliver-*' functions; any other\n"
                 "result to HANDLER, with four arguments: KIND (a symbol), ID, CODE\n"
                 "(integers) and DATA (a unibyte string).  Return the number of results\n"
                 "handled.  Results are taken one at a time: a HANDLER that drains again\n"
                 "goes on with the next result.  If HANDLER exits non-locally, the results\n"
                 "after the one it was handling stay queued and the exit propagates.\n"
                 "Call it with `inhibit-quit' bound, as Emacs calls a process filter: a\n"
                 "quit then stops it between two pieces of output, none lost.\n\n"
                 "(fn HANDLER)") {
  // Checked before a result is taken: a HANDLER that cannot be called
  // would lose the one it was handed.
  if (!env.truthy(env.call("functionp", {args[0]}))) env.wrong_type("functionp", args[0]);
  std::size_t handled = drain_records(env, args[0]);
  // Emacs raises a pending exit and ignores the value.
  if (env.exit_pending()) return nullptr;
  return env.integer(static_cast<std::int64_t>(handled));
}

FASTREVERT_DEFUN("fastrevert--mod-wait-drain", mod_wait_drain, 2, 2,
                 "Handle the results the engine has ready, waiting up to SECONDS for one.\n"
                 "HANDLER is as for `fastrevert--mod-drain'.  Return the number handled:\n"
                 "0 when the time ran out, the engine is not running, or `quit-flag' is\n"
                 "set.  Call it with `inhibit-quit' bound: the wait ends at a quit, and\n"
                 "the quit is taken when the binding ends.  The wait happens here, not\n"
                 "in Emacs's event loop: no timer or process filter runs meanwhile, so\n"
                 "callers keep SECONDS short.  No wake byte is written while it waits.\n\n"
                 "(fn SECONDS HANDLER)") {
  std::chrono::nanoseconds timeout = env.to_duration(args[0]);
  if (!env.truthy(env.call("functionp", {args[1]}))) env.wrong_type("functionp", args[1]);
  emacs_value quit_flag = env.intern("quit-flag");
  auto quit_pending = [&env, quit_flag] {
    return env.truthy(env.call("symbol-value", {quit_flag}));
  };
  std::size_t handled = drain_records(env, args[1]);
  if (env.exit_pending()) return nullptr;
  if (handled > 0 || quit_pending()) return env.integer(static_cast<std::int64_t>(handled));
  std::shared_ptr<Engine> held = runtime.reference();
  if (!held) return env.integer(0);
  // What this wait finds is drained here: a wake byte for it would only
  // make Emacs's event loop drain nothing later.
  held->hold_wakes(true);
  try {
    // A quit sets quit-flag from Emacs's signal handler, `inhibit-quit'
    // or not: that ends the wait.
    bool ready = runtime.wait(timeout, quit_pending);
    if (ready) handled = drain_records(env, args[1]);
  } catch (...) {
    held->hold_wakes(false);
    throw;
  }
  held->hold_wakes(false);
  if (env.exit_pending()) return nullptr;
  return env.integer(static_cast<std::int64_t>(handled));
}

FASTREVERT_DEFUN("fastrevert--mod-hold-wakes", mod_hold_wakes, 1, 1,
                 "Hold the engine's wake bytes back while HOLD is non-nil.\n"
                 "Calls nest: each non-nil HOLD needs a nil one; the last release wakes\n"
                 "the pipe if results wait.  For a wait that drains the engine itself\n"
                 "while Emacs's event loop runs.  Do nothing when the engine is not running.\n\n"
                 "(fn HOLD)") {
  if (Engine* running = runtime.engine()) running->hold_wakes(env.truthy(args[0]));
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
  Engine* current = runtime.engine();
  if (current == nullptr) return env.nil();
  std::vector<emacs_value> plist;
  for (const StatsCounter& entry : kStatsCounters) {
    std::uint64_t count = (current->stats().*entry.counter).load(std::memory_order_relaxed);
    plist.push_back(env.intern((std::string(":") + entry.name).c_str()));
    plist.push_back(env.integer(static_cast<std::int64_t>(count)));
  }
  std::uint64_t waiting = 0;
  std::uint64_t overrun = 0;
  backlog_stats(waiting, overrun);
  plist.push_back(env.intern(":backlog-bytes"));
  plist.push_back(env.integer(static_cast<std::int64_t>(waiting)));
  plist.push_back(env.intern(":backlog-overrun"));
  plist.push_back(env.integer(static_cast<std::int64_t>(overrun)));
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
