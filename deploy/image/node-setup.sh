#!/bin/sh
# node-setup.sh install|uninstall|idle: what the shmkeeper DaemonSets do to a node.
#
#   install    (the agent DaemonSet's init container) copy the binaries, the
#              preload library and the node policy to the host, register
#              shmkeeper with the node's runtime (containerd or CRI-O, detected
#              from its socket unless SHMKEEPER_RUNTIME says), and restart that
#              runtime only when its config changed. Idempotent: a rolling
#              update replaces the binaries and restarts nothing.
#   uninstall  (the uninstall DaemonSet's init container, on nodes labelled
#              shmkeeper.io/uninstall=true) undo the registration, restart the
#              runtime if its config changed. The binaries stay: containers
#              created through shmkeeper-runtime still need it for their kill
#              and delete.
#   idle       (the uninstall DaemonSet's container) sleep, so that the pod
#              shows Running once the uninstall is done.
#
# Restarting the runtime (SHMKEEPER_RESTART_RUNTIME):
#   auto     systemd when the host runs it (/run/systemd/system), else
#            SHMKEEPER_RESTART_COMMAND when set, else fail with the fix
#   systemd  `systemctl restart <unit>` in the host's namespaces (hostPID)
#   command  SHMKEEPER_RESTART_COMMAND, run by sh in the host's namespaces
#            (e.g. `sv restart containerd`, `rc-service containerd restart`)
#   false    leave it; log that it needs a restart
#
# The host's / is mounted at $SHMKEEPER_HOST_ROOT. No pod or user value reaches
# a shell: everything below is fixed paths and the DaemonSet's own settings.
set -eu

