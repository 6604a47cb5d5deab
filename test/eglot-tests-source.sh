#!/bin/sh
# Prints the path of Emacs's own test/lisp/progmodes/eglot-tests.el, taken
# from the Debian source package of the Emacs installed here, fetched from
# the package archive that apt already uses, as `apt-get source
# --download-only emacs' fetches it, with an apt configuration of its own.
#
#   test/eglot-tests-source.sh CACHE-DIRECTORY
#
# The file is kept in CACHE-DIRECTORY, under the package's version, so that
# only the first run downloads the source (some 30 MB).  apt checks the
# tarball against the archive's signed index.  Exits non-zero, saying why,
# when the source cannot be had.
set -eu

cache=${1:?usage: eglot-tests-source.sh CACHE-DIRECTORY}
version=$(dpkg-query -W -f='${Version}' emacs-nox 2>/dev/null ||
  dpkg-query -W -f='${Version}' emacs 2>/dev/null) ||
  { echo "eglot-tests-source: Debian's emacs-nox is not installed" >&2; exit 1; }
upstream=${version#*:}
upstream=${upstream%-*}
target="$cache/eglot-tests-$upstream.el"
if [ -s "$target" ]; then
  echo "$target"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/eglot-tests-source.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/parts" "$work/get" "$cache"

# The archives apt installs from, as source archives: one-line entries and
# deb822 files alike.
for list in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$list" ] && sed -n 's/^[[:space:]]*deb[[:space:]]/deb-src /p' "$list"
done >"$work/sources.list"
for file in /etc/apt/sources.list.d/*.sources; do
  [ -f "$file" ] && sed 's/^Types:.*/Types: deb-src/' "$file" >"$work/parts/$(basename "$file")"
done
apt_options="-o Dir::Etc::SourceList=$work/sources.list -o Dir::Etc::SourceParts=$work/parts
  -o Dir::State::Lists=$work/lists -o Dir::Cache=$work -o Dir::Cache::Archives=$work/archives
  -o APT::Sandbox::User=root -o Debug::NoLocking=1"
# shellcheck disable=SC2086 # the options are words
apt-get $apt_options -q update >"$work/update.log" 2>&1 ||
  { cat "$work/update.log" >&2; exit 1; }
# The upstream tarball is all that is needed; apt verifies each file it
# fetches against the index, and goes on to the next one when one fails.
# shellcheck disable=SC2086
(cd "$work/get" && apt-get $apt_options -q source --download-only "emacs=$version" \
  >"$work/source.log" 2>&1) || true
tarball=$(find "$work/get" -name 'emacs_*.orig.tar.*' | head -n 1)
if [ -z "$tarball" ]; then
  cat "$work/source.log" >&2
  echo "eglot-tests-source: no source of emacs $version in the archives apt uses" >&2
  exit 1
fi
member=$(tar -tf "$tarball" | grep '/test/lisp/progmodes/eglot-tests\.el$' | head -n 1)
[ -n "$member" ] || { echo "eglot-tests-source: $tarball has no eglot-tests.el" >&2; exit 1; }
tar -xOf "$tarball" "$member" >"$work/eglot-tests.el"
mv "$work/eglot-tests.el" "$target"
echo "$target"
