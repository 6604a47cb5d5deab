// A pipe whose both ends are close-on-exec from the moment they exist.
#pragma once

#include "core/fd.h"

namespace fastrevert {

struct CloexecPipe {
  UniqueFd read_end;
  UniqueFd write_end;
};

// Makes a pipe with both ends close-on-exec.  pipe2 does that in one step.
// Without it (macOS, and a portable build) the ends are marked right after
// pipe() returns: a thread that spawns a child in that instant could hand it
// an end, which the child's program then holds open.  Throws SystemError.
CloexecPipe make_cloexec_pipe();

}  // namespace fastrevert
