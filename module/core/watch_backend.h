// The watcher's kernel interface: one watch per directory, and the events
// that come through it.
//
// Two backends serve it, each in a file of its own.  inotify, driven
// directly on the engine loop, serves Linux and FreeBSD 15
// (os/watch_inotify.cpp): it names the entry of every event, sees writes to
// the files of a watched directory, and reports an overflowing queue.
// libuv's uv_fs_event serves everywhere else, one handle per directory
// (os/watch_libuv.cpp): inotify again on Linux, FSEvents on macOS, and
// kqueue on the BSDs, whose directory watches name no entry and see no
// write to a file in the directory.  The watcher asks the backend what it
// can see (sees_entry_names, sees_file_writes) and polls by stat what it
// cannot.  No backend holds a descriptor per watched file.
//
// Events are hints: every one makes the watcher stat the names it may
// concern, and a lost one costs a re-stat, never a stale buffer.
//
// Engine thread only, like the watcher.
#pragma once

#include <uv.h>

#include <memory>
#include <string>
#include <string_view>

namespace fastrevert {

// What a backend tells the watcher, from within the engine loop's callbacks.
// A watch is the number add() returned.
class WatchListener {
 public:
  // Something happened to the entry NAME of the watched directory, or to
  // the directory itself when NAME is empty (its attributes).
  virtual void on_entry_event(int watch, std::string_view name) = 0;
  // Something changed among the entries of the watched directory, the
  // backend cannot say which (kqueue).
  virtual void on_directory_event(int watch) = 0;
  // The watched directory is gone from its name (deleted, moved, its file
  // system unmounted).  With STILL_REGISTERED, the backend still holds the
  // watch and the watcher removes it; otherwise the kernel already dropped
  // it.
  virtual void on_watch_lost(int watch, bool still_registered) = 0;
  // Events were lost: a queue overflowed, or the backend failed in a way
  // that may have dropped some.  Every registered name needs a stat.
  virtual void on_events_lost() = 0;
  // FUNCTION failed with ERROR while reading events; later events may be
  // missed.
  virtual void on_backend_failure(const char* function, int error) = 0;
  // The events read in one go have all been delivered: time to flush.
  virtual void on_events_delivered() = 0;

 protected:
  ~WatchListener() = default;
};

class WatchBackend {
 public:
  virtual ~WatchBackend() = default;

  // "inotify" or "libuv".
  virtual const char* name() const noexcept = 0;
  // Whether events name the entry they concern.  Without that, every event
  // in a directory has each of its watched names stat'ed.
  virtual bool sees_entry_names() const noexcept = 0;
  // Whether a write to a file in a watched directory raises an event.
  // Without that, the engine polls the watched files by stat.
  virtual bool sees_file_writes() const noexcept = 0;
  // Whether adding a directory may lose events of the others for a moment
  // (libuv recreates its one FSEvents stream on every add): the watcher
  // then re-stats every watched name after an add, as after an overflow.
  virtual bool add_may_lose_events() const noexcept = 0;
  // The system calls whose failures notices name: making the backend ready,
  // and adding a directory.
  virtual const char* start_function() const noexcept = 0;
  virtual const char* add_function() const noexcept = 0;

  // Makes the backend ready to add watches, if it is not.  Returns 0, or
  // the errno of the call that failed, with FUNCTION set to its name; a
  // later call tries again.
  virtual int start(const char*& function) = 0;
  // Watches the directory DIR.  Returns a watch number (at least 0), the
  // same as another watch's when DIR is that directory under another name;
  // or a negative errno.  A directory that was replaced by another since it
  // was watched gets a new number.
  virtual int add(const std::string& dir) = 0;
  // Stops the watch.  A watch that add() returned for several names is
  // removed by one call, once the watcher no longer needs it.
  virtual void remove(int watch) noexcept = 0;
  // Closes every handle; close callbacks finish the work as the loop runs.
  virtual void shutdown() noexcept = 0;
};

// What a backend can see, known without making one (see WatchBackend).
struct WatchBackendTraits {
  const char* name;
  bool sees_entry_names;
  bool sees_file_writes;
  bool add_may_lose_events;
};
WatchBackendTraits inotify_backend_traits() noexcept;
WatchBackendTraits libuv_backend_traits() noexcept;
// The traits of the backend make_watch_backend() makes by default.
WatchBackendTraits default_watch_backend_traits() noexcept;

// The backends.  inotify exists only where CMake found it
// (FASTREVERT_HAVE_INOTIFY); libuv everywhere.
std::unique_ptr<WatchBackend> make_inotify_backend(uv_loop_t* loop, WatchListener& listener);
std::unique_ptr<WatchBackend> make_libuv_backend(uv_loop_t* loop, WatchListener& listener);

// The backend of this build: inotify where it exists, libuv elsewhere and in
// a portable build.  A test may ask for NAME ("inotify" or "libuv") instead
// (see WatcherTestHooks); an unavailable one gets the default.
std::unique_ptr<WatchBackend> make_watch_backend(uv_loop_t* loop, WatchListener& listener,
                                                 std::string_view name = {});

}  // namespace fastrevert
