#!/bin/sh
# node-setup.sh install|uninstall|idle: what the shmkeeper DaemonSets do to a node.
#
#   install    (the agent DaemonSet's init container) copy the binaries, the
#              preload library and the node policy to the host, register
#              shmkeeper with the node's runtime (SHMKEEPER_RUNTIME: its
#              distribution, see below), restart that runtime only when its
#              config changed, then label the node shmkeeper.io/runtime=ready
#              (SHMKEEPER_NODE_LABEL=true; the RuntimeClass selects it).
#              Idempotent: a rolling update replaces the binaries and
#              restarts nothing.
#   uninstall  (the uninstall DaemonSet's init container, on nodes labelled
#              shmkeeper.io/uninstall=true) remove the readiness label first
#              (no new shmkeeper pod lands here), undo the registration,
#              restart the runtime if its config changed. The binaries stay:
#              containers created through shmkeeper-runtime still need it for
#              their kill and delete.
#              With SHMKEEPER_INTEGRATION=nri (components/nri, the chart's
#              runtime.integration: nri) only the copy: the agent is the
#              runtime's NRI plugin, nothing is registered, restarted or
#              labelled (and uninstall has nothing to undo).
#   idle       (the uninstall DaemonSet's container) sleep, so that the pod
#              shows Running once the uninstall is done.
#
# Distributions (SHMKEEPER_RUNTIME; paths overridable, see profile()):
#   containerd  /etc/containerd/config.toml edited in place; /run/containerd/containerd.sock; unit containerd
#   k3s         /var/lib/rancher/k3s/agent/etc/containerd/config-v3.toml.tmpl (or config.toml.tmpl):
#               k3s regenerates config.toml from it at every start; /run/k3s/containerd/containerd.sock;
#               unit k3s or k3s-agent
#   rke2        the same under /var/lib/rancher/rke2; units rke2-server or rke2-agent
#   microk8s    /var/snap/microk8s/current/args/containerd-template.toml; its socket under
#               /var/snap/microk8s/common/run; `snap restart microk8s.daemon-containerd`
#   crio        drop-in and hook (shmkeeper install crio); unit crio
#   auto        the one whose socket exists; none or several: fail naming them
#
# Restarting the runtime (SHMKEEPER_RESTART_RUNTIME):
#   auto     systemd when the host runs it (/run/systemd/system; MicroK8s:
#            snap), else SHMKEEPER_RESTART_COMMAND when set, else fail with the fix
#   systemd  `systemctl restart <unit>` in the host's namespaces (hostPID)
#   command  SHMKEEPER_RESTART_COMMAND, run by sh in the host's namespaces
#            (e.g. `sv restart containerd`, `rc-service containerd restart`)
#   false    leave it; log that it needs a restart (the node is not labelled ready)
#
# The host directories this script uses are mounted at the same paths under
# $SHMKEEPER_HOST_ROOT (the DaemonSet mounts only those: the install root, the
# runtime's config directory, /etc/shmkeeper, /run read-only). No pod or user
# value reaches a shell: everything below is fixed paths and the DaemonSet's
# own settings.
set -eu

