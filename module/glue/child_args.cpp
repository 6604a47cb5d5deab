#include "glue/child_args.h"

#include <sys/resource.h>
#include <sys/select.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "core/errors.h"

namespace fastrevert::glue {

namespace {

// The strings of the Lisp list VALUE, as bytes; it ends at its first
// non-string.
std::vector<std::string> string_list(Env& env, emacs_value value) {
  emacs_value car = env.intern("car-safe");
  emacs_value cdr = env.intern("cdr-safe");
  std::vector<std::string> strings;
  for (emacs_value item = env.funcall(car, {value}); env.is_string(item);
       item = env.funcall(car, {value})) {
    strings.push_back(env.to_bytes(item));
    value = env.funcall(cdr, {value});
  }
  return strings;
}

// The strings of the Lisp vector VALUE, as bytes.
std::vector<std::string> string_vector(Env& env, emacs_value value) {
  if (!env.is_a(value, "vector")) env.wrong_type("vectorp", value);
  emacs_env* raw = env.raw();
  std::ptrdiff_t size = raw->vec_size(raw, value);
  env.check();
  std::vector<std::string> strings;
  strings.reserve(static_cast<std::size_t>(size));
  for (std::ptrdiff_t i = 0; i < size; ++i) {
    emacs_value item = raw->vec_get(raw, value, i);
    env.check();
    strings.push_back(env.to_bytes(item));
  }
  return strings;
}

// The limit on open files a child of stock Emacs gets, where it is not this
// process's own: Emacs lowers its soft limit to FD_SETSIZE when it was
// higher, and may give its children back the one it started with.  Lisp
// asks stock which (`fastrevert--process-child-file-limit'), once; with
// any other soft limit, Emacs changed nothing.
std::optional<FileLimit> child_file_limit(Env& env) {
  struct rlimit own;
  if (getrlimit(RLIMIT_NOFILE, &own) != 0 || own.rlim_cur != FD_SETSIZE ||
      own.rlim_max <= own.rlim_cur) {
    return std::nullopt;
  }
  emacs_value ask = env.intern("fastrevert--process-child-file-limit");
  if (!env.truthy(env.call("fboundp", {ask}))) return std::nullopt;
  emacs_value answer = env.funcall(ask, {});
  rlim_t soft;
  if (env.is_a(answer, "integer")) {
    std::int64_t value = env.to_integer(answer);
    if (value <= 0) return std::nullopt;
    soft = static_cast<rlim_t>(value);
  } else if (env.eq(answer, env.intern("unlimited"))) {
    soft = RLIM_INFINITY;
  } else {
    return std::nullopt;
  }
  if (soft == own.rlim_cur || soft > own.rlim_max) return std::nullopt;
  return FileLimit{static_cast<std::uint64_t>(soft), static_cast<std::uint64_t>(own.rlim_max)};
}

}  // namespace

void fill_spec(Env& env, emacs_value* args, SpawnSpec& spec) {
  spec.program = env.to_bytes(args[0]);
  spec.argv = string_vector(env, args[1]);
  // Lisp keeps the blocks of a run of children in the same environment,
  // and the cache the environment made from them.
  static EnvironmentCache environments;
  spec.env = environments.get(string_list(env, args[2]));
  spec.cwd = env.to_bytes(args[3]);
  emacs_value in = args[4];
  spec.stdin_mode = !env.truthy(in)       ? SpawnSpec::Stdin::null
                    : env.eq(in, env.t()) ? SpawnSpec::Stdin::pipe
                                          : SpawnSpec::Stdin::file;
  if (spec.stdin_mode == SpawnSpec::Stdin::file) spec.stdin_file = env.to_bytes(in);
  emacs_value err = args[6];
  spec.stderr_mode = !env.truthy(err)                  ? SpawnSpec::Stderr::null
                     : env.eq(err, env.t())            ? SpawnSpec::Stderr::merge
                     : env.eq(err, env.intern("pipe")) ? SpawnSpec::Stderr::pipe
                                                       : SpawnSpec::Stderr::file;
  if (spec.stderr_mode == SpawnSpec::Stderr::file) spec.stderr_file = env.to_bytes(err);
  // As Emacs's own children do: a quit or a signal reaches everything the
  // child started (a shell's pipeline too), and job control stays Emacs's.
  spec.new_session = true;
  spec.file_limit = child_file_limit(env);
}

std::optional<Child> spawn_like_emacs(Env& env, const SpawnSpec& spec, emacs_value& failure) {
  try {
    return spawn_or_stand_in(spec, [&env]() -> std::optional<std::string> {
      emacs_value ask = env.intern("fastrevert--process-exec-failure-signals-p");
      if (env.truthy(env.call("fboundp", {ask})) && env.truthy(env.funcall(ask, {}))) {
        return std::nullopt;
      }
      emacs_value invoked_as =
          env.call("car-safe", {env.call("symbol-value", {env.intern("command-line-args")})});
      return env.is_string(invoked_as) ? env.to_bytes(invoked_as) : "emacs";
    });
  } catch (const SystemError& error) {
    int code = error.code().value();
    failure = env.list({env.intern(":error"), env.intern(file_error_condition(code)),
                        env.unibyte(error.function()), env.unibyte(std::strerror(code)),
                        env.unibyte(error.path())});
    return std::nullopt;
  }
}

}  // namespace fastrevert::glue
