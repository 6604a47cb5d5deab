// Translation shared by the call and process glue: a child's spawn
// arguments from Lisp values, and a spawn failure back as Lisp data.
#pragma once

#include <string>
#include <vector>

#include "core/child.h"
#include "core/errors.h"
#include "glue/env.h"

namespace fastrevert::glue {

// The strings of the Lisp vector VALUE, as bytes.
std::vector<std::string> string_vector(Env& env, emacs_value value);

// Fills the common part of SPEC from the arguments PROGRAM ARGV ENV CWD at
// ARGS (see `fastrevert--mod-call-process').
void fill_spec(Env& env, emacs_value* args, SpawnSpec& spec);

// The stdin redirection VALUE names: nil (/dev/null), t (a pipe), or a file
// name, which goes to FILE.
SpawnSpec::Stdin stdin_mode(Env& env, emacs_value value, std::string& file);

// The stderr redirection VALUE names: nil (/dev/null), t (with stdout),
// `pipe', or a file name, which goes to FILE.
SpawnSpec::Stderr stderr_mode(Env& env, emacs_value value, std::string& file);

// Spawns SPEC as the running Emacs would: when the exec itself fails, an
// Emacs that reports that failure (Emacs 30, which spawns with
// posix_spawn) gets the error, and one that forks (Emacs 28) a child that
// prints the failure and exits, as its own would (see spawn_or_stand_in).
// Lisp tells which kind of Emacs this is.
Child spawn_like_emacs(Env& env, const SpawnSpec& spec);

// (:error CONDITION FUNCTION STRERROR PATH) for Lisp to turn into the signal
// the stock primitive would raise; PATH and STRERROR are unibyte (locale
// bytes), for Lisp to decode.
emacs_value error_data(Env& env, const SystemError& error);

}  // namespace fastrevert::glue
