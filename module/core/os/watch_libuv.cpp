// The watcher's portable backend: one libuv uv_fs_event handle per watched
// directory.  See core/watch_backend.h.
//
// libuv watches a directory with inotify on Linux, with FSEvents on macOS,
// and with a kqueue on the directory's descriptor on the BSDs.  It reports
// each event as a name and nothing else, and which name depends on the
// system:
// - inotify: the entry's name, or the directory's own last component for an
//   event about the directory itself, its end included;
// - FSEvents: the entry's name; nothing about the directory itself;
// - kqueue: the directory's own last component (or no name) for any change
//   among its entries, and nothing for a write to a file in it.
// So an event that carries the directory's own name, or none, is checked
// against the directory: if its name no longer leads to the inode it
// watched, the watch is lost, as inotify would say.  Neither overflow nor
// the end of a watch is otherwise reported.
//
// macOS has one FSEvents stream for the whole loop, which libuv stops and
// recreates whenever a directory is added; events that arrive meanwhile are
// lost, and the watcher re-stats after each add (add_may_lose_events).
#include <sys/stat.h>

#include <cerrno>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/watch_backend.h"
#include "core/watch_registry.h"

namespace fastrevert {

namespace {

// What libuv's directory watch sees on this system (see the comment above).
#if defined(__linux__) || defined(__APPLE__)
constexpr bool kSeesEntryNames = true;
constexpr bool kSeesFileWrites = true;
#else
constexpr bool kSeesEntryNames = false;
constexpr bool kSeesFileWrites = false;
#endif
#if defined(__APPLE__)
constexpr bool kAddMayLoseEvents = true;
#else
constexpr bool kAddMayLoseEvents = false;
#endif
constexpr WatchBackendTraits kTraits{"libuv", kSeesEntryNames, kSeesFileWrites, kAddMayLoseEvents};

class LibuvBackend final : public WatchBackend {
 public:
  LibuvBackend(uv_loop_t* loop, WatchListener& listener) : loop_(loop), listener_(listener) {}

  const char* name() const noexcept override { return kTraits.name; }
  bool sees_entry_names() const noexcept override { return kTraits.sees_entry_names; }
  bool sees_file_writes() const noexcept override { return kTraits.sees_file_writes; }
  bool add_may_lose_events() const noexcept override { return kTraits.add_may_lose_events; }
  const char* start_function() const noexcept override { return "uv_fs_event_start"; }
  const char* add_function() const noexcept override { return "uv_fs_event_start"; }

  // libuv makes what it needs (an inotify descriptor, the FSEvents thread)
  // with the first handle started.
  int start(const char*&) override { return 0; }

  int add(const std::string& dir) override;
  void remove(int watch) noexcept override;
  void shutdown() noexcept override;

 private:
  // The identity of a directory, by which two names of it share a watch.
  using Identity = std::pair<dev_t, ino_t>;

  struct Watch {
    uv_fs_event_t handle{};
    LibuvBackend* backend = nullptr;
    int number = -1;
    // The name it was started with, and its last component.
    std::string dir;
    std::string base;
    Identity identity{};
  };

  static void on_event(uv_fs_event_t* handle, const char* filename, int events, int status);
  // Hands WATCH's handle to libuv to close; it is freed in the callback.
  void close_watch(std::unique_ptr<Watch> watch) noexcept;
  // Whether WATCH's name still leads to the directory it watches.
  static bool still_there(const Watch& watch) noexcept;

  uv_loop_t* loop_;
  WatchListener& listener_;
  int next_number_ = 0;
  std::unordered_map<int, std::unique_ptr<Watch>> watches_;
  std::map<Identity, int> numbers_;
};

int LibuvBackend::add(const std::string& dir) {
  // Like inotify_add_watch, this resolves the name on the loop; see
  // os/watch_inotify.cpp for why that is acceptable.
  struct stat status;
  if (stat(dir.c_str(), &status) != 0) return -errno;
  if (!S_ISDIR(status.st_mode)) return -ENOTDIR;
  Identity identity{status.st_dev, status.st_ino};
  auto known = numbers_.find(identity);
  if (known != numbers_.end()) return known->second;

  auto watch = std::make_unique<Watch>();
  watch->backend = this;
  watch->dir = dir;
  watch->base = std::string(split_path(dir).second);
  watch->identity = identity;
  // uv_fs_event_init only links the handle into the loop; it cannot fail.
  uv_fs_event_init(loop_, &watch->handle);
  watch->handle.data = watch.get();
  int started = uv_fs_event_start(&watch->handle, &LibuvBackend::on_event, dir.c_str(), 0);
  if (started < 0) {
    close_watch(std::move(watch));
    return started;
  }
  int number = next_number_++;
  watch->number = number;
  numbers_.emplace(identity, number);
  watches_.emplace(number, std::move(watch));
  return number;
}

void LibuvBackend::remove(int watch) noexcept {
  auto found = watches_.find(watch);
  if (found == watches_.end()) return;
  std::unique_ptr<Watch> removed = std::move(found->second);
  watches_.erase(found);
  numbers_.erase(removed->identity);
  close_watch(std::move(removed));
}

void LibuvBackend::shutdown() noexcept {
  for (auto& entry : watches_) close_watch(std::move(entry.second));
  watches_.clear();
  numbers_.clear();
}

void LibuvBackend::close_watch(std::unique_ptr<Watch> watch) noexcept {
  // From here the loop owns the watch until its close callback.
  Watch* closing = watch.release();
  uv_close(reinterpret_cast<uv_handle_t*>(&closing->handle),
           [](uv_handle_t* handle) { delete static_cast<Watch*>(handle->data); });
}

bool LibuvBackend::still_there(const Watch& watch) noexcept {
  struct stat status;
  return stat(watch.dir.c_str(), &status) == 0 && S_ISDIR(status.st_mode) &&
         Identity{status.st_dev, status.st_ino} == watch.identity;
}

void LibuvBackend::on_event(uv_fs_event_t* handle, const char* filename, int, int status) {
  Watch& watch = *static_cast<Watch*>(handle->data);
  WatchListener& listener = watch.backend->listener_;
  if (status < 0) {
    listener.on_backend_failure("uv_fs_event", -status);
    listener.on_events_lost();
    listener.on_events_delivered();
    return;
  }
  std::string_view name = filename ? std::string_view(filename) : std::string_view();
  if ((name.empty() || name == watch.base) && !still_there(watch)) {
    // The watcher removes the watch, which frees nothing before this
    // callback returns: the handle is closed through the loop.
    listener.on_watch_lost(watch.number, true);
  } else if (!kSeesEntryNames || name.empty()) {
    listener.on_directory_event(watch.number);
  } else {
    listener.on_entry_event(watch.number, name);
  }
  listener.on_events_delivered();
}

}  // namespace

WatchBackendTraits libuv_backend_traits() noexcept {
  return kTraits;
}

std::unique_ptr<WatchBackend> make_libuv_backend(uv_loop_t* loop, WatchListener& listener) {
  return std::make_unique<LibuvBackend>(loop, listener);
}

}  // namespace fastrevert
