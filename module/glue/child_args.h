// Translation shared by the call and process glue: a child's spawn
// arguments from Lisp values, and a spawn failure back as Lisp data.
#pragma once

#include <optional>

#include "core/child.h"
#include "glue/env.h"

namespace fastrevert::glue {

// Fills SPEC from the arguments PROGRAM ARGV ENV CWD STDIN STDOUT STDERR at
// ARGS (see `fastrevert--mod-process-start'), all but STDOUT, which is the
// caller's.  STDIN is nil (/dev/null), t (a pipe) or a file name; STDERR is
// nil (/dev/null), t (with stdout), `pipe' or a file name.
void fill_spec(Env& env, emacs_value* args, SpawnSpec& spec);

// Spawns SPEC as the running Emacs would when the exec itself fails (see
// spawn_or_stand_in); Lisp tells which kind of Emacs this is.  When the
// spawn fails, returns std::nullopt and sets FAILURE to (:error CONDITION
// FUNCTION STRERROR PATH), for Lisp to turn into the signal the stock
// primitive would raise (PATH and STRERROR unibyte: locale bytes).
std::optional<Child> spawn_like_emacs(Env& env, const SpawnSpec& spec, emacs_value& failure);

}  // namespace fastrevert::glue
