#!/usr/bin/env bash
# Runs deploy/quickstart.sh twice on this machine (it installs under /usr/local,
# edits /etc/docker/daemon.json and starts dockerd: CI only) and checks that
# the proof shows shmkeeper's size, and that the second run changed nothing.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
snapshot() {
  sha256sum /usr/local/bin/shmkeeper /usr/local/bin/shmkeeper-runtime /etc/shmkeeper/config.yaml \
    /etc/docker/daemon.json 2>/dev/null
  docker image inspect --format '{{.Id}}' shmkeeper/busybox:quickstart 2>/dev/null || true
}
out1=$("$repo/deploy/quickstart.sh" 2>&1) || { echo "$out1"; exit 1; }
echo "$out1" | tail -6
first=$(snapshot)
out2=$("$repo/deploy/quickstart.sh" 2>&1) || { echo "$out2"; exit 1; }
second=$(snapshot)
[ "$first" = "$second" ] || { echo "quickstart: second run changed files:"; diff <(echo "$first") <(echo "$second"); exit 1; }
echo "$out2" | grep -q 'already installed; nothing changed' || { echo "$out2"; exit 1; }
runc_size=$(echo "$out2" | awk -F': *' '/under plain runc/ {print $2}')
shmk_size=$(echo "$out2" | awk -F': *' '/under shmkeeper/ {print $2}')
echo "quickstart: runc gives ${runc_size}, shmkeeper gives ${shmk_size}; second run changed nothing"
[ "$runc_size" = "64.0M" ] && [ "$shmk_size" != "64.0M" ]
