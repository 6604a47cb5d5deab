// The synchronous process glue: `fastrevert-call-process' (run by core/call.h)
// and the program search it relies on.  The policy (codings, buffers, which
// error to signal) is Lisp's: it passes names encoded, and failures come back
// as data for it to signal what the stock primitives signal.
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/call.h"
#include "core/child.h"
#include "core/engine.h"
#include "core/errors.h"
#include "glue/child_args.h"
#include "glue/env.h"
#include "glue/state.h"

using namespace fastrevert;
using namespace fastrevert::glue;

FASTREVERT_DEFUN("fastrevert--mod-call-process", mod_call_process, 9, 9,
                 "Run PROGRAM synchronously and return how it ended.\n"
                 "PROGRAM is the encoded absolute file name, ARGV a vector of encoded\n"
                 "arguments (argv[0] included), ENV a list of strings, each holding\n"
                 "one or more \"NAME=VALUE\" entries separated by NUL bytes, in\n"
                 "`process-environment' order (the first definition of a name wins),\n"
                 "CWD the encoded working directory.\n"
                 "INFILE is nil (/dev/null) or an encoded file name for stdin.\n"
                 "STDOUT is nil (/dev/null), an encoded file name, or a function\n"
                 "INSERTER, called with the output in order: output of up to 16 KiB as\n"
                 "(INSERTER BYTES nil nil) once the child has closed it, BYTES a unibyte\n"
                 "string; longer output as (INSERTER FD BEG END) for each byte range\n"
                 "[BEG, END) of a memfd FD.  With CHUNK positive, each time at least\n"
                 "CHUNK bytes ending in a newline have arrived they come while the child\n"
                 "runs; the rest at the end.  A longer output waiting in a pipe with no\n"
                 "writer left may come as (INSERTER FD nil nil), for the inserter to\n"
                 "read the pipe FD straight into the buffer to end of file; it returns\n"
                 "the number of bytes it took.  INSERTER is called as this is, with\n"
                 "`inhibit-quit' bound to t: the call takes each C-g from `quit-flag',\n"
                 "so that every part is inserted whole,\n"
                 "and no part is longer than a few MiB.  On a quit,\n"
                 "all that was read is handed over, up to the last whole character as\n"
                 "CUT says where one ends: `utf-8', `bytes' (after any byte but a CR)\n"
                 "or nil (after a byte below 0x80 but a digit or a CR).\n"
                 "STDERR is nil (/dev/null),\n"
                 "t (with stdout) or an encoded file name.\n"
                 "Return the exit code of a child that exited, else (HOW CODE): HOW\n"
                 "says how the child ended, as the data of a `process-exit' result\n"
                 "does, and CODE is its signal number (see `fastrevert--exit-exited').\n"
                 "A spawn failure returns\n"
                 "(:error CONDITION FUNCTION STRERROR PATH).  A quit kills the child\n"
                 "(SIGINT, then SIGKILL at a second quit or after a second), reaps it\n"
                 "and signals `quit'; a `while-no-input' or `kill-emacs' in `quit-flag'\n"
                 "is put back there instead.\n\n"
                 "(fn PROGRAM ARGV ENV CWD INFILE STDOUT STDERR CHUNK CUT)") {
  SpawnSpec spec;
  fill_spec(env, args, spec);
  if (spec.stdin_mode == SpawnSpec::Stdin::pipe) env.wrong_type("stringp", args[4]);
  if (spec.stderr_mode == SpawnSpec::Stderr::pipe) env.wrong_type("stringp", args[6]);
  emacs_value out = args[5];
  spec.stdout_mode = !env.truthy(out)     ? SpawnSpec::Stdout::null
                     : env.is_string(out) ? SpawnSpec::Stdout::file
                                          : SpawnSpec::Stdout::pipe;
  if (spec.stdout_mode == SpawnSpec::Stdout::file) spec.stdout_file = env.to_bytes(out);
  emacs_value inserter = spec.stdout_mode == SpawnSpec::Stdout::pipe ? out : nullptr;
  std::int64_t chunk = env.to_integer(args[7]);
  OutputCut cut = env.eq(args[8], env.intern("utf-8"))   ? OutputCut::utf8
                  : env.eq(args[8], env.intern("bytes")) ? OutputCut::bytes
                                                         : OutputCut::ascii;

  emacs_value failure = nullptr;
  std::optional<Child> child = spawn_like_emacs(env, spec, failure);
  if (!child) return failure;

  CallHooks hooks;
  // Lisp calls this with `inhibit-quit' bound, so that no quit can stop an
  // insert half-way (Emacs keeps nothing of such an insert) or fall on a
  // call into Lisp before it starts.  A quit is seen here instead, in
  // `quit-flag', and taken: each C-g counts once.  What it was is kept, so
  // that it is raised as Emacs would have raised it once the child is
  // gone and the output read is in the buffer.
  emacs_value quit_flag = env.intern("quit-flag");
  emacs_value quit_value = nullptr;
  hooks.should_quit = [&env, quit_flag, &quit_value] {
    emacs_value flag = env.call("symbol-value", {quit_flag});
    if (!env.truthy(flag)) return false;
    env.call("set", {quit_flag, env.nil()});
    if (!quit_value) quit_value = flag;
    return true;
  };
  if (inserter) {
    hooks.insert_bytes = [&env, inserter](std::string_view bytes) {
      env.funcall(inserter, {env.unibyte(bytes), env.nil(), env.nil()});
    };
    hooks.insert_range = [&env, inserter](int memfd, std::uint64_t from, std::uint64_t to) {
      env.funcall(inserter, {env.integer(memfd), env.integer(static_cast<std::int64_t>(from)),
                             env.integer(static_cast<std::int64_t>(to))});
    };
    hooks.insert_pipe = [&env, inserter](int pipe_fd) -> std::uint64_t {
      emacs_value read = env.funcall(inserter, {env.integer(pipe_fd), env.nil(), env.nil()});
      std::int64_t bytes = env.is_a(read, "integer") ? env.to_integer(read) : 0;
      return bytes > 0 ? static_cast<std::uint64_t>(bytes) : 0;
    };
  }
  hooks.cut = cut;
  // Counted in `fastrevert-stats' too; held, since the inserter may stop it.
  std::shared_ptr<Engine> counting = runtime.reference();
  if (counting) hooks.stats = &counting->stats();
  CallResult result = run_call(*child, static_cast<std::uint64_t>(chunk > 0 ? chunk : 0), hooks);
  if (result.quit && quit_value) {
    // A C-g quits here.  Anything else in `quit-flag' (a `while-no-input'
    // tag, `kill-emacs') goes back there, for Emacs to act on as soon as
    // the caller's `inhibit-quit' is unbound.
    if (env.eq(quit_value, env.t())) env.signal("quit", env.nil());
    env.call("set", {quit_flag, quit_value});
  }
  ExitStatus status = exit_status(result.wait_status);
  // The common end costs no list and no string.
  if (status.how == ExitStatus::How::exited) return env.integer(status.code);
  return env.list({env.unibyte(exit_how_name(status)), env.integer(status.code)});
}