HOST=${SHMKEEPER_HOST_ROOT:-/host}
# On the host: /usr/local by default; /opt/shmkeeper or /var/lib/shmkeeper
# where /usr is read-only (Flatcar, Bottlerocket, Talos, Fedora CoreOS).
INSTALL_ROOT=${SHMKEEPER_INSTALL_ROOT:-/usr/local}
case "$INSTALL_ROOT" in
  /*) ;;
  *) echo "shmkeeper node-setup: SHMKEEPER_INSTALL_ROOT must be absolute (got: $INSTALL_ROOT)" >&2; exit 1 ;;
esac
BIN_DIR=$INSTALL_ROOT/bin
# Where this container sees the install root and the runtime's config
# directory (the DaemonSet mounts them at fixed paths; by default under $HOST).
HOST_INSTALL=${SHMKEEPER_HOST_INSTALL_DIR:-$HOST$INSTALL_ROOT}
SRC_DIR=${SHMKEEPER_SOURCE_BIN_DIR:-/usr/local/bin}    # in the image
POLICY=${SHMKEEPER_POLICY:-/etc/shmkeeper/config.yaml} # the ConfigMap
RUNTIME=${SHMKEEPER_RUNTIME:-auto}
SET_AS_DEFAULT=${SHMKEEPER_SET_AS_DEFAULT:-false}
AGENT_ONLY=${SHMKEEPER_AGENT_ONLY:-false}
INTEGRATION=${SHMKEEPER_INTEGRATION:-runtimeclass}  # runtimeclass | nri
case "$INTEGRATION" in
  runtimeclass|nri) ;;
  *) echo "shmkeeper node-setup: SHMKEEPER_INTEGRATION must be runtimeclass or nri (got: $INTEGRATION)" >&2; exit 1 ;;
esac
RESTART=${SHMKEEPER_RESTART_RUNTIME:-auto}
RESTART_COMMAND=${SHMKEEPER_RESTART_COMMAND:-}
LIB_SRC_DIR=${SHMKEEPER_SOURCE_LIB_DIR:-/usr/local/lib/shmkeeper} # in the image
# On the host: ../lib/shmkeeper from the runtime, where inject.library's
# default lookup finds it.
LIB_DIR=${BIN_DIR%/*}/lib/shmkeeper
LIBRARY=libshmkeeper-preload.so
NODE_LABEL=${SHMKEEPER_NODE_LABEL:-false}
BINARIES="shmkeeper-runtime shmkeeper-hook shmkeeper shmkeeper-doctor"

log() { echo "shmkeeper node-setup: $*"; }
die() { echo "shmkeeper node-setup: $*" >&2; exit 1; }

# Each distribution's containerd: config file, whether it is generated from a
# template (k3s, RKE2), socket, systemd units (the first active one restarts).
profile() {
  TEMPLATE=false UNITS=containerd SNAP=""
  case "$1" in
    containerd) CONFIG=/etc/containerd/config.toml SOCKET=/run/containerd/containerd.sock ;;
    k3s|rke2)
      CONFIG=/var/lib/rancher/$1/agent/etc/containerd/config.toml SOCKET=/run/k3s/containerd/containerd.sock
      TEMPLATE=true
      if [ "$1" = k3s ]; then UNITS="k3s k3s-agent"; else UNITS="rke2-server rke2-agent"; fi ;;
    microk8s)
      CONFIG=/var/snap/microk8s/current/args/containerd-template.toml
      SOCKET=/var/snap/microk8s/common/run/containerd.sock SNAP=microk8s.daemon-containerd ;;
    crio) UNITS=crio ;;
  esac
  CONFIG=${SHMKEEPER_CONTAINERD_CONFIG:-${CONFIG:-/etc/crio/crio.conf}}
  CONFIG_DIR=${SHMKEEPER_HOST_CONFIG_DIR:-$HOST${CONFIG%/*}}  # as this container sees it
  SOCKET=${SHMKEEPER_CONTAINERD_SOCKET:-${SOCKET:-}}
  case "${SHMKEEPER_CONTAINERD_TEMPLATE:-auto}" in
    auto) ;;
    true|false) TEMPLATE=$SHMKEEPER_CONTAINERD_TEMPLATE ;;
    *) die "SHMKEEPER_CONTAINERD_TEMPLATE must be auto, true or false" ;;
  esac
}

crio_socket() {
  if [ -S "$HOST/run/crio/crio.sock" ]; then echo /run/crio/crio.sock; else echo /var/run/crio/crio.sock; fi
}

# The distribution: SHMKEEPER_RUNTIME, or (auto) the one whose socket exists.
# k3s and RKE2 share a socket path: their state directories tell them apart.
detect_runtime() {
  case "$RUNTIME" in
    containerd|k3s|rke2|microk8s|crio) echo "$RUNTIME"; return ;;
    auto) ;;
    *) die "runtime must be auto, containerd, k3s, rke2, microk8s or crio (got: $RUNTIME)" ;;
  esac
  found=""
  [ -S "$HOST/run/containerd/containerd.sock" ] && found="$found containerd"
  if [ -S "$HOST/run/k3s/containerd/containerd.sock" ]; then
    [ -d "$HOST/var/lib/rancher/k3s/agent/etc/containerd" ] && found="$found k3s"
    [ -d "$HOST/var/lib/rancher/rke2/agent/etc/containerd" ] && found="$found rke2"
    case "$found" in *k3s*|*rke2*) ;; *) found="$found k3s-or-rke2" ;; esac
  fi
  [ -S "$HOST/var/snap/microk8s/common/run/containerd.sock" ] && found="$found microk8s"
  if [ -S "$HOST/var/run/crio/crio.sock" ] || [ -S "$HOST/run/crio/crio.sock" ]; then found="$found crio"; fi
  set -- $found
  [ $# -eq 1 ] && [ "$1" != k3s-or-rke2 ] && { echo "$1"; return; }
  [ $# -eq 0 ] && die "no container runtime socket found under $HOST; set the runtime (containerd, k3s, rke2, microk8s, crio)"
  die "cannot tell the runtime (found:$found); set it explicitly (containerd, k3s, rke2, microk8s, crio)"
}

# The OCI runtime CRI-O's handler runs on the host: crun first (CRI-O's default).
host_oci_runtime() {
  for p in /usr/bin/crun /usr/local/bin/crun /usr/bin/runc /usr/sbin/runc /usr/local/bin/runc /usr/local/sbin/runc; do
    if [ -x "$HOST$p" ]; then echo "$p"; return; fi
  done
  die "no crun or runc on the host"
}

copy_binaries() {
  mkdir -p "$HOST_INSTALL/bin"
  for b in $BINARIES; do
    # A copy then a rename: the old binary may be running.
    cp "$SRC_DIR/$b" "$HOST_INSTALL/bin/.$b.new"
    chmod 0755 "$HOST_INSTALL/bin/.$b.new"
    mv -f "$HOST_INSTALL/bin/.$b.new" "$HOST_INSTALL/bin/$b"
  done
  mkdir -p "$HOST_INSTALL/lib/shmkeeper"
  cp "$LIB_SRC_DIR/$LIBRARY" "$HOST_INSTALL/lib/shmkeeper/.$LIBRARY.new"
  chmod 0644 "$HOST_INSTALL/lib/shmkeeper/.$LIBRARY.new"
  mv -f "$HOST_INSTALL/lib/shmkeeper/.$LIBRARY.new" "$HOST_INSTALL/lib/shmkeeper/$LIBRARY"
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
    if [ -n "$SNAP" ] && [ -z "$RESTART_COMMAND" ]; then how=snap
    elif [ -d "$HOST/run/systemd/system" ]; then how=systemd
    elif [ -n "$RESTART_COMMAND" ]; then how=command
    else die "$unit config changed, the node has no systemd and SHMKEEPER_RESTART_COMMAND is unset; restart $unit by hand or set it"; fi
  fi
  case "$how" in
    false) log "$unit config changed; restart it to apply"; PENDING=true; return ;;
    systemd)
      # The first of the distribution's units that is active (k3s or k3s-agent).
      set -- $UNITS
      for u in $UNITS; do
        if on_host systemctl is-active --quiet "$u" 2>/dev/null; then set -- "$u"; break; fi
      done
      set -- systemctl restart "$1" ;;
    snap) set -- snap restart "$SNAP" ;;
    command)
      [ -n "$RESTART_COMMAND" ] || die "SHMKEEPER_RESTART_RUNTIME=command needs SHMKEEPER_RESTART_COMMAND"
      set -- sh -c "$RESTART_COMMAND" ;;
    *) die "SHMKEEPER_RESTART_RUNTIME must be auto, systemd, command or false (got: $how)" ;;
  esac
  sock=$HOST$SOCKET
  old=$(socket_id "$sock")
  on_host "$@" || die "$unit config changed but restarting it ($how) failed; restart it by hand"
  # A command may return before the runtime is back (a supervisor restarts
  # it): wait for its new socket, so that this container's own exit is seen
  # by the new runtime rather than lost while it starts.
  i=0
  while [ "$(socket_id "$sock")" = "$old" ] || [ ! -S "$sock" ]; do
    i=$((i + 1))
    [ "$i" -le 120 ] || die "restarted $unit ($how), but its socket $SOCKET did not come back within 60s"
    sleep 0.5
  done
  log "restarted $unit ($how)"
}

# The socket file's inode and change time (ns): a restarted runtime binds a
# new one (inode numbers alone are reused at once).
socket_id() { stat -c '%i %z' "$1" 2>/dev/null || echo gone; }

# register install|uninstall; sets PENDING=true when the runtime was left
# unrestarted after a change (it does not run with the change yet). Called
# outside any condition: set -e stops the script at the first failure.
PENDING=false
register() {
  verb=$1
  runtime=$(detect_runtime)
  profile "$runtime"
  case "$runtime" in
    crio)
      SOCKET=$(crio_socket)
      # The files go under $HOST (--root; the hook directory at its own path
      # there, as the drop-in must not name another), the drop-in into the
      # mounted config directory.
      case "$CONFIG_DIR" in "$HOST"/*) ;; *) die "the CRI-O config directory $CONFIG_DIR must be under $HOST" ;; esac
      files="$CONFIG_DIR/crio.conf.d/99-shmkeeper.conf $HOST/usr/share/containers/oci/hooks.d/shmkeeper.json"
      before=$(checksum $files)
      set -- --root "$HOST" --crio-conf-dir "${CONFIG_DIR#"$HOST"}/crio.conf.d"
      if [ "$verb" = install ]; then
        set -- "$@" --hook-path "$BIN_DIR/shmkeeper-hook" --runtime-path "$(host_oci_runtime)"
        [ "$SET_AS_DEFAULT" = true ] && set -- "$@" --set-as-default
        "$SRC_DIR/shmkeeper" install crio "$@"
      else
        "$SRC_DIR/shmkeeper" uninstall crio "$@"
      fi
      [ "$before" = "$(checksum $files)" ] || restart_runtime crio ;;
    *)
      [ -S "$HOST$SOCKET" ] || die "$runtime: no containerd socket at $SOCKET (wrong distribution? set the runtime)"
      set -- --config "$CONFIG_DIR/${CONFIG##*/}"
      watched=$CONFIG_DIR/${CONFIG##*/}
      if [ "$TEMPLATE" = true ]; then
        set -- "$@" --template-dir "$CONFIG_DIR"
        watched="$CONFIG_DIR/config-v3.toml.tmpl $CONFIG_DIR/config.toml.tmpl"
      fi
      before=$(checksum $watched)
      # Exit 3: the file is as asked but the running containerd (it reads its
      # config only at start; the CLI asks it over CRI) does not have it yet.
      rc=0
      if [ "$verb" = install ]; then
        set -- "$@" --runtime-path "$BIN_DIR/shmkeeper-runtime"
        [ "$SET_AS_DEFAULT" = true ] && set -- "$@" --set-as-default
        "$SRC_DIR/shmkeeper" install containerd "$@" || rc=$?
      else
        "$SRC_DIR/shmkeeper" uninstall containerd "$@" || rc=$?
      fi
      [ "$rc" = 0 ] || [ "$rc" = 3 ] || die "shmkeeper $verb containerd failed (exit $rc; see above)"
      if [ "$rc" = 3 ] || [ "$before" != "$(checksum $watched)" ]; then restart_runtime "$runtime"; fi ;;
  esac
}

