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

include(CheckLinkerFlag)

set(fastrevert_exports_dir "${CMAKE_CURRENT_BINARY_DIR}/exports")
file(MAKE_DIRECTORY "${fastrevert_exports_dir}")
# GNU ld, gold and lld: a version script.
file(WRITE "${fastrevert_exports_dir}/module.map"
     "{\n  global:\n    emacs_module_init;\n    plugin_is_GPL_compatible;\n  local:\n    *;\n};\n")
# ld64: a list of symbols, with the C prefix.
file(WRITE "${fastrevert_exports_dir}/module.exp" "_emacs_module_init\n_plugin_is_GPL_compatible\n")

# Each flag is tried once per build directory.
check_linker_flag(CXX "-Wl,-z,defs" FASTREVERT_LINKER_Z_DEFS)
check_linker_flag(CXX "-Wl,--version-script=${fastrevert_exports_dir}/module.map"
                  FASTREVERT_LINKER_VERSION_SCRIPT)
check_linker_flag(CXX "-Wl,--exclude-libs,ALL" FASTREVERT_LINKER_EXCLUDE_LIBS)
check_linker_flag(CXX "-Wl,-undefined,error" FASTREVERT_LINKER_UNDEFINED_ERROR)
check_linker_flag(CXX "-Wl,-exported_symbols_list,${fastrevert_exports_dir}/module.exp"
                  FASTREVERT_LINKER_EXPORTED_SYMBOLS_LIST)

function(fastrevert_module_link_options target)
  set(options "")
  set(strict FALSE)
  set(exports FALSE)
  if(FASTREVERT_LINKER_Z_DEFS)
    list(APPEND options "-Wl,-z,defs")
    set(strict TRUE)
  elseif(FASTREVERT_LINKER_UNDEFINED_ERROR)
    list(APPEND options "-Wl,-undefined,error")
    set(strict TRUE)
  endif()
  if(FASTREVERT_LINKER_VERSION_SCRIPT)
    list(APPEND options "-Wl,--version-script=${fastrevert_exports_dir}/module.map")
    set(exports TRUE)
  elseif(FASTREVERT_LINKER_EXPORTED_SYMBOLS_LIST)
    list(APPEND options "-Wl,-exported_symbols_list,${fastrevert_exports_dir}/module.exp")
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
