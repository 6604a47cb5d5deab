#include "core/cloexec_pipe.h"

#include <fcntl.h>
#include <unistd.h>

#include "core/errors.h"
#include "core/platform.h"

namespace fastrevert {

CloexecPipe make_cloexec_pipe() {
  int ends[2];
  CloexecPipe made;
#if FASTREVERT_HAVE_PIPE2
  if (pipe2(ends, O_CLOEXEC) < 0) throw_errno("pipe2");
  made.read_end.reset(ends[0]);
  made.write_end.reset(ends[1]);
#else
  if (pipe(ends) < 0) throw_errno("pipe");
  made.read_end.reset(ends[0]);
  made.write_end.reset(ends[1]);
  for (int fd : ends) {
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) throw_errno("fcntl");
  }
#endif
  return made;
}

}  // namespace fastrevert
