#!/usr/bin/env bash
# Builds the shmkeeper node image without a registry or a base image: a rootfs
# of the locally built binaries (the CLI as its static build, the copy nodes
# get), libshmkeeper-preload.so, the shared libraries shmkeeperd and
# shmkeeper-node-label link (resolved with ldd), busybox-static for the node-setup script's shell, and
# the default policy, written as an image archive for `docker load` or
# `ctr -n k8s.io images import` (what the tests do).
#   deploy/image/build-offline.sh BUILD_DIR OUT.tar [TAG]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: build-offline.sh BUILD_DIR OUT.tar [TAG]}" && pwd)
out=${2:?usage: build-offline.sh BUILD_DIR OUT.tar [TAG]}
version=$(sed -n 's/^project(shmkeeper VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
tag=${3:-shmkeeper/shmkeeper:$version}

rootfs=$(mktemp -d)
trap 'rm -rf "$rootfs"' EXIT
mkdir -p "$rootfs"/{bin,usr/local/bin,usr/local/lib/shmkeeper,etc/shmkeeper,tmp,run,proc,sys,dev}
for b in shmkeeper-runtime shmkeeper-hook shmkeeperd shmkeeper-doctor shmkeeper-node-label; do
  install -s -m 0755 "$build/plugin/$b" "$rootfs/usr/local/bin/$b"
done
# The CLI nodes get is the static build; a sanitizer build has none (test
# images only): its dynamic CLI then, with its libraries below.
cli=shmkeeper-static
[ -x "$build/plugin/$cli" ] || cli=shmkeeper
install -s -m 0755 "$build/plugin/$cli" "$rootfs/usr/local/bin/shmkeeper"
install -m 0644 "$build/plugin/libshmkeeper-preload.so" "$rootfs/usr/local/lib/shmkeeper/libshmkeeper-preload.so"
install -m 0755 "$here/node-setup.sh" "$rootfs/usr/local/bin/node-setup.sh"
install -m 0644 "$repo/deploy/config/config.yaml" "$rootfs/etc/shmkeeper/config.yaml"
# Shared libraries of the dynamic binaries, at the paths ldd resolves them to.
for b in shmkeeperd shmkeeper-node-label $([ "$cli" = shmkeeper ] && echo shmkeeper); do
  ldd "$build/plugin/$b" | awk '/=> \// {print $3} /^\t\/lib/ {print $1}' | while read -r lib; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L -n "$lib" "$rootfs$lib"
  done
done
install -m 0755 "$(command -v busybox)" "$rootfs/bin/busybox"
for applet in sh cat cp mv mkdir chmod md5sum echo nsenter sleep ls df stat; do ln -sf busybox "$rootfs/bin/$applet"; done
python3 "$here/image_archive.py" --rootfs "$rootfs" --tag "$tag" --cmd /usr/local/bin/shmkeeperd "$out"
