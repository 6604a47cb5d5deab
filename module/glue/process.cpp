// The asynchronous process glue: `fastrevert-make-process' (children run by
// the engine's process table, and served while Lisp waits: core/handoff.h),
// the memfds their output reaches Lisp through, and signal names and numbers.
// Children are spawned here, so that a spawn failure reaches Lisp at once.
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "core/child.h"
#include "core/engine.h"
#include "core/framing.h"
#include "core/handed_fds.h"
#include "core/pipe.h"
#include "core/process_table.h"
#include "glue/child_args.h"
#include "glue/env.h"
#include "glue/state.h"

using namespace fastrevert;
using namespace fastrevert::glue;

namespace {

Framing framing_arg(Env& env, emacs_value value) {
  if (!env.truthy(value)) return Framing::none;
  if (env.eq(value, env.intern("lines"))) return Framing::lines;
  if (env.eq(value, env.intern("lsp"))) return Framing::lsp;
  env.wrong_type("fastrevert-framing-p", value);
}

// FD as a descriptor number, or a signal unless Lisp holds it.
int handed_fd_arg(Env& env, emacs_value value) {
  std::int64_t fd = env.to_integer(value);
  if (fd < 0 || fd > INT32_MAX || !runtime.handed_fds().contains(static_cast<int>(fd))) {
    env.wrong_type("fastrevert-memfd-p", value);
  }
  return static_cast<int>(fd);
}

}  // namespace

FASTREVERT_DEFUN("fastrevert--mod-memfd-read", mod_memfd_read, 3, 3,
                 "Return bytes [BEG, END) of the memfd FD as a unibyte string.\n"
                 "FD must be a memfd the engine handed over (see\n"
                 "`fastrevert--mod-process-start').  Bytes past the end of the file are\n"
                 "missing from the string.\n\n"
                 "(fn FD BEG END)") {
  int fd = handed_fd_arg(env, args[0]);
  std::int64_t beg = env.to_integer(args[1]);
  std::int64_t end = env.to_integer(args[2]);
  if (beg < 0 || end < beg) env.signal("args-out-of-range", env.list({args[1], args[2]}));
  std::string bytes = read_at(fd, static_cast<std::uint64_t>(beg), static_cast<std::uint64_t>(end));
  return env.unibyte(bytes);
}

FASTREVERT_DEFUN("fastrevert--mod-process-start", mod_process_start, 10, 10,
                 "Spawn a child for the engine to run as process ID; return its pid.\n"
                 "PROGRAM, ARGV, ENV and CWD are as for `fastrevert--mod-call-process'.\n"
                 "STDIN is t (a pipe), nil (/dev/null) or an encoded file name.\n"
                 "STDOUT is t (a pipe), nil (/dev/null) or `memfd': a pipe whose bytes\n"
                 "past the first `fastrevert--memfd-threshold' go to a memfd, for\n"
                 "`fastrevert--mod-memfd-read' and `fastrevert--mod-memfd-release' (see\n"
                 "`fastrevert--output-stdout-memfd').  STDERR is t (with stdout),\n"
                 "`pipe' (a pipe of its own), nil (/dev/null) or an encoded file name.\n"
                 "FRAMING is nil, `lines' or `lsp', for stdout.  READ-SIZE is the first\n"
                 "read size.  A spawn failure returns (:error CONDITION FUNCTION\n"
                 "STRERROR PATH).  Output and exit arrive as engine results.\n\n"
                 "(fn ID PROGRAM ARGV ENV CWD STDIN STDOUT STDERR FRAMING READ-SIZE)") {
  std::int64_t id = env.to_integer(args[0]);
  SpawnSpec spec;
  fill_spec(env, args + 1, spec);
  spec.stdout_mode = !env.truthy(args[6]) ? SpawnSpec::Stdout::null : SpawnSpec::Stdout::pipe;
  ProcessTable::Options options;
  options.framing = framing_arg(env, args[8]);
  std::int64_t read_size = env.to_integer(args[9]);
  options.initial_read_size = read_size > 0 ? static_cast<std::size_t>(read_size) : 4096;
  options.signal_process_group = true;
  options.stdout_to_memfd = env.eq(args[6], env.intern("memfd"));
  options.memfd_threshold = kMemfdThreshold;

  // Checked before spawning, so that no child is started that nobody runs.
  check_posted(env, runtime.can_post());
  emacs_value failure = nullptr;
  std::optional<Child> child = spawn_like_emacs(env, spec, failure);
  if (!child) return failure;
  pid_t pid = child->pid;
  check_posted(env, runtime.adopt(static_cast<std::uint64_t>(id),
                                  std::make_unique<ProcessHandover>(std::move(*child), options)));
  return env.integer(pid);
}

