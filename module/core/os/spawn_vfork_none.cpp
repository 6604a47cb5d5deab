// No clone3 start in this build: spawn() takes posix_spawn or fork.  See
// core/spawn_vfork.h.
#include "core/spawn_vfork.h"

namespace fastrevert {

bool vfork_exec_built() noexcept {
  return false;
}

std::optional<VforkChild> vfork_exec(const ExecPlan&) {
  return std::nullopt;
}

}  // namespace fastrevert
