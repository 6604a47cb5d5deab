// A child's exit where the kernel gives no descriptor for it, and in a
// portable build: there is none, and whoever waits for the child looks with
// waitpid(WNOHANG) at short intervals (the process table's timer, the
// synchronous runner's poll timeout, reap_with_quit).  See core/child_exit.h.
#include "core/child_exit.h"

namespace fastrevert {

const ChildExitMechanism kChildExitMechanism = ChildExitMechanism::waitpid;

int open_exit_descriptor(pid_t) noexcept {
  return -1;
}

}  // namespace fastrevert
