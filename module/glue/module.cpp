// Module entry point and the engine's Lisp interface: start, stop, drain,
// stats, and the round-trip and error hooks that the tests use.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "core/engine.h"
#include "core/errors.h"
#include "glue/env.h"
#include "glue/state.h"

extern "C" {
__attribute__((visibility("default"))) int plugin_is_GPL_compatible;
__attribute__((visibility("default"))) int emacs_module_init(struct emacs_runtime* runtime) noexcept;
}

namespace fastrevert::glue {

namespace {

// The engine lives here, owned by the main thread: every function in this
// file runs on Emacs's main thread, so no lock is needed around the pointer.
std::unique_ptr<Engine> running_engine;

const char* record_kind_name(RecordKind kind) {
  switch (kind) {
    case RecordKind::echo: return "echo";
    case RecordKind::notice: return "notice";
    case RecordKind::file_changed: return "file-changed";
    case RecordKind::file_watched: return "file-watched";
    case RecordKind::process_output: return "process-output";
    case RecordKind::process_exit: return "process-exit";
  }
  return "unknown";
}

}  // namespace

Engine& engine(Env& env) {
  if (!running_engine) {
    env.signal("fastrevert-not-running", env.list({env.string("The fastrevert engine is not running")}));
  }
  return *running_engine;
}

Engine* engine_if_running() noexcept { return running_engine.get(); }

void post_or_signal(Env& env, Engine::Command command) {
  if (!engine(env).post(std::move(command))) {
    env.signal("fastrevert-not-running", env.list({env.string("The fastrevert engine is stopping")}));
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
                 "PIPE-PROCESS must be a pipe process made by `make-pipe-process';\n"
                 "its filter should call `fastrevert--mod-drain'.\n\n(fn PIPE-PROCESS)") {
  if (running_engine) {
    env.signal("fastrevert-error", env.list({env.string("The fastrevert engine is already running")}));
  }
  int wake_fd = env.raw()->open_channel(env.raw(), args[0]);
  env.check();
  running_engine = std::make_unique<Engine>(wake_fd);
  try {
    processes_attach(*running_engine);
  } catch (...) {
    running_engine.reset();
    throw;
  }
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
  if (nargs > 0 && env.truthy(args[0])) timeout = env.to_duration(args[0]);
  processes_detach();
  if (!running_engine->stop_within(timeout)) {
    // The detached thread still uses the engine, so it must outlive this
    // call; it is left to the end of the process.
    running_engine.release();
    return env.intern("abandoned");
  }
  running_engine.reset();
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
  std::chrono::milliseconds timeout = env.to_duration(args[0]);
  Engine* current = engine_if_running();
  if (current == nullptr) return env.nil();
  // Children not yet adopted by the engine are served right here.
  if (std::optional<bool> served = serve_children(env, timeout)) return env.boolean(*served);
  // Quit is checked between slices, so C-g is seen within one.
  constexpr std::chrono::milliseconds kSlice(10);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (current->wait_for_records(std::clamp(left, std::chrono::milliseconds(0), kSlice))) {
      return env.t();
    }
    if (left <= kSlice || env.quit_requested()) return env.nil();
  }
}

FASTREVERT_DEFUN("fastrevert--mod-drain", mod_drain, 1, 1,
                 "Call HANDLER on every result the engine has ready, in order.\n"
                 "HANDLER gets four arguments: KIND (a symbol), ID, CODE (integers)\n"
                 "and DATA (a unibyte string).  Return the number of results handled.\n"
                 "If HANDLER exits non-locally, the results after the one it was\n"
                 "handling stay queued and the exit propagates.\n\n(fn HANDLER)") {
  Engine* current = engine_if_running();
  if (current == nullptr) return env.integer(0);
  auto start = std::chrono::steady_clock::now();
  std::deque<Record> records = current->drain();
  std::int64_t handled = 0;
  try {
    while (!records.empty()) {
      Record record = std::move(records.front());
      records.pop_front();
      // DATA goes as unibyte bytes: paths and output need not be valid
      // UTF-8, and make_string would refuse them.
      env.funcall(args[0], {env.intern(record_kind_name(record.kind)),
                            env.integer(static_cast<std::int64_t>(record.id)),
                            env.integer(record.code), env.unibyte(record.data)});
      ++handled;
    }
  } catch (const PendingExit&) {
    current->unread(std::move(records));
    throw;
  }
  if (handled > 0) {
    auto spent = std::chrono::steady_clock::now() - start;
    current->stats().drain_ns.fetch_add(
        static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(spent).count()),
        std::memory_order_relaxed);
  }
  return env.integer(handled);
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
  const Stats& stats = current->stats();
  auto count = [&env](const std::atomic<std::uint64_t>& value) {
    return env.integer(static_cast<std::int64_t>(value.load(std::memory_order_relaxed)));
  };
  return env.list({env.intern(":watches"), count(stats.watches),
                   env.intern(":polled-files"), count(stats.polled_files),
                   env.intern(":kernel-events"), count(stats.kernel_events),
                   env.intern(":events-dropped-natively"), count(stats.events_dropped_natively),
                   env.intern(":batches"), count(stats.batches),
                   env.intern(":overflows"), count(stats.overflows),
                   env.intern(":processes"), count(stats.processes),
                   env.intern(":bytes-read"), count(stats.bytes_read),
                   env.intern(":commands"), count(stats.commands),
                   env.intern(":records"), count(stats.records),
                   env.intern(":wakes"), count(stats.wakes),
                   env.intern(":drains"), count(stats.drains),
                   env.intern(":drain-ns"), count(stats.drain_ns)});
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
    const char text[] = "fastrevert needs the Emacs 28 module API (open_channel); this Emacs is too old";
    emacs_value message = raw->make_string(raw, text, sizeof text - 1);
    raw->funcall(raw, raw->intern(raw, "message"), 1, &message);
    return 2;
  }
  Env env(raw);
  try {
    emacs_value defalias = env.intern("defalias");
    for (const FunctionSpec& spec : function_registry()) {
      emacs_value function =
          raw->make_function(raw, spec.min_arity, spec.max_arity, spec.entry, spec.docstring, nullptr);
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
