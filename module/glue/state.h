// The engine as the glue sees it: one per Emacs, owned by the main thread.
#pragma once

#include <chrono>
#include <memory>
#include <optional>

#include "core/engine.h"
#include "core/handed_fds.h"
#include "glue/env.h"

namespace fastrevert::glue {

// The running engine; signals `fastrevert-not-running' if there is none.
Engine& engine(Env& env);

// The running engine, or nullptr.
Engine* engine_if_running() noexcept;

// The running engine, or null, for a caller that uses it across a call into
// Lisp or a wait: its reference keeps the engine alive (if stopped) until
// the caller is done.
std::shared_ptr<Engine> engine_reference() noexcept;

// Posts COMMAND to the engine; signals `fastrevert-not-running' if the engine
// is absent or stopping.
void post_or_signal(Env& env, Engine::Command command);

// The process glue's part in the engine's life (glue/process.cpp): attach
// after the engine starts (throws SystemError when it cannot), detach before
// it stops.
void processes_attach(Engine& engine);
void processes_detach() noexcept;

// The memfds handed to Lisp (glue/process.cpp): the drain lists each one as
// Lisp is given it, and the memfd primitives accept only those.
extern HandedFds& handed_fds;

// Serves the children that wait for the engine on this thread, for up to
// TIMEOUT or until results are ready for Lisp, whichever comes first (see
// glue/process.cpp).  Returns whether results are ready, or std::nullopt
// without waiting when no child waits.  Returns false when the user quits.
std::optional<bool> serve_children(Env& env, std::chrono::nanoseconds timeout);

}  // namespace fastrevert::glue
