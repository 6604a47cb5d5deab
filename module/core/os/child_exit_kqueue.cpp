// A child's exit on macOS and the BSDs: a kqueue of the child's own, with one
// EVFILT_PROC filter for its exit.  A kqueue is readable while an event is
// pending in it, and nothing here takes the event, so once the child has
// exited the descriptor stays readable, as a pidfd does.  It can be polled
// by poll() and by libuv's loop like any other descriptor.  See
// core/child_exit.h.
#include <fcntl.h>
#include <sys/event.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>

#include "core/child_exit.h"

namespace fastrevert {

const ChildExitMechanism kChildExitMechanism = ChildExitMechanism::kqueue;

int open_exit_descriptor(pid_t pid) noexcept {
  int queue = kqueue();
  if (queue < 0) return -1;
  // A kqueue is not inherited by a child made by fork, but it is by one
  // made by a vfork-style spawn until exec; close-on-exec keeps it from
  // every program.
  if (fcntl(queue, F_SETFD, FD_CLOEXEC) < 0) {
    close(queue);
    return -1;
  }
  struct kevent change;
  EV_SET(&change, pid, EVFILT_PROC, EV_ADD | EV_ONESHOT, NOTE_EXIT, 0, nullptr);
  if (kevent(queue, &change, 1, nullptr, 0, nullptr) == 0) return queue;
  if (errno == ESRCH) {
    // The child has exited already and waits to be reaped: no filter can
    // be added for it any more.  A user event, triggered at once, makes the
    // descriptor readable all the same.
    struct kevent trigger[2];
    EV_SET(&trigger[0], 0, EVFILT_USER, EV_ADD | EV_CLEAR, 0, 0, nullptr);
    EV_SET(&trigger[1], 0, EVFILT_USER, 0, NOTE_TRIGGER, 0, nullptr);
    if (kevent(queue, trigger, 2, nullptr, 0, nullptr) == 0) return queue;
  }
  close(queue);
  return -1;
}

}  // namespace fastrevert
