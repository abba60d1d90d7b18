#!/bin/sh
# node-setup.sh install|uninstall: what the shmkeeper DaemonSet does to a node.
#
#   install    (init container) copy the binaries and the node policy to the
#              host, register shmkeeper with the node's runtime (containerd or
#              CRI-O, detected from its socket unless SHMKEEPER_RUNTIME says),
#              and restart that runtime only when its config changed.
#   uninstall  (preStop) undo the registration, restart the runtime if it
#              changed. The binaries stay: containers created through
#              shmkeeper-runtime still need it for their kill and delete.
#
# The host's / is mounted at $SHMKEEPER_HOST_ROOT. No user value reaches a
# shell: everything below is fixed paths and the DaemonSet's own settings.
set -eu

HOST=${SHMKEEPER_HOST_ROOT:-/host}
BIN_DIR=${SHMKEEPER_HOST_BIN_DIR:-/usr/local/bin}      # on the host
SRC_DIR=${SHMKEEPER_SOURCE_BIN_DIR:-/usr/local/bin}    # in the image
POLICY=${SHMKEEPER_POLICY:-/etc/shmkeeper/config.yaml} # the ConfigMap
RUNTIME=${SHMKEEPER_RUNTIME:-auto}
SET_AS_DEFAULT=${SHMKEEPER_SET_AS_DEFAULT:-false}
AGENT_ONLY=${SHMKEEPER_AGENT_ONLY:-false}
RESTART=${SHMKEEPER_RESTART_RUNTIME:-true}
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
  mkdir -p "$HOST/etc/shmkeeper"
  cp "$POLICY" "$HOST/etc/shmkeeper/.config.yaml.new"
  mv -f "$HOST/etc/shmkeeper/.config.yaml.new" "$HOST/etc/shmkeeper/config.yaml"
  log "binaries in $BIN_DIR, policy in /etc/shmkeeper/config.yaml"
}

checksum() { cat "$@" 2>/dev/null | cksum; }

restart_runtime() {
  unit=$1
  if [ "$RESTART" != true ]; then log "$unit config changed; restart it to apply"; return; fi
  # hostPID: enter the host's namespaces through pid 1 and ask its systemd.
  if nsenter -t 1 -m -u -i -n -p -- systemctl restart "$unit"; then
    log "restarted $unit"
  else
    die "$unit config changed but restarting it failed; restart it by hand"
  fi
}

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
    if [ "$AGENT_ONLY" = true ]; then exit 0; fi
    register uninstall ;;
  *) die "usage: node-setup.sh install|uninstall" ;;
esac
