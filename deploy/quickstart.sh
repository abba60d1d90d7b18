#!/usr/bin/env bash
# shmkeeper quick start, as root on a Debian 12 machine:
# installs dependencies (docker.io and runc included), builds, installs the
# binaries under /usr/local, makes shmkeeper-runtime Docker's default runtime,
# and shows a default container's /dev/shm under plain runc and under shmkeeper.
# Idempotent: a second run changes nothing.
#
# Variables: PREFIX (/usr/local), BUILD_DIR (build-release), SHMKEEPER_SET_DEFAULT (1).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
PREFIX=${PREFIX:-/usr/local}
BUILD_DIR=${BUILD_DIR:-$repo/build-release}
SET_DEFAULT=${SHMKEEPER_SET_DEFAULT:-1}
proof_image=shmkeeper/busybox:quickstart

step() { printf '\n==> %s\n' "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "quickstart.sh: run as root" >&2; exit 1; }

step "Dependencies (Debian packages)"
"$repo/deploy/install-deps.sh" build runtime

step "Build"
cmake -S "$repo" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DSHMKEEPER_BUILD_TESTS=OFF \
  -DCMAKE_INSTALL_PREFIX="$PREFIX" >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" >/dev/null

step "Install into $PREFIX"
installed=$(cmake --install "$BUILD_DIR" | grep -v 'Up-to-date' || true)
[ -n "$installed" ] && echo "$installed"
install -d -m 0755 /etc/shmkeeper /var/log/shmkeeper
if [ ! -e /etc/shmkeeper/config.yaml ]; then
  install -m 0644 "$repo/deploy/config/config.yaml" /etc/shmkeeper/config.yaml
  echo "wrote /etc/shmkeeper/config.yaml"
fi

step "Docker engine"
if docker info >/dev/null 2>&1; then
  echo "dockerd is running"
elif [ -d /run/systemd/system ]; then
  systemctl enable --now docker
else
  echo "starting dockerd (no systemd here; log in /var/log/dockerd.log)"
  setsid dockerd >>/var/log/dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 1 100); do docker info >/dev/null 2>&1 && break; sleep 0.3; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/dockerd.log" >&2; exit 1; }
fi

step "Register shmkeeper-runtime with Docker"
args=(install docker --runtime-path "$PREFIX/bin/shmkeeper-runtime")
[ "$SET_DEFAULT" = 1 ] && args+=(--set-as-default)
"$PREFIX/bin/shmkeeper" "${args[@]}"
want=$([ "$SET_DEFAULT" = 1 ] && echo shmkeeper || echo runc)
for _ in $(seq 1 50); do
  [ "$(docker info --format '{{.DefaultRuntime}}')" = "$want" ] && break; sleep 0.2
done

step "Node agent (shmkeeperd)"
agent_pid=$(cat /run/shmkeeper/shmkeeperd.pid 2>/dev/null || true)
agent_running() { [ -n "$agent_pid" ] && [ "$(cat /proc/"$agent_pid"/comm 2>/dev/null)" = shmkeeperd ]; }
if [ -d /run/systemd/system ]; then
  install -m 0644 "$repo/deploy/systemd/shmkeeperd.service" /etc/systemd/system/shmkeeperd.service
  systemctl daemon-reload
  systemctl enable --now shmkeeperd
  if echo "$installed" | grep -q '/bin/shmkeeperd$'; then systemctl restart shmkeeperd; fi
else
  if agent_running && echo "$installed" | grep -q '/bin/shmkeeperd$'; then
    kill "$agent_pid"; for _ in $(seq 1 50); do agent_running || break; sleep 0.1; done
  fi
  if ! agent_running; then
    echo "starting shmkeeperd (no systemd here; log in /var/log/shmkeeper/agent.log)"
    install -d -m 0750 /run/shmkeeper
    setsid "$PREFIX/bin/shmkeeperd" --config /etc/shmkeeper/config.yaml >>/var/log/shmkeeper/agent.log 2>&1 < /dev/null &
    echo $! > /run/shmkeeper/shmkeeperd.pid
  else
    echo "shmkeeperd is running (pid $agent_pid)"
  fi
fi
for _ in $(seq 1 100); do "$PREFIX/bin/shmkeeper" status >/dev/null 2>&1 && break; sleep 0.1; done
"$PREFIX/bin/shmkeeper" status

step "Proof"
if ! docker image inspect "$proof_image" >/dev/null 2>&1; then
  rootfs=$(mktemp -d); trap 'rm -rf "$rootfs"' EXIT
  mkdir -p "$rootfs/bin" "$rootfs/dev" "$rootfs/proc" "$rootfs/sys" "$rootfs/etc" "$rootfs/tmp"
  cp /bin/busybox "$rootfs/bin/busybox"
  for a in sh df; do ln -s busybox "$rootfs/bin/$a"; done
  tar -C "$rootfs" -c . | docker import --change 'CMD ["sh"]' - "$proof_image" >/dev/null
fi
shm() { docker run --rm "$@" "$proof_image" df -h /dev/shm | awk 'NR==2 {print $2}'; }
printf '  /dev/shm of a default container under plain runc:  %s\n' "$(shm --runtime runc)"
printf '  /dev/shm of a default container under shmkeeper:   %s\n' "$(shm --runtime shmkeeper)"
echo
echo "Done. Every 'docker run' now gets /dev/shm from shmkeeper's policy (/etc/shmkeeper/config.yaml)."
echo "Ask for a size with -e SHMKEEPER_SHM_SIZE=8g; undo with: shmkeeper uninstall docker"
echo "See who uses shared memory: shmkeeper pods; leaks: shmkeeper leaks"
echo "Prometheus /metrics listens on 127.0.0.1:9731 only; to expose it set agent.metricsAddress (docs/monitoring.md, Exposure)"