node_label() {
  [ "$NODE_LABEL" = true ] || return 0
  set -- "$1"
  [ -z "${SHMKEEPER_SERVICE_ACCOUNT_DIR:-}" ] || set -- "$@" --service-account-dir "$SHMKEEPER_SERVICE_ACCOUNT_DIR"
  "$SRC_DIR/shmkeeper-node-label" "$@" || die "could not $1 the node's readiness label (see above)"
}

case "${1:-}" in
  install)
    copy_binaries
    if [ "$INTEGRATION" = nri ]; then log "nri: nothing installed into the runtime (the agent is its NRI plugin)"; exit 0; fi
    if [ "$AGENT_ONLY" = true ]; then log "agent-only mode: the runtime config is left alone"; exit 0; fi
    register install
    if [ "$PENDING" = true ]; then
      log "not labelling the node ready: the runtime runs without shmkeeper until it is restarted"
    else
      node_label set
    fi ;;
  uninstall)
    if [ "$INTEGRATION" = nri ]; then log "nri: nothing registered with the runtime"; exit 0; fi
    if [ "$AGENT_ONLY" = true ]; then log "agent-only mode: nothing registered"; exit 0; fi
    node_label remove
    register uninstall
    log "shmkeeper is unregistered from this node's runtime" ;;
  idle) exec sleep 2147483647 ;;
  *) die "usage: node-setup.sh install|uninstall|idle" ;;
esac
