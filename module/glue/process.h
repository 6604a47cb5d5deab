// What the rest of the glue asks of the process glue (process.cpp).
#pragma once

#include <cstdint>

#include "core/engine.h"
#include "glue/env.h"

namespace fastrevert::glue {

// Delivers what waits in the output of the process_ready RECORD to Lisp,
// piece by piece, until nothing is ready, a quit is pending, or Lisp exits
// non-locally (a piece not yet handed on then stays for the next delivery).
// A process whose delivery runs further up the stack is left to it.
// Returns false when Lisp exited non-locally: the exit is then pending,
// and no C++ exception carries it.
bool deliver_process_output(Env& env, const Record& record);

// Forgets every process: the engine that ran them has stopped.
void forget_all_processes(Env& env);

// WAITING: the bytes of output that wait for Emacs now, over every process;
// OVERRUN: the most that ever waited for one process beyond its backlog.
void backlog_stats(std::uint64_t& waiting, std::uint64_t& overrun);

}  // namespace fastrevert::glue
