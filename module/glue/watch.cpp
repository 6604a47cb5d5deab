// The watcher's Lisp interface: register and forget files, configure the
// intervals, and the fault hooks the tests use.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/duration.h"
#include "core/engine.h"
#include "core/watch_backend.h"
#include "core/watch_registry.h"
#include "core/watcher.h"
#include "glue/env.h"
#include "glue/state.h"

using namespace fastrevert;
using namespace fastrevert::glue;

namespace {

// A watch id: Lisp's are natural numbers, the watcher's own are beyond them.
std::uint64_t watch_id(Env& env, emacs_value id) {
  std::int64_t value = env.to_integer(id);
  if (value < 0) env.wrong_type("natnump", id);
  return static_cast<std::uint64_t>(value);
}

WatchMode watch_mode(Env& env, emacs_value mode) {
  if (env.eq(mode, env.intern("notify"))) return WatchMode::notify;
  if (env.eq(mode, env.intern("poll"))) return WatchMode::poll;
  env.wrong_type("fastrevert-watch-mode-p", mode);
}

}  // namespace

FASTREVERT_DEFUN("fastrevert--mod-watch-add", mod_watch_add, 3, 4,
                 "Watch FILE under ID, by MODE: `notify' or `poll'.\n"
                 "FILE is an absolute file name, already encoded as a unibyte string.\n"
                 "A change is reported as a `file-changed' result for ID.  Non-nil\n"
                 "CONTENTS means FILE is a directory whose entries matter, as for Dired.\n\n"
                 "(fn ID FILE MODE &optional CONTENTS)") {
  std::uint64_t id = watch_id(env, args[0]);
  std::string path = env.to_bytes(args[1]);
  WatchMode mode = watch_mode(env, args[2]);
  bool contents = nargs > 3 && env.truthy(args[3]);
  post_or_signal(env, [id, path = std::move(path), mode, contents](Engine& e) {
    e.service<Watcher>().add(id, path, mode, contents);
  });
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-watch-remove", mod_watch_remove, 1, 1,
                 "Stop watching the file registered under ID.\n\n(fn ID)") {
  std::uint64_t id = watch_id(env, args[0]);
  runtime.post([id](Engine& e) { e.service<Watcher>().remove(id); });
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-watch-configure", mod_watch_configure, 3, 3,
                 "Set the watcher's POLL-INTERVAL and SETTLE-DELAY, both in seconds.\n"
                 "Non-nil SAFETY-POLL means files with a kernel watch are polled too.\n\n"
                 "(fn POLL-INTERVAL SETTLE-DELAY SAFETY-POLL)") {
  auto poll_interval = ceil_milliseconds(env.to_duration(args[0]));
  auto settle_delay = ceil_milliseconds(env.to_duration(args[1]));
  bool safety_poll = env.truthy(args[2]);
  post_or_signal(env, [poll_interval, settle_delay, safety_poll](Engine& e) {
    Watcher& watcher = e.service<Watcher>();
    watcher.set_poll_interval(std::max(poll_interval, std::chrono::milliseconds(1)));
    watcher.set_settle_delay(settle_delay);
    watcher.set_poll_notified(safety_poll);
  });
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-watch-hold-limit", mod_watch_hold_limit, 1, 1,
                 "Hold a repository's changes at most LIMIT seconds while it is busy.\n"
                 "A Git index.lock, rebase or sequencer state, or a Mercurial wlock\n"
                 "means busy; zero holds nothing.\n\n(fn LIMIT)") {
  auto limit = ceil_milliseconds(env.to_duration(args[0]));
  post_or_signal(env, [limit](Engine& e) { e.service<Watcher>().set_hold_limit(limit); });
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-watch-vc-info", mod_watch_vc_info, 1, 1,
                 "Watch each repository's index too when WITH-INDEX is non-nil.\n"
                 "HEAD and the branch it names (Mercurial: the branch and bookmarks)\n"
                 "are always watched in every repository holding a watched file; a\n"
                 "change to one is reported with a `vc-changed' result for each id\n"
                 "of its files.  This adds the index (Mercurial: the dirstate), as\n"
                 "`auto-revert-check-vc-info' asks.\n\n(fn WITH-INDEX)") {
  bool with_index = env.truthy(args[0]);
  post_or_signal(env,
                 [with_index](Engine& e) { e.service<Watcher>().set_watch_index(with_index); });
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-watch-visible", mod_watch_visible, 1, 1,
                 "Have the files watched under IDS, a list, polled more often.\n"
                 "Where a directory watch sees no write to the files in it (kqueue),\n"
                 "the engine polls the watched files; those of IDS, the buffers shown\n"
                 "in a window, every half second.  IDS replaces the earlier list.\n\n"
                 "(fn IDS)") {
  std::vector<std::uint64_t> ids;
  for (emacs_value rest = args[0]; env.truthy(rest); rest = env.call("cdr", {rest})) {
    ids.push_back(watch_id(env, env.call("car", {rest})));
  }
  post_or_signal(env, [ids](Engine& e) { e.service<Watcher>().set_visible(ids); });
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-watch-backend", mod_watch_backend, 0, 0,
                 "Return how the engine watches directories, as a plist.\n"
                 "`:name' is \"inotify\" or \"libuv\"; `:sees-file-writes' is nil where\n"
                 "a directory watch sees no write to the files in it (kqueue), whose\n"
                 "watched files the engine then polls.") {
  WatchBackendTraits traits = default_watch_backend_traits();
  return env.list({env.intern(":name"), env.string(traits.name), env.intern(":sees-file-writes"),
                   env.boolean(traits.sees_file_writes)});
}

FASTREVERT_DEFUN("fastrevert--mod-test-watch-fault", mod_test_watch_fault, 2, 2,
                 "Inject the watcher fault KIND with VALUE, for tests.\n"
                 "KIND is `add-watch-errno' or `init-errno' (VALUE an errno number,\n"
                 "0 to clear), `stat-delay-ms' (VALUE milliseconds), or `overflow'\n"
                 "(VALUE ignored: behave as if the kernel queue overflowed).\n\n"
                 "(fn KIND VALUE)") {
  if (env.eq(args[0], env.intern("overflow"))) {
    post_or_signal(env, [](Engine& e) { e.service<Watcher>().inject_overflow(); });
    return env.nil();
  }
  auto value = static_cast<int>(env.to_integer(args[1]));
  std::atomic<int>* fault = nullptr;
  if (env.truthy(env.call("symbolp", {args[0]}))) {
    fault = watcher_test_hooks().fault(env.to_bytes(env.call("symbol-name", {args[0]})));
  }
  if (!fault) env.wrong_type("fastrevert-watch-fault-p", args[0]);
  fault->store(value, std::memory_order_relaxed);
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-test-delayed-stats", mod_test_delayed_stats, 0, 0,
                 "Return how many stats delayed by `stat-delay-ms' have begun, for tests.") {
  return env.integer(watcher_test_hooks().delayed_stats_started.load(std::memory_order_relaxed));
}
