# What this platform offers, found by compiling and linking against it rather
# than assumed from its name.  Each facility gets one FASTREVERT_HAVE_*
# variable, 1 or 0, written into the generated header core/platform.h; the
# code has a portable path beside every Linux-only one and takes it where the
# variable is 0.
#
# With FASTREVERT_PORTABLE, every Linux-only facility counts as absent, so a
# Linux build runs the code that macOS and the BSDs run.  Facilities that
# POSIX itself defines (st_mtim) are found as usual: they are not a Linux
# fast path but the portable path itself.
#
# The choices that follow from the checks (which watcher backend, which way
# a child's exit is seen, how a thread is woken) are made at the end, once,
# and name the files of module/core/os/ that the core library compiles.

include(CheckCSourceCompiles)
include(CheckStructHasMember)
include(CheckSymbolExists)
include(CMakePushCheckState)

option(FASTREVERT_PORTABLE
       "Take the portable path of every Linux-only facility, as macOS and the BSDs do" OFF)

cmake_push_check_state(RESET)
# glibc declares several of these (ppoll, pipe2, memrchr, the _np spawn
# actions) only for _GNU_SOURCE, which the core library defines too.
set(CMAKE_REQUIRED_DEFINITIONS -D_GNU_SOURCE)
set(CMAKE_REQUIRED_QUIET ON)

set(fastrevert_platform_summary "")

# fastrevert_check(VARIABLE SYMBOL HEADERS...): whether SYMBOL (a function,
# variable or macro) is declared by HEADERS and, for a function, links.  A
# Linux-only facility: absent in a portable build.
function(fastrevert_check variable symbol)
  if(FASTREVERT_PORTABLE)
    set(${variable} 0 PARENT_SCOPE)
    set(found 0)
  else()
    check_symbol_exists(${symbol} "${ARGN}" ${variable})
    if(${variable})
      set(found 1)
    else()
      set(found 0)
    endif()
    set(${variable} ${found} PARENT_SCOPE)
  endif()
  set(fastrevert_platform_summary "${fastrevert_platform_summary} ${symbol}=${found}" PARENT_SCOPE)
endfunction()

# The engine's own descriptors.
fastrevert_check(FASTREVERT_HAVE_INOTIFY inotify_init1 sys/inotify.h)
fastrevert_check(FASTREVERT_HAVE_EVENTFD eventfd sys/eventfd.h)
fastrevert_check(FASTREVERT_HAVE_TIMERFD timerfd_create sys/timerfd.h)
fastrevert_check(FASTREVERT_HAVE_PPOLL ppoll poll.h)
fastrevert_check(FASTREVERT_HAVE_PIPE2 pipe2 unistd.h fcntl.h)
# A child's exit: a pidfd (glibc 2.36 wraps the system call; older C
# libraries leave it to syscall()), or a kqueue watching the process.
fastrevert_check(FASTREVERT_HAVE_PIDFD_OPEN pidfd_open sys/pidfd.h)
fastrevert_check(FASTREVERT_HAVE_SYS_PIDFD_OPEN SYS_pidfd_open sys/syscall.h unistd.h)
fastrevert_check(FASTREVERT_HAVE_KQUEUE_PROC EVFILT_PROC sys/types.h sys/event.h)
# Spawning.
fastrevert_check(FASTREVERT_HAVE_ADDCLOSEFROM_NP posix_spawn_file_actions_addclosefrom_np spawn.h)
fastrevert_check(FASTREVERT_HAVE_ADDCHDIR_NP posix_spawn_file_actions_addchdir_np spawn.h)
fastrevert_check(FASTREVERT_HAVE_POSIX_SPAWN_SETSID POSIX_SPAWN_SETSID spawn.h)
fastrevert_check(FASTREVERT_HAVE_POSIX_SPAWN_CLOEXEC_DEFAULT POSIX_SPAWN_CLOEXEC_DEFAULT spawn.h)
# A child started with clone3 (os/spawn_vfork_clone3.cpp), whose start is
# written in assembly for Linux on x86_64.  Whether the kernel allows it is
# found at run time.
if(FASTREVERT_PORTABLE)
  set(FASTREVERT_HAVE_CLONE3_VFORK 0)
