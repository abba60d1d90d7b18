#!/usr/bin/env bash
# Runs deploy/quickstart.sh twice on this machine (it installs under /usr/local,
# edits /etc/docker/daemon.json and starts dockerd: CI only) and checks that
# the proof shows shmkeeper's size, that the second run changed nothing (the
# agent was not restarted either), and that the agent it started answers.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
snapshot() {
  sha256sum /usr/local/bin/shmkeeper /usr/local/bin/shmkeeper-runtime /usr/local/bin/shmkeeperd \
    /etc/shmkeeper/config.yaml /etc/docker/daemon.json 2>/dev/null
  echo "agent pid $(cat /run/shmkeeper/shmkeeperd.pid 2>/dev/null)"
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

# The issue's reproduction on the engine the quickstart set up: a default
# `docker run` (no flags) of the PyTorch DataLoader succeeds; plain runc dies.
torch_run() {
  docker run --rm "$@" -v /usr:/usr:ro -v /lib:/lib:ro -v /lib64:/lib64:ro -v /etc:/etc:ro \
    -v "$repo/tests/e2e/workloads:/w:ro" -e OMP_NUM_THREADS=1 shmkeeper/busybox:quickstart \
    /usr/bin/python3 /w/dataloader.py 2>&1 | tr -d "\\000"
}
if out=$(torch_run --runtime runc); then
  echo "quickstart: the DataLoader unexpectedly succeeded under plain runc"; exit 1
fi
echo "$out" | grep -qi 'bus error' || { echo "$out" | tail -5; exit 1; }
out=$(torch_run) || { echo "$out" | tail -20; exit 1; }
echo "$out" | grep -q 'DATALOADER OK' || { echo "$out" | tail -5; exit 1; }
echo "quickstart: PyTorch DataLoader: Bus error under plain runc, OK under shmkeeper with no flags"

# The agent the quickstart started answers at once, with true figures.
docker rm -f shmk-qs-writer >/dev/null 2>&1 || true
docker run -d --name shmk-qs-writer shmkeeper/busybox:quickstart sh -c \
  'dd if=/dev/zero of=/dev/shm/data bs=1M count=64 2>/dev/null; exec sleep 600' >/dev/null
trap 'docker rm -f shmk-qs-writer >/dev/null 2>&1 || true' EXIT
for _ in $(seq 1 40); do
  pods=$(shmkeeper pods) && echo "$pods" | grep -q 'shmk-qs-writer.*64MiB' && break; sleep 0.5
done
echo "$pods"
echo "$pods" | grep -q 'shmk-qs-writer.*64MiB' || { echo "quickstart: shmkeeper pods does not show the writer"; exit 1; }
shmkeeper leaks | grep -q 'shmk-qs-writer.*/dev/shm/data' || { echo "quickstart: shmkeeper leaks misses the orphaned file"; exit 1; }
echo "quickstart: shmkeeper pods and shmkeeper leaks show the running container's figures"
