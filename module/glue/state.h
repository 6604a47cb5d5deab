// The engine as the glue sees it: one per Emacs, owned by the main thread.
#pragma once

#include "core/engine.h"
#include "glue/env.h"

namespace fastrevert::glue {

// The running engine; signals `fastrevert-not-running' if there is none.
Engine& engine(Env& env);

// The running engine, or nullptr.
Engine* engine_if_running() noexcept;

// Posts COMMAND to the engine; signals `fastrevert-not-running' if the engine
// is absent or stopping.
void post_or_signal(Env& env, Engine::Command command);

}  // namespace fastrevert::glue
