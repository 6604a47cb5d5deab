// The watcher's backend on Linux and FreeBSD 15: an inotify descriptor
// driven by a uv_poll on the engine loop.  See core/watch_backend.h.
//
// libuv's own uv_fs_event would do on Linux too, and serves as the portable
// backend (os/watch_libuv.cpp), but it drops IN_Q_OVERFLOW without a word,
// cannot tell a directory's own end from an event about an entry of the same
// name, and listens with a fixed mask.  Driven directly, inotify reports an
// overflow (the watcher re-stats everything), says when a watch ends, and
// leaves out writes to files that are no longer in the directory.
#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "core/watch_backend.h"

namespace fastrevert {

namespace {

// Linux's refinements, which FreeBSD's inotify may not define: IN_ONLYDIR
// refuses a name that is no directory, IN_EXCL_UNLINK keeps writes to a
// file that is already unlinked (but still open somewhere) from waking us,
// as the registered name no longer refers to it, and IN_UNMOUNT ends a
// watch with its file system.
#ifdef IN_ONLYDIR
constexpr std::uint32_t kOnlyDir = IN_ONLYDIR;
#else
constexpr std::uint32_t kOnlyDir = 0;
#endif
#ifdef IN_EXCL_UNLINK
constexpr std::uint32_t kExclUnlink = IN_EXCL_UNLINK;
#else
constexpr std::uint32_t kExclUnlink = 0;
#endif
#ifdef IN_UNMOUNT
constexpr std::uint32_t kUnmount = IN_UNMOUNT;
#else
constexpr std::uint32_t kUnmount = 0;
#endif

// What a directory watch listens for.  Every event that can change what a
// name in the directory refers to, or its contents or attributes, and the
// events that end the watch itself.
constexpr std::uint32_t kDirectoryEventMask = IN_MODIFY | IN_ATTRIB | IN_CREATE | IN_DELETE |
                                              IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE_SELF |
                                              IN_MOVE_SELF | kOnlyDir | kExclUnlink;

// Bounds the reads of one readable callback, so that a flood of events
// cannot starve the other handles of the loop; uv_poll is level-triggered
// and calls us again.
constexpr int kMaxReadsPerCallback = 16;

constexpr WatchBackendTraits kTraits{"inotify", true, true, false};

class InotifyBackend final : public WatchBackend {
 public:
  InotifyBackend(uv_loop_t* loop, WatchListener& listener) : loop_(loop), listener_(listener) {}

  ~InotifyBackend() override {
    // The engine destroys the watcher only after the loop has run every
    // close callback, which closes the descriptor.  This covers a backend
    // whose poll handle never got that far.
    if (fd_ >= 0 && !poll_initialized_) close(fd_);
  }

  const char* name() const noexcept override { return kTraits.name; }
  bool sees_entry_names() const noexcept override { return kTraits.sees_entry_names; }
  bool sees_file_writes() const noexcept override { return kTraits.sees_file_writes; }
  bool add_may_lose_events() const noexcept override { return kTraits.add_may_lose_events; }
  const char* start_function() const noexcept override { return "inotify_init1"; }
  const char* add_function() const noexcept override { return "inotify_add_watch"; }

  int start(const char*& function) override {
    if (fd_ >= 0) return 0;
    int fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) {
      function = "inotify_init1";
      return errno;
    }
    int status = uv_poll_init(loop_, &poll_, fd);
    if (status < 0) {
      close(fd);
      function = "uv_poll_init";
      return -status;
    }
    poll_.data = this;
    poll_initialized_ = true;
    fd_ = fd;
    uv_poll_start(&poll_, UV_READABLE, &InotifyBackend::on_readable);
    return 0;
  }

  // inotify_add_watch resolves a path and so could block on a dead network
  // mount.  It runs on the loop anyway: the Lisp side registers remote and
  // excluded directories (auto-revert-notify-exclude-dir-regexp) in poll
  // mode, and inotify cannot see remote changes there in any case.  The
  // kernel hands out one descriptor per inode, so two names of one
  // directory share it, and a directory made anew under its name gets a new
  // one.
  int add(const std::string& dir) override {
    int wd = inotify_add_watch(fd_, dir.c_str(), kDirectoryEventMask);
    return wd < 0 ? -errno : wd;
  }

  void remove(int watch) noexcept override {
    // EINVAL here only means the kernel dropped the watch already.
    if (fd_ >= 0) inotify_rm_watch(fd_, watch);
  }

  void shutdown() noexcept override {
    if (poll_initialized_) {
      // The descriptor is closed in the close callback, once libuv has
      // stopped polling it.
      uv_close(reinterpret_cast<uv_handle_t*>(&poll_), [](uv_handle_t* handle) {
        auto* self = static_cast<InotifyBackend*>(handle->data);
        close(self->fd_);
        self->fd_ = -1;
        self->poll_initialized_ = false;
      });
    } else if (fd_ >= 0) {
      close(fd_);
      fd_ = -1;
    }
  }

 private:
  static void on_readable(uv_poll_t* handle, int status, int events);
  void read_events();

  uv_loop_t* loop_;
  WatchListener& listener_;
  int fd_ = -1;
  uv_poll_t poll_{};
  bool poll_initialized_ = false;
  // Filled by read(2); aligned for struct inotify_event.
  alignas(8) std::array<char, 64 * 1024> buffer_{};
};

void InotifyBackend::on_readable(uv_poll_t* handle, int status, int /*events*/) {
  auto* self = static_cast<InotifyBackend*>(handle->data);
  if (status < 0) {
    // libuv has stopped the handle.  This does not happen for an inotify fd
    // in practice; if it ever does, say so and catch up once.
    self->listener_.on_backend_failure("uv_poll", -status);
    self->listener_.on_events_lost();
    return;
  }
  self->read_events();
}

void InotifyBackend::read_events() {
  for (int reads = 0; reads < kMaxReadsPerCallback && fd_ >= 0; ++reads) {
    ssize_t length = read(fd_, buffer_.data(), buffer_.size());
    if (length < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN) listener_.on_backend_failure("read", errno);
      break;
    }
    if (length == 0) break;
    std::size_t offset = 0;
    auto total = static_cast<std::size_t>(length);
    while (offset + sizeof(inotify_event) <= total) {
      // Copied out rather than cast in place, so that no alignment or
      // aliasing assumption is made about the kernel's packing.
      inotify_event event;
      std::memcpy(&event, buffer_.data() + offset, sizeof event);
      const char* name_start = buffer_.data() + offset + sizeof event;
      std::size_t name_room = std::min<std::size_t>(event.len, total - offset - sizeof event);
      std::string_view name(name_start, strnlen(name_start, name_room));
      offset += sizeof event + event.len;

      if (event.mask & IN_Q_OVERFLOW) {
        listener_.on_events_lost();
      } else if (event.mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF | kUnmount)) {
        // IN_IGNORED means the kernel already removed the watch; after the
        // others, a watch may remain (a moved directory keeps its watch at
        // the new place), and it must go because it no longer serves the
        // name.
        listener_.on_watch_lost(event.wd, (event.mask & IN_IGNORED) == 0);
      } else {
        listener_.on_entry_event(event.wd, name);
      }
    }
  }
  listener_.on_events_delivered();
}

}  // namespace

WatchBackendTraits inotify_backend_traits() noexcept {
  return kTraits;
}

std::unique_ptr<WatchBackend> make_inotify_backend(uv_loop_t* loop, WatchListener& listener) {
  return std::make_unique<InotifyBackend>(loop, listener);
}

}  // namespace fastrevert