FASTREVERT_DEFUN("fastrevert--mod-memfd-release", mod_memfd_release, 3, 3,
                 "Give back the memory of bytes [0, END) of the memfd FD; with CLOSE, close FD.\n"
                 "FD must be a memfd the engine handed over.  The file keeps its size,\n"
                 "so later offsets stay valid.  After a call with CLOSE non-nil, FD must\n"
                 "not be used.\n\n"
                 "(fn FD END CLOSE)") {
  int descriptor = handed_fd_arg(env, args[0]);
  std::int64_t end = env.to_integer(args[1]);
  if (end < 0) env.signal("args-out-of-range", env.list({args[1]}));
  runtime.release(descriptor, static_cast<off_t>(end), env.truthy(args[2]));
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-send", mod_process_send, 2, 2,
                 "Queue the unibyte STRING for the stdin of engine process ID.\n"
                 "Never blocks: what the pipe does not take now is written later.\n\n"
                 "(fn ID STRING)") {
  auto id = static_cast<std::uint64_t>(env.to_integer(args[0]));
  std::string data = env.to_bytes(args[1]);
  check_posted(env, runtime.post_for_process(id, [id, data = std::move(data)](Engine& e) mutable {
    if (!e.service<ProcessTable>().write_stdin(id, std::move(data))) {
      e.emit(Record{RecordKind::notice, id, 0,
                    "fastrevert: process " + std::to_string(id) + " no longer reads its input"});
    }
  }));
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-eof", mod_process_eof, 1, 1,
                 "Close the stdin of engine process ID once its queued input is written.\n\n"
                 "(fn ID)") {
  auto id = static_cast<std::uint64_t>(env.to_integer(args[0]));
  check_posted(env, runtime.post_for_process(
                        id, [id](Engine& e) { e.service<ProcessTable>().close_stdin(id); }));
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-signal", mod_process_signal, 2, 2,
                 "Send signal number SIGNAL to engine process ID (its process group).\n\n"
                 "(fn ID SIGNAL)") {
  auto id = static_cast<std::uint64_t>(env.to_integer(args[0]));
  std::int64_t number = env.to_integer(args[1]);
  if (number < 0 || number > 64) env.signal("args-out-of-range", env.list({args[1]}));
  check_posted(env, runtime.post_for_process(id, [id, number](Engine& e) {
    e.service<ProcessTable>().signal(id, static_cast<int>(number));
  }));
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-process-remove", mod_process_remove, 1, 1,
                 "Forget engine process ID: kill it if it runs and reap it in the background.\n"
                 "No further result arrives for it.  Do nothing if the engine is stopped.\n\n"
                 "(fn ID)") {
  auto id = static_cast<std::uint64_t>(env.to_integer(args[0]));
  runtime.post_for_process(id, [id](Engine& e) { e.service<ProcessTable>().remove(id); });
  return env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-signal-number", mod_signal_number, 1, 1,
                 "Return the number of the signal NAME (a string such as \"SIGINT\",\n"
                 "\"int\" or \"KILL\"), or nil if there is no such signal.\n\n"
                 "(fn NAME)") {
  std::optional<int> number = signal_number(env.to_bytes(args[0]));
  return number ? env.integer(*number) : env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-strsignal", mod_strsignal, 1, 1,
                 "Return the C library's description of signal number SIGNAL, unibyte.\n\n"
                 "(fn SIGNAL)") {
  std::int64_t number = env.to_integer(args[0]);
  const char* description =
      number > 0 && number < 65 ? strsignal(static_cast<int>(number)) : nullptr;
  return description ? env.unibyte(description) : env.nil();
}
