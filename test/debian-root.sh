#!/usr/bin/env bash
# Runs a command in a Debian root made with debootstrap, in a source tree
# mounted there: the same sources, built and tested with the root's Emacs,
# compiler and libraries.
#
#   test/debian-root.sh ROOT SUITE MIRROR "PACKAGES" SOURCE -- COMMAND...
#
# ROOT is kept between runs, so that only the first run pays for debootstrap.
# It is built under a temporary name and renamed when complete, so a run that
# was killed half-way leaves nothing that a later run would take for a root.
# Packages added to PACKAGES later are installed into the existing root.
#
# SOURCE is bind-mounted at the same absolute path inside the root, and
# COMMAND runs there.  All mounts (/proc, /dev, /dev/pts for the tests that
# need a terminal, and SOURCE) live in a mount namespace of this run alone:
# they vanish with it however the run ends, and runs from several checkouts
# can share one root at the same time.  A lock file next to ROOT lets one run
# build or extend the root while no other run uses it.
set -euo pipefail

readonly marker=.fastrevert-debian-root
self=$(realpath "${BASH_SOURCE[0]}")
readonly self
readonly chroot_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

die() {
  echo "debian-root: $*" >&2
  exit 1
}

# Prints the mount points at or below $1 in this mount namespace.
mounts_under() {
  awk -v dir="$1" '$2 == dir || index($2, dir "/") == 1 { print $2 }' /proc/self/mounts
}

# Removes a half-made root.  Its mounts died with the namespace that made
# them; should one still be there, removing it could reach the host's /dev or
# a source tree through it, so that is refused.
remove_half_made_root() {
  local dir=$1
  if [ -n "$(mounts_under "$dir")" ]; then
    die "$dir has mounts ($(mounts_under "$dir" | tr '\n' ' ')); unmount them and remove it"
  fi
  echo "debian-root: removing the half-made root $dir"
  rm -rf --one-file-system "$dir"
}

# The part that runs inside the private mount namespace: mounts what the
# root needs, then runs the command there with a clean environment.
inside() {
  local root=$1 source=$2
  shift 2
  mounted=()
  # The namespace takes every mount with it when it ends; unmounting on the
  # way out anyway keeps the order right and the intent plain.
  unmount_all() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
      umount "${mounted[i]}" || umount -l "${mounted[i]}" || true
    done
  }
  trap unmount_all EXIT
  mount_at() {
    mount "$@"
    mounted+=("${!#}")
  }
  mount_at -t proc proc "$root/proc"
  mount_at --bind /dev "$root/dev"
  # A devpts of its own, with the pty master taken from it.
  mount_at -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
  mount_at --bind "$root/dev/pts/ptmx" "$root/dev/ptmx"
  if [ -n "$source" ]; then
    mkdir -p "$root$source"
    mount_at --bind "$source" "$root$source"
  fi
  local env=(PATH="$chroot_path" HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive)
  [ -n "${CI:-}" ] && env+=(CI="$CI")
  # Not exec: the trap above unmounts once the command is done.
  # shellcheck disable=SC2016 # $1 and $@ are the inner shell's.
  chroot "$root" /usr/bin/env -i "${env[@]}" /bin/sh -c 'cd "$1" && shift && exec "$@"' \
    sh "${source:-/}" "$@"
}

# Runs "inside" in a new private mount namespace.
in_namespace() {
  unshare --mount --propagation private -- "$self" --inside "$@"
}

# Lists those of the packages named in $2 that are not installed in root $1.
missing_packages() {
  local root=$1 package status
  for package in $2; do
    # shellcheck disable=SC2016 # ${Status} is dpkg-query's.
    status=$(chroot "$root" dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
    [ "$status" = "install ok installed" ] || printf '%s ' "$package"
  done
}

install_packages() {
  local root=$1 packages=$2
  cp /etc/resolv.conf "$root/etc/resolv.conf"
  in_namespace "$root" "" sh -c "apt-get update -q && \
    apt-get install -y -q --no-install-recommends $packages && apt-get clean" 9>&-
}

# Builds a root in $1 (which must not exist) from suite $2 of mirror $3,
# with the packages $4.  Returns non-zero at the first step that fails.
build_root() {
  local dir=$1 suite=$2 mirror=$3 packages=$4
  debootstrap --variant=minbase "$suite" "$dir" "$mirror" || return
  # No daemon starts in the root, and dpkg need not sync every file: a root
  # that breaks half-way is thrown away anyway.
  printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d" || return
  chmod 755 "$dir/usr/sbin/policy-rc.d" || return
  echo force-unsafe-io >"$dir/etc/dpkg/dpkg.cfg.d/fastrevert-unsafe-io" || return
  install_packages "$dir" "$packages" || return
  echo "Debian $suite from $mirror, made by fastrevert's test/debian-root.sh" >"$dir/$marker"
}

make_root() {
  local root=$1 suite=$2 mirror=$3 packages=$4 new old
  new="$root.new.$$"
  for old in "$root".new.*; do
    [ -e "$old" ] && remove_half_made_root "$old"
  done
  echo "debian-root: making a Debian $suite root in $root (once; it is kept)"
  if ! build_root "$new" "$suite" "$mirror" "$packages"; then
    remove_half_made_root "$new"
    die "making the Debian $suite root failed; nothing was kept"
  fi
  mv -T "$new" "$root"
}

main() {
  if [ $# -lt 7 ] || [ "$6" != -- ]; then
    die "usage: $0 ROOT SUITE MIRROR PACKAGES SOURCE -- COMMAND..."
  fi
  local root=$1 suite=$2 mirror=$3 packages=$4 source=$5
  shift 6
  [ "$(id -u)" = 0 ] || die "making and entering a root needs root; run this as root (sudo)"
  command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
  source=$(cd "$source" && pwd -P)
  root=$(realpath -m "$root")
  mkdir -p "$(dirname "$root")"

  # The root is used under a shared lock, which this shell holds while the
  # command runs; the command does not inherit the lock's descriptor.  A
  # root that lacks something is made or extended under an exclusive lock,
  # taken only then, so that runs which find it ready share it at once.
  exec 9>"$root.lock"
  flock -s 9
  if [ ! -f "$root/$marker" ] || [ -n "$(missing_packages "$root" "$packages")" ]; then
    flock 9
    if [ ! -e "$root" ]; then
      make_root "$root" "$suite" "$mirror" "$packages"
    elif [ ! -f "$root/$marker" ]; then
      die "$root exists but was not made by this script; remove it or choose another directory"
    else
      local missing
      missing=$(missing_packages "$root" "$packages")
      if [ -n "$missing" ]; then
        echo "debian-root: installing into $root: $missing"
        install_packages "$root" "$missing"
      fi
    fi
    flock -s 9
  fi

  in_namespace "$root" "$source" "$@" 9>&-
}

if [ "${1:-}" = --inside ]; then
  shift
  inside "$@"
else
  main "$@"
fi
