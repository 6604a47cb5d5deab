#include "core/watch_backend.h"

#include "core/platform.h"

namespace fastrevert {

std::unique_ptr<WatchBackend> make_watch_backend(uv_loop_t* loop, WatchListener& listener,
                                                 std::string_view name) {
#if FASTREVERT_HAVE_INOTIFY
  if (name != "libuv") return make_inotify_backend(loop, listener);
#else
  (void)name;
#endif
  return make_libuv_backend(loop, listener);
}

WatchBackendTraits default_watch_backend_traits() noexcept {
#if FASTREVERT_HAVE_INOTIFY
  return inotify_backend_traits();
#else
  return libuv_backend_traits();
#endif
}

}  // namespace fastrevert
