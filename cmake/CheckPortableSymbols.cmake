# A test of the portable build, run as
# `cmake -DNM=... -DCORE=... [-DPENDING=a.cpp,b.cpp] -P CheckPortableSymbols.cmake':
# no object of the core library calls a Linux-only function.  PENDING may
# name files whose portable paths are still to be written; what those call is
# listed, and passes.  None is pending today.
set(linux_only
    inotify_init inotify_init1 inotify_add_watch inotify_rm_watch eventfd timerfd_create
    timerfd_settime ppoll pipe2 memfd_create splice vmsplice tee fallocate fallocate64
    sigtimedwait syscall pidfd_open pidfd_send_signal strerrorname_np strerrordesc_np memrchr
    posix_spawn_file_actions_addclosefrom_np posix_spawn_file_actions_addchdir_np epoll_create
    epoll_create1 epoll_ctl epoll_wait signalfd accept4 dup3 close_range)
string(REPLACE "," ";" PENDING "${PENDING}")
execute_process(COMMAND "${NM}" -u -A "${CORE}" OUTPUT_VARIABLE listing RESULT_VARIABLE status)
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${CORE}")
endif()
string(REGEX MATCHALL "[^\n]+" lines "${listing}")
set(offending "")
set(pending_calls "")
foreach(line IN LISTS lines)
  # "libfastrevert-core.a:pipe.cpp.o:                 U splice"
  if(NOT line MATCHES "^[^:]*:([^:]+)\\.o:[ \t]+U[ \t]+([A-Za-z0-9_]+)(@.*)?$")
    continue()
  endif()
  set(object "${CMAKE_MATCH_1}")
  set(symbol "${CMAKE_MATCH_2}")
  list(FIND linux_only "${symbol}" index)
  if(index EQUAL -1)
    continue()
  endif()
  get_filename_component(file "${object}" NAME)
  list(FIND PENDING "${file}" pending)
  if(pending EQUAL -1)
    list(APPEND offending "${file}: ${symbol}")
  else()
    list(APPEND pending_calls "${file}: ${symbol}")
  endif()
endforeach()
list(REMOVE_DUPLICATES pending_calls)
foreach(call IN LISTS pending_calls)
  message(STATUS "still Linux-only, awaiting its portable path: ${call}")
endforeach()
if(offending)
  list(REMOVE_DUPLICATES offending)
  string(REPLACE ";" "\n  " offending "${offending}")
  message(FATAL_ERROR "The portable build calls Linux-only functions:\n  ${offending}")
endif()
