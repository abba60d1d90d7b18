#!/usr/bin/env bash
# Prints the path of a cached Debian bookworm rootfs tarball for the peer
# suites, building it with debootstrap when it is absent. The cache lives
# outside the repository, keyed by the package list, so reruns are instant
# and a fresh machine builds it from scratch (about 3-6 minutes).
#   tests/peer/debian_rootfs.sh            -> /var/cache/shmkeeper-tests/bookworm-<key>.tar
#   tests/peer/debian_rootfs.sh PKG,PKG... -> the same for another package list
#     (e.g. postgresql-15; the default list's key, and so its cached tarball, is unchanged)
# Variables: SHMKEEPER_TEST_CACHE (the cache directory), DEBIAN_MIRROR
# (default: the first URI of the machine's apt sources).
set -euo pipefail
packages=${1:-python3,libpython3.11-testsuite,python3-numpy,python3-pytest,python3-hypothesis}
case $packages in
  *[!a-z0-9.+,-]*) echo "debian_rootfs.sh: bad package list '$packages'" >&2; exit 2 ;;
esac
suite=bookworm
cache=${SHMKEEPER_TEST_CACHE:-/var/cache/shmkeeper-tests}
key=$(printf '%s %s v1' "$suite" "$packages" | sha256sum | cut -c1-16)
tarball="$cache/$suite-$key.tar"
if [ -s "$tarball" ]; then
  echo "$tarball"
  exit 0
fi
mirror=${DEBIAN_MIRROR:-}
if [ -z "$mirror" ]; then
  mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
fi
if [ -z "$mirror" ]; then
  mirror=$(awk '$1 == "deb" && $3 !~ /security/ {print $2; exit}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
    2>/dev/null || true)
fi
mirror=${mirror:-http://deb.debian.org/debian}
mkdir -p "$cache"
work=$(mktemp -d "$cache/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "building $tarball from $mirror (debootstrap, minbase)" >&2
debootstrap --variant=minbase --include="$packages" "$suite" "$work/root" "$mirror" >"$work/log" 2>&1 || {
  tail -20 "$work/log" >&2
  exit 1
}
rm -rf "$work/root/var/cache/apt/archives/"*.deb "$work/root/var/lib/apt/lists/"*
tar -C "$work/root" --numeric-owner -cf "$work/rootfs.tar" .
mv "$work/rootfs.tar" "$tarball"  # atomic: a half-built tarball is never used
echo "$tarball"
