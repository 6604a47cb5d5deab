# How the module is linked, chosen by what the linker accepts rather than by
# the system's name: Apple's ld64 (and zig's Mach-O linker) take neither
# --exclude-libs nor -z defs, and GNU ld, gold and lld take neither of
# ld64's spellings.
#
# Two things are asked of every linker.  The link is strict: a symbol that
# nothing defines is an error at build time, not when Emacs loads the
# module.  And the module exports exactly emacs_module_init and
# plugin_is_GPL_compatible: the code is compiled with hidden visibility and
# those two are marked visible, and the export list below also hides what a
# static library linked in (libuv's API is marked visible) would add.

include(CheckCXXSourceCompiles)

# Whether the linker takes FLAG, into VARIABLE: a program links with it,
# and the linker says nothing of ignoring it.  (CMake's CheckLinkerFlag
# needs CMake 3.18.)
function(fastrevert_check_linker_flag flag variable)
  set(CMAKE_REQUIRED_LINK_OPTIONS "${flag}")
  set(CMAKE_REQUIRED_QUIET ON)
  check_cxx_source_compiles("int main() { return 0; }" ${variable}
    FAIL_REGEX "[Uu]nknown|[Uu]nrecognized|[Uu]nsupported|[Ii]gnor|not supported|obsolete")
endfunction()

set(fastrevert_exports_dir "${CMAKE_CURRENT_BINARY_DIR}/exports")
file(MAKE_DIRECTORY "${fastrevert_exports_dir}")
# GNU ld, gold and lld: a version script.
file(WRITE "${fastrevert_exports_dir}/module.map"
     "{\n  global:\n    emacs_module_init;\n    plugin_is_GPL_compatible;\n  local:\n    *;\n};\n")
# ld64: a list of symbols, with the C prefix.
file(WRITE "${fastrevert_exports_dir}/module.exp" "_emacs_module_init\n_plugin_is_GPL_compatible\n")

# Each flag is tried once per build directory.
fastrevert_check_linker_flag("-Wl,-z,defs" FASTREVERT_LINKER_Z_DEFS)
fastrevert_check_linker_flag("-Wl,--version-script=${fastrevert_exports_dir}/module.map"
                             FASTREVERT_LINKER_VERSION_SCRIPT)
fastrevert_check_linker_flag("-Wl,--exclude-libs,ALL" FASTREVERT_LINKER_EXCLUDE_LIBS)
fastrevert_check_linker_flag("-Wl,-undefined,error" FASTREVERT_LINKER_UNDEFINED_ERROR)
fastrevert_check_linker_flag("-Wl,-exported_symbols_list,${fastrevert_exports_dir}/module.exp"
                             FASTREVERT_LINKER_EXPORTED_SYMBOLS_LIST)

# A linker may accept a spelling it ignores (zig's Mach-O linker takes -z
# defs in silence, and ld-prime warns of it), so each platform's own
# spelling is tried first.
if(APPLE)
  set(fastrevert_strict_flags UNDEFINED_ERROR "-Wl,-undefined,error" Z_DEFS "-Wl,-z,defs")
  set(fastrevert_export_flags
      EXPORTED_SYMBOLS_LIST "-Wl,-exported_symbols_list,${fastrevert_exports_dir}/module.exp"
      VERSION_SCRIPT "-Wl,--version-script=${fastrevert_exports_dir}/module.map")
else()
  set(fastrevert_strict_flags Z_DEFS "-Wl,-z,defs" UNDEFINED_ERROR "-Wl,-undefined,error")
  set(fastrevert_export_flags
      VERSION_SCRIPT "-Wl,--version-script=${fastrevert_exports_dir}/module.map"
      EXPORTED_SYMBOLS_LIST "-Wl,-exported_symbols_list,${fastrevert_exports_dir}/module.exp")
endif()

# The first flag of CANDIDATES (pairs of a check's name and a flag) that
# the linker took, into VARIABLE; empty if none.
function(fastrevert_first_accepted variable)
  set(result "")
  set(candidates ${ARGN})
  while(candidates)
    list(POP_FRONT candidates check flag)
    if(FASTREVERT_LINKER_${check})
      set(result "${flag}")
      break()
    endif()
  endwhile()
  set(${variable} "${result}" PARENT_SCOPE)
endfunction()

function(fastrevert_module_link_options target)
  set(options "")
  set(strict FALSE)
  set(exports FALSE)
  fastrevert_first_accepted(strict_flag ${fastrevert_strict_flags})
  if(strict_flag)
    list(APPEND options "${strict_flag}")
    set(strict TRUE)
  endif()
  fastrevert_first_accepted(export_flag ${fastrevert_export_flags})
  if(export_flag)
    list(APPEND options "${export_flag}")
    set(exports TRUE)
  endif()
  if(FASTREVERT_LINKER_EXCLUDE_LIBS)
    list(APPEND options "-Wl,--exclude-libs,ALL")
  endif()
  target_link_options(${target} PRIVATE ${options})
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS
               "${fastrevert_exports_dir}/module.map" "${fastrevert_exports_dir}/module.exp")
  if(NOT strict)
    message(WARNING "This linker takes neither -z defs nor -undefined error: "
                    "an undefined symbol in the module shows only when Emacs loads it")
  endif()
  if(NOT exports)
    message(STATUS "This linker takes no export list: the module's exports rest on visibility")
  endif()
endfunction()
