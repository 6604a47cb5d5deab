# A CMake toolchain for a cross build with zig's C and C++ compilers, as
# test/cross.sh runs them.  It takes, as -D definitions:
#   FASTREVERT_CROSS_BIN        a directory of wrappers (cc, c++, ar, ranlib)
#                               that run zig with the target's -target
#   FASTREVERT_CROSS_SYSTEM     Darwin or Linux
#   FASTREVERT_CROSS_PROCESSOR  aarch64 or x86_64
# zig brings each target's C library (headers, and stubs to link against:
# glibc of the version asked for, musl, macOS's libSystem) and libc++, so no
# SDK or sysroot is needed.  The checks of cmake/FastrevertPlatform.cmake
# compile and link against those, which is how an old glibc's missing
# functions are found missing.
set(CMAKE_SYSTEM_NAME ${FASTREVERT_CROSS_SYSTEM})
set(CMAKE_SYSTEM_PROCESSOR ${FASTREVERT_CROSS_PROCESSOR})
set(CMAKE_C_COMPILER "${FASTREVERT_CROSS_BIN}/cc")
set(CMAKE_CXX_COMPILER "${FASTREVERT_CROSS_BIN}/c++")
set(CMAKE_AR "${FASTREVERT_CROSS_BIN}/ar" CACHE FILEPATH "The archiver of the cross build")
set(CMAKE_RANLIB "${FASTREVERT_CROSS_BIN}/ranlib" CACHE FILEPATH "Its ranlib")
# Nothing of this machine's /usr is the target's.
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
# The definitions must reach the checks' own test projects too.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES
     FASTREVERT_CROSS_BIN FASTREVERT_CROSS_SYSTEM FASTREVERT_CROSS_PROCESSOR)
