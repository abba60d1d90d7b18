#!/usr/bin/env bash
# Prints the path of the cached Debian sid root holding the engines the
# `engines` stage runs (docker.io + docker-cli, containerd, podman, crun, runc,
# docker-compose, ...), building it with debootstrap when it is absent. The
# cache lives outside the clone, keyed by the suite and package list:
#   $cache/roots/sid-engines-<key>/   the root (a rename makes it appear whole)
#   $cache/roots/sid-engines-<key>/.shmkeeper-root   its stamp: key, packages, engine versions
# A root is built into <dir>.tmp and renamed only after the stamp is written;
# concurrent callers wait on a lock. About 5-10 minutes on a fresh machine.
#   tests/engines/root.sh                  -> the root's path
#   tests/engines/root.sh --adopt DIR      -> takes a finished debootstrap of the same
#                                             suite and packages at DIR (renamed, not copied)
# Variables: SHMKEEPER_TEST_CACHE (default /var/cache/shmkeeper-tests),
# DEBIAN_SID_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
suite=sid
packages=docker.io,docker-cli,containerd,runc,crun,podman,conmon,docker-compose,catatonit,netavark,aardvark-dns,iptables,uidmap,fuse-overlayfs,ca-certificates,procps,iproute2,util-linux
cache=${SHMKEEPER_TEST_CACHE:-/var/cache/shmkeeper-tests}
key=$(printf '%s %s v1' "$suite" "$packages" | sha256sum | cut -c1-16)
root="$cache/roots/$suite-engines-$key"
stamp=.shmkeeper-root
engines=(dockerd docker containerd runc crun podman conmon catatonit)

ready() { [ -s "$root/$stamp" ] && grep -qx "key=$key" "$root/$stamp"; }

# finish DIR: the checks and the stamp, then the atomic rename to $root.
finish() {
  local dir=$1 b
  for b in "${engines[@]}"; do
    [ -x "$dir/usr/bin/$b" ] || [ -x "$dir/usr/sbin/$b" ] || { echo "root.sh: $dir has no $b" >&2; return 1; }
  done
  [ -x "$dir/usr/libexec/docker/cli-plugins/docker-compose" ] || { echo "root.sh: $dir has no docker compose plugin" >&2; return 1; }
  # apt inside the root: the mirror's Release can look expired against this machine's clock
  mkdir -p "$dir/etc/apt/apt.conf.d"
  echo 'Acquire::Check-Valid-Until "false";' >"$dir/etc/apt/apt.conf.d/99shmkeeper-tests"
  rm -rf "$dir/var/cache/apt/archives/"*.deb "$dir/var/lib/apt/lists/"*
  {
    echo "key=$key"
    echo "suite=$suite"
    echo "packages=$packages"
    chroot "$dir" dpkg-query -W -f '${Package}=${Version}\n' docker.io docker-cli containerd runc crun podman docker-compose
  } >"$dir/$stamp.tmp"
  mv "$dir/$stamp.tmp" "$dir/$stamp"
  mv -T "$dir" "$root"
}

if ready; then echo "$root"; exit 0; fi
mkdir -p "$cache/roots"
exec 9>"$cache/roots/.$suite-engines.lock"
flock 9
if ready; then echo "$root"; exit 0; fi
[ ! -e "$root" ] || { echo "root.sh: $root exists without a valid stamp; remove it" >&2; exit 1; }

if [ "${1:-}" = --adopt ]; then
  [ -d "${2:-}" ] || { echo "root.sh: --adopt needs a directory" >&2; exit 2; }
  finish "$2"
  echo "$root"
  exit 0
fi

mirror=${DEBIAN_SID_MIRROR:-http://deb.debian.org/debian}
work="$root.tmp"
rm -rf "$work"
trap 'rm -rf "$work"' EXIT
echo "building $root from $mirror (debootstrap $suite, minbase)" >&2
if ! debootstrap --variant=minbase --include="$packages" "$suite" "$work" "$mirror" >"$cache/roots/$suite-engines.log" 2>&1; then
  tail -20 "$cache/roots/$suite-engines.log" >&2
  exit 1
fi
finish "$work"
trap - EXIT
echo "$root"