HOST=${SHMKEEPER_HOST_ROOT:-/host}
BIN_DIR=${SHMKEEPER_HOST_BIN_DIR:-/usr/local/bin}      # on the host
SRC_DIR=${SHMKEEPER_SOURCE_BIN_DIR:-/usr/local/bin}    # in the image
POLICY=${SHMKEEPER_POLICY:-/etc/shmkeeper/config.yaml} # the ConfigMap
RUNTIME=${SHMKEEPER_RUNTIME:-auto}
SET_AS_DEFAULT=${SHMKEEPER_SET_AS_DEFAULT:-false}
AGENT_ONLY=${SHMKEEPER_AGENT_ONLY:-false}
RESTART=${SHMKEEPER_RESTART_RUNTIME:-auto}
RESTART_COMMAND=${SHMKEEPER_RESTART_COMMAND:-}
LIB_SRC_DIR=${SHMKEEPER_SOURCE_LIB_DIR:-/usr/local/lib/shmkeeper} # in the image
# On the host: ../lib/shmkeeper from the runtime, where inject.library's
# default lookup finds it.
LIB_DIR=${BIN_DIR%/*}/lib/shmkeeper
LIBRARY=libshmkeeper-preload.so
CONTAINERD_CONFIG=${SHMKEEPER_CONTAINERD_CONFIG:-/etc/containerd/config.toml}
BINARIES="shmkeeper-runtime shmkeeper-hook shmkeeper shmkeeper-doctor"

log() { echo "shmkeeper node-setup: $*"; }
die() { echo "shmkeeper node-setup: $*" >&2; exit 1; }

detect_runtime() {
  case "$RUNTIME" in
    containerd|crio) echo "$RUNTIME" ;;
    auto)
      if [ -S "$HOST/run/containerd/containerd.sock" ]; then echo containerd
      elif [ -S "$HOST/var/run/crio/crio.sock" ] || [ -S "$HOST/run/crio/crio.sock" ]; then echo crio
      else die "no containerd or CRI-O socket under $HOST/run; set runtime explicitly"; fi ;;
    *) die "runtime must be auto, containerd or crio (got: $RUNTIME)" ;;
  esac
}

# The OCI runtime CRI-O's handler runs on the host: crun first (CRI-O's default).
host_oci_runtime() {
  for p in /usr/bin/crun /usr/local/bin/crun /usr/bin/runc /usr/sbin/runc /usr/local/bin/runc /usr/local/sbin/runc; do
    if [ -x "$HOST$p" ]; then echo "$p"; return; fi
  done
  die "no crun or runc on the host"
}

copy_binaries() {
  mkdir -p "$HOST$BIN_DIR"
  for b in $BINARIES; do
    # A copy then a rename: the old binary may be running.
    cp "$SRC_DIR/$b" "$HOST$BIN_DIR/.$b.new"
    chmod 0755 "$HOST$BIN_DIR/.$b.new"
    mv -f "$HOST$BIN_DIR/.$b.new" "$HOST$BIN_DIR/$b"
  done
  mkdir -p "$HOST$LIB_DIR"
  cp "$LIB_SRC_DIR/$LIBRARY" "$HOST$LIB_DIR/.$LIBRARY.new"
  chmod 0644 "$HOST$LIB_DIR/.$LIBRARY.new"
  mv -f "$HOST$LIB_DIR/.$LIBRARY.new" "$HOST$LIB_DIR/$LIBRARY"
  mkdir -p "$HOST/etc/shmkeeper"
  cp "$POLICY" "$HOST/etc/shmkeeper/.config.yaml.new"
  mv -f "$HOST/etc/shmkeeper/.config.yaml.new" "$HOST/etc/shmkeeper/config.yaml"
  log "binaries in $BIN_DIR, $LIBRARY in $LIB_DIR, policy in /etc/shmkeeper/config.yaml"
}

checksum() { cat "$@" 2>/dev/null | md5sum; }

# In the host's namespaces, through pid 1 (the pod is hostPID);
# SHMKEEPER_HOST_PID names another host process (tests: their own).
on_host() { nsenter -t "${SHMKEEPER_HOST_PID:-1}" -m -u -i -n -p -- "$@"; }

restart_runtime() {
  unit=$1
  how=$RESTART
  if [ "$how" = auto ] || [ "$how" = true ]; then
    if [ -d "$HOST/run/systemd/system" ]; then how=systemd
    elif [ -n "$RESTART_COMMAND" ]; then how=command
    else die "$unit config changed, the node has no systemd and SHMKEEPER_RESTART_COMMAND is unset; restart $unit by hand or set it"; fi
  fi
  case "$how" in
    false) log "$unit config changed; restart it to apply"; return ;;
    systemd) set -- systemctl restart "$unit" ;;
    command)
      [ -n "$RESTART_COMMAND" ] || die "SHMKEEPER_RESTART_RUNTIME=command needs SHMKEEPER_RESTART_COMMAND"
      set -- sh -c "$RESTART_COMMAND" ;;
    *) die "SHMKEEPER_RESTART_RUNTIME must be auto, systemd, command or false (got: $how)" ;;
  esac
  sock=$(runtime_socket "$unit")
  old=$(socket_id "$sock")
  on_host "$@" || die "$unit config changed but restarting it ($how) failed; restart it by hand"
  # A command may return before the runtime is back (a supervisor restarts
  # it): wait for its new socket, so that this container's own exit is seen
  # by the new runtime rather than lost while it starts.
  i=0
  while [ "$(socket_id "$sock")" = "$old" ] || [ ! -S "$sock" ]; do
    i=$((i + 1))
    [ "$i" -le 120 ] || die "restarted $unit ($how), but its socket $sock did not come back within 60s"
    sleep 0.5
  done
  log "restarted $unit ($how)"
}

runtime_socket() {
  if [ "$1" = containerd ]; then echo "$HOST/run/containerd/containerd.sock"
  elif [ -S "$HOST/run/crio/crio.sock" ]; then echo "$HOST/run/crio/crio.sock"
  else echo "$HOST/var/run/crio/crio.sock"; fi
}

# The socket file's inode and change time (ns): a restarted runtime binds a
# new one (inode numbers alone are reused at once).
socket_id() { stat -c '%i %z' "$1" 2>/dev/null || echo gone; }

register() {
  verb=$1
  runtime=$(detect_runtime)
  case "$runtime" in
    containerd)
      before=$(checksum "$HOST$CONTAINERD_CONFIG")
      if [ "$verb" = install ]; then
        set -- --runtime-path "$BIN_DIR/shmkeeper-runtime"
        [ "$SET_AS_DEFAULT" = true ] && set -- "$@" --set-as-default
        "$SRC_DIR/shmkeeper" install containerd --config "$HOST$CONTAINERD_CONFIG" "$@"
      else
        "$SRC_DIR/shmkeeper" uninstall containerd --config "$HOST$CONTAINERD_CONFIG"
      fi
      [ "$before" = "$(checksum "$HOST$CONTAINERD_CONFIG")" ] || restart_runtime containerd ;;
    crio)
      files="$HOST/etc/crio/crio.conf.d/99-shmkeeper.conf $HOST/usr/share/containers/oci/hooks.d/shmkeeper.json"
      before=$(checksum $files)
      if [ "$verb" = install ]; then
        set -- --root "$HOST" --hook-path "$BIN_DIR/shmkeeper-hook" --runtime-path "$(host_oci_runtime)"
        [ "$SET_AS_DEFAULT" = true ] && set -- "$@" --set-as-default
        "$SRC_DIR/shmkeeper" install crio "$@"
      else
        "$SRC_DIR/shmkeeper" uninstall crio --root "$HOST"
      fi
      [ "$before" = "$(checksum $files)" ] || restart_runtime crio ;;
  esac
}

case "${1:-}" in
  install)
    copy_binaries
    if [ "$AGENT_ONLY" = true ]; then log "agent-only mode: the runtime config is left alone"; exit 0; fi
    register install ;;
  uninstall)
    if [ "$AGENT_ONLY" = true ]; then log "agent-only mode: nothing registered"; exit 0; fi
    register uninstall
    log "shmkeeper is unregistered from this node's runtime" ;;
  idle) exec sleep 2147483647 ;;
  *) die "usage: node-setup.sh install|uninstall|idle" ;;
esac