else()
  check_c_source_compiles("
#if !defined(__linux__) || !defined(__x86_64__)
#error clone3 start not written for this system
#endif
#include <sys/syscall.h>
int main(void) { return SYS_execve == 0; }" FASTREVERT_HAVE_CLONE3_VFORK)
  if(FASTREVERT_HAVE_CLONE3_VFORK)
    set(FASTREVERT_HAVE_CLONE3_VFORK 1)
  else()
    set(FASTREVERT_HAVE_CLONE3_VFORK 0)
  endif()
endif()
string(APPEND fastrevert_platform_summary " clone3=${FASTREVERT_HAVE_CLONE3_VFORK}")
# Text and errors.
fastrevert_check(FASTREVERT_HAVE_MEMRCHR memrchr string.h)
fastrevert_check(FASTREVERT_HAVE_STRERRORNAME_NP strerrorname_np string.h)
# Process output: memory files, moving pipe pages, pipe sizes, hole
# punching, and writes that raise no SIGPIPE.
fastrevert_check(FASTREVERT_HAVE_MEMFD_CREATE memfd_create sys/mman.h)
fastrevert_check(FASTREVERT_HAVE_SPLICE splice fcntl.h)
fastrevert_check(FASTREVERT_HAVE_PIPE_SIZE F_SETPIPE_SZ fcntl.h)
fastrevert_check(FASTREVERT_HAVE_PUNCH_HOLE FALLOC_FL_PUNCH_HOLE fcntl.h)
fastrevert_check(FASTREVERT_HAVE_SIGTIMEDWAIT sigtimedwait signal.h)
fastrevert_check(FASTREVERT_HAVE_MSG_NOSIGNAL MSG_NOSIGNAL sys/socket.h)
fastrevert_check(FASTREVERT_HAVE_F_SETNOSIGPIPE F_SETNOSIGPIPE fcntl.h)
# How Emacs opens a descriptor of the module's by name.  Linux's
# /proc/self/fd/N opens the file anew, with an offset and flags of its
# own; /dev/fd/N elsewhere duplicates the descriptor, whose O_NONBLOCK then
# reaches Emacs's reads too.  A system, not a symbol: what the target is
# named, which a cross build sets as well.
if(FASTREVERT_PORTABLE OR NOT CMAKE_SYSTEM_NAME STREQUAL "Linux")
  set(FASTREVERT_HAVE_PROC_SELF_FD 0)
else()
  set(FASTREVERT_HAVE_PROC_SELF_FD 1)
endif()
string(APPEND fastrevert_platform_summary " /proc/self/fd=${FASTREVERT_HAVE_PROC_SELF_FD}")

# File times with nanoseconds: POSIX's st_mtim, or Darwin's st_mtimespec.
# Neither is a Linux fast path, so a portable build looks for them too.
check_struct_has_member("struct stat" st_mtim sys/stat.h FASTREVERT_HAVE_STAT_MTIM LANGUAGE CXX)
check_struct_has_member("struct stat" st_mtimespec sys/stat.h FASTREVERT_HAVE_STAT_MTIMESPEC
                        LANGUAGE CXX)
foreach(variable FASTREVERT_HAVE_STAT_MTIM FASTREVERT_HAVE_STAT_MTIMESPEC)
  if(${variable})
    set(${variable} 1)
  else()
    set(${variable} 0)
  endif()
endforeach()
string(APPEND fastrevert_platform_summary
       " st_mtim=${FASTREVERT_HAVE_STAT_MTIM} st_mtimespec=${FASTREVERT_HAVE_STAT_MTIMESPEC}")

cmake_pop_check_state()

# The choices.  Each names the file of module/core/os/ that implements it.
# The portable wake, alarm, spawn, spill and watcher files are always compiled, so that
# the tests exercise them on Linux beside the fast paths they stand in for;
# a child's exit has one mechanism per build, and its waitpid fallback is
# what every user of an exit descriptor does when there is none.
if(FASTREVERT_HAVE_INOTIFY)
  set(FASTREVERT_WATCH_BACKEND inotify)
else()
  set(FASTREVERT_WATCH_BACKEND libuv)
endif()
if(FASTREVERT_HAVE_PIDFD_OPEN OR FASTREVERT_HAVE_SYS_PIDFD_OPEN)
  set(FASTREVERT_CHILD_EXIT pidfd)
elseif(FASTREVERT_HAVE_KQUEUE_PROC)
  set(FASTREVERT_CHILD_EXIT kqueue)
else()
  set(FASTREVERT_CHILD_EXIT waitpid)
endif()

set(fastrevert_os_sources
    "${PROJECT_SOURCE_DIR}/module/core/os/alarm_thread.cpp"
    "${PROJECT_SOURCE_DIR}/module/core/os/spawn_fork.cpp"
    "${PROJECT_SOURCE_DIR}/module/core/os/wake_pipe.cpp"
    "${PROJECT_SOURCE_DIR}/module/core/os/watch_libuv.cpp")
if(FASTREVERT_HAVE_INOTIFY)
  list(APPEND fastrevert_os_sources "${PROJECT_SOURCE_DIR}/module/core/os/watch_inotify.cpp")
endif()
if(FASTREVERT_HAVE_EVENTFD)
  list(APPEND fastrevert_os_sources "${PROJECT_SOURCE_DIR}/module/core/os/wake_eventfd.cpp")
endif()
if(FASTREVERT_HAVE_TIMERFD)
  list(APPEND fastrevert_os_sources "${PROJECT_SOURCE_DIR}/module/core/os/alarm_timerfd.cpp")
endif()
# Output spilled to a file is compiled everywhere, as the portable wake and
# alarm are, so that the tests run it on Linux too (FASTREVERT_TEST_SPILL).
list(APPEND fastrevert_os_sources "${PROJECT_SOURCE_DIR}/module/core/os/spill_file.cpp")
if(FASTREVERT_HAVE_MEMFD_CREATE)
  list(APPEND fastrevert_os_sources "${PROJECT_SOURCE_DIR}/module/core/os/spill_memfd.cpp")
endif()
list(APPEND fastrevert_os_sources
     "${PROJECT_SOURCE_DIR}/module/core/os/child_exit_${FASTREVERT_CHILD_EXIT}.cpp")
if(FASTREVERT_HAVE_CLONE3_VFORK)
  list(APPEND fastrevert_os_sources "${PROJECT_SOURCE_DIR}/module/core/os/spawn_vfork_clone3.cpp")
else()
  list(APPEND fastrevert_os_sources "${PROJECT_SOURCE_DIR}/module/core/os/spawn_vfork_none.cpp")
endif()
if(FASTREVERT_PORTABLE)
  set(FASTREVERT_PORTABLE_BUILD 1)
else()
  set(FASTREVERT_PORTABLE_BUILD 0)
endif()

message(STATUS "Platform${fastrevert_platform_summary}")
message(STATUS "Watcher backend: ${FASTREVERT_WATCH_BACKEND}; child exits: ${FASTREVERT_CHILD_EXIT}")
if(FASTREVERT_PORTABLE)
  message(STATUS "Portable build: every Linux-only facility is left unused")
endif()
