# A test, run as `cmake -DNM=... -DMODULE=... -DAPPLE=... -P CheckModuleExports.cmake':
# the module exports exactly the two symbols Emacs looks up.  Everything
# else is hidden, so that the module's copy of libuv or of the C++ runtime
# cannot clash with another module's.
if(APPLE)
  execute_process(COMMAND "${NM}" -gU "${MODULE}" OUTPUT_VARIABLE listing RESULT_VARIABLE status)
  set(expected "_emacs_module_init;_plugin_is_GPL_compatible")
else()
  execute_process(COMMAND "${NM}" -D --defined-only "${MODULE}"
                  OUTPUT_VARIABLE listing RESULT_VARIABLE status)
  set(expected "emacs_module_init;plugin_is_GPL_compatible")
endif()
if(NOT status EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${MODULE}")
endif()
string(REGEX MATCHALL "[^ \n]+\n" lines "${listing}")
set(exported "")
foreach(line IN LISTS lines)
  string(STRIP "${line}" name)
  list(APPEND exported "${name}")
endforeach()
list(SORT exported)
if(NOT exported STREQUAL expected)
  message(FATAL_ERROR "The module exports ${exported}; expected ${expected}")
endif()
message(STATUS "The module exports ${exported}")
