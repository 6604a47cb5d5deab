// The engine as the glue sees it: the module's one Runtime (core/runtime.h).
#pragma once

#include "core/engine.h"
#include "core/runtime.h"
#include "glue/env.h"

namespace fastrevert::glue {

// Owned by the main thread for the life of Emacs, and never destroyed.
extern Runtime& runtime;

// Signals `fastrevert-not-running' unless POSTED is Runtime::Posted::yes.
void check_posted(Env& env, Runtime::Posted posted);

// Posts COMMAND to the engine; signals `fastrevert-not-running' if the engine
// is absent or stopping.
void post_or_signal(Env& env, Engine::Command command);

}  // namespace fastrevert::glue