FASTREVERT_DEFUN("fastrevert--mod-first-executable", mod_first_executable, 1, 1,
                 "Return the index of the first of CANDIDATES that can be executed, or nil.\n"
                 "CANDIDATES is a unibyte string of encoded file names in search order,\n"
                 "each ended by a NUL byte; an empty name is never executable.  The\n"
                 "one found is a file the effective user may execute that is not a\n"
                 "directory, as the program search of `call-process' decides.\n\n"
                 "(fn CANDIDATES)") {
  std::optional<std::size_t> found = first_executable(env.to_bytes(args[0]));
  return found ? env.integer(static_cast<std::int64_t>(*found)) : env.nil();
}

FASTREVERT_DEFUN("fastrevert--mod-accessible-directory-p", mod_accessible_directory_p, 1, 1,
                 "Return non-nil if DIRECTORY, an encoded local file name, can be entered.\n"
                 "That is what `file-accessible-directory-p' decides when no file name\n"
                 "handler is involved: DIRECTORY/. exists for the effective user.\n\n"
                 "(fn DIRECTORY)") {
  return env.boolean(accessible_directory(env.to_bytes(args[0])));
}

FASTREVERT_DEFUN("fastrevert--mod-strerror", mod_strerror, 1, 1,
                 "Return the C library's text for the error named NAME, unibyte.\n"
                 "NAME is one of the symbols `ENOENT', `EACCES', `EISDIR', `ENOTDIR',\n"
                 "`ENAMETOOLONG'.\n\n"
                 "(fn NAME)") {
  std::optional<int> number;
  if (env.truthy(env.call("symbolp", {args[0]}))) {
    number = file_errno_named(env.to_bytes(env.call("symbol-name", {args[0]})));
  }
  if (number) return env.unibyte(std::strerror(*number));
  env.wrong_type("symbolp", args[0]);
}
