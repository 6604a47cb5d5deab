// The engine as the glue sees it: one per Emacs, owned by the main thread.
#pragma once

#include <chrono>
#include <deque>
#include <memory>
#include <optional>

#include "core/engine.h"
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

// Called by the drain on each RECORD before Lisp sees it: a memfd handed to
// Lisp becomes one the memfd primitives accept.
void processes_note_delivery(const Record& record);

// Closes the descriptors handed over in RECORDS, results of a stopped engine
// that Lisp will never see.
void processes_discard(const std::deque<Record>& records) noexcept;

}  // namespace fastrevert::glue
