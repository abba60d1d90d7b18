"""The DaemonSet on a node, without an API server.

`kubectl kustomize` renders the base, deploy/image/build-offline.sh builds the
image, and this test plays the kubelet for the DaemonSet's pod on a node of its
own: a mount, PID and network namespace in which /etc, /usr/local and /var/log
are overlays of the host's (writes land in a tmpfs of the test's) and /run is
a directory of the test's, with a private containerd kept running by a
runit-style supervisor loop (no systemd). The pod template is translated to
CRI calls the way the kubelet does it (sandbox with hostPID and the pod's
labels, the init container run to completion first, hostPath volumes checked
as `type: Directory` and mounted with their propagation, the ConfigMap volume
written to a kubelet-style directory, env, privileges, memory limit, probes
run as the kubelet runs them). The one deviation: pods use the node's network
namespace, as there is no CNI here.

Then, on that node: the init container installs shmkeeper into containerd's
config and restarts containerd through SHMKEEPER_RESTART_COMMAND; workload pods
with the RuntimeClass's handler get their annotated size and the preload
(ENOSPC instead of SIGBUS); the agent inside the DaemonSet pod reports them
with namespace/name/uid and usage, answers /healthz and /metrics on the
Service's port, and `shmkeeper pods` on the node reaches its socket; a
liveness kill (container recreated without the init container) leaves the node
registered; deleting the pod leaves workloads and the runtime config alone.
The install container labels the node shmkeeper.io/runtime=ready only after
the restart, and the uninstall container removes the label: the requests go to
tests/lib/fake_kube_api.py in the node's network namespace (there is no API
server: it checks the request's shape, TLS and token as the kubelet projects
them, not Kubernetes). A second node is shaped like k3s on an immutable host:
read-only /usr, containerd's config.toml rendered from config.toml.tmpl at
every (re)start the way k3s does it (tests/helpers/k3srender), shmkeeper
installed under /opt/shmkeeper (components/k3s + components/install-root-opt).
A third runs components/report-only: the agent with three capabilities
instead of privileged (the CRI security context the kubelet would send)."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from harness import (BUILD, CRI_TOOL, PAUSE_IMAGE, REPO, SHMGROW, df_kib, glibc_rootfs, require, run, wait_for,
                     write_image_archive)
from k8s_render import build_k3srender, kustomize, overlay

GiB = 1 << 30
MiB = 1 << 20
RESTART_COMMAND = 'kill "$(cat /run/containerd.pid)"'  # the supervisor below starts it again
GLIBC_IMAGE = "shmkeeper.test/glibc:1"

FAKE_API = REPO / "tests" / "lib" / "fake_kube_api.py"
K3S_DIR = "/var/lib/rancher/k3s/agent/etc/containerd"

# The node's init: overlays and /run, then containerd under a supervisor loop.
# FLAVOR vanilla: /etc/containerd/config.toml. FLAVOR k3s: an immutable host
# running k3s: /usr read-only, /opt and /var/lib writable, and before every
# containerd start config.toml is rendered from the template (k3srender, as
# k3s does at every start).
NODE_SH = r"""
set -eu
N=$1 FLAVOR=$2
mount -t tmpfs -o size=512m tmpfs "$N/upper"
if [ "$FLAVOR" = k3s ]; then overlays="etc var/log opt var/lib"; else overlays="etc usr/local var/log"; fi
for p in $overlays; do
  n=$(echo "$p" | tr / _)
  mkdir -p "$N/upper/$n/u" "$N/upper/$n/w"
  mount -t overlay overlay -o "lowerdir=/$p,upperdir=$N/upper/$n/u,workdir=$N/upper/$n/w" "/$p"
done
mount --bind "$N/run" /run
mount --make-rshared /  # as systemd leaves a node's mounts; peers only within this namespace
ip link set lo up
if [ "$FLAVOR" = k3s ]; then
  mount --bind /usr /usr
  mount -o remount,bind,ro /usr
  CONF=/var/lib/rancher/k3s/agent/etc/containerd/config.toml
  mkdir -p "${CONF%/*}"
  rm -rf /etc/shmkeeper /opt/shmkeeper "${CONF%/*}"/*.tmpl
else
  CONF=/etc/containerd/config.toml
  mkdir -p /etc/containerd
  cp "$N/containerd.toml" "$CONF"
  rm -rf /etc/shmkeeper /usr/local/bin/shmkeeper* /usr/local/lib/shmkeeper
fi
touch "$N/ready"
while [ ! -e "$N/halt" ]; do
  [ "$FLAVOR" != k3s ] || "$N/k3srender" "${CONF%/*}" "$N/containerd.toml" >> "$N/containerd.log" 2>&1
  containerd --config "$CONF" >> "$N/containerd.log" 2>&1 &
  echo $! > /run/containerd.pid
  echo start >> "$N/starts"
  wait $! || true
done
"""


def parse_quantity(q):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", str(q))
    return int(m.group(1)) * {None: 1, "Ki": 1 << 10, "Mi": MiB, "Gi": GiB}[m.group(2)]


class Node:
    """A node of the test's own (see the module docstring); the kubelet's view
    of its paths is the node's, the test reaches them through `outside()`."""

    def __init__(self, base: Path, flavor="vanilla", name="node-1"):
        self.base, self.flavor, self.name = base, flavor, name
        for d in ("run", "upper", "root", "opt", "kubelet", "logs", "api"):
            (base / d).mkdir(parents=True)
        k3s = flavor == "k3s"
        sock = "/run/k3s/containerd/containerd.sock" if k3s else "/run/containerd/containerd.sock"
        self.config_path = K3S_DIR + "/config.toml" if k3s else "/etc/containerd/config.toml"
        if k3s:
            shutil.copy(build_k3srender(), base / "k3srender")
        # For k3s this is the template k3s would have built in ("base"), rendered at every start.
        (base / "containerd.toml").write_text(("# File generated by {{ .Program }}. DO NOT EDIT.\n" if k3s else "") +
                                              f"""version = 2
root = "{base}/root"
state = "{'/run/k3s/containerd' if k3s else '/run/containerd'}"
[grpc]
  address = "{sock}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.internal.v1.opt"]
  path = "{base}/opt"
""")
        (base / "node.sh").write_text(NODE_SH)
        self.sock = self.outside(sock)
        self.endpoint = f"unix://{self.sock}"
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "--net", "--pid", "--fork", "--mount-proc", "--",
             "catatonit", "--", "sh", str(base / "node.sh"), str(base), flavor],
            stdout=open(base / "node.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
        self.init_pid = wait_for(self._init_pid, timeout=10, what="the node's init")
        wait_for(lambda: self.cri("version", check=False).returncode == 0, timeout=60, interval=0.3,
                 what="containerd on the node: " + self.tail("containerd.log"))
        self.initial_config = self.sh("cat", self.config_path).stdout
        # The API endpoint the pods reach (KUBERNETES_SERVICE_HOST/PORT) in the node's network namespace.
        self.api_proc = subprocess.Popen(["nsenter", "-t", str(self.init_pid), "-n", "--", "/usr/bin/python3",
                                          str(FAKE_API), str(base / "api")], stdout=open(base / "api.log", "w"),
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.api_url = wait_for(lambda: (base / "api" / "url").exists() and (base / "api" / "url").read_text(),
                                timeout=30, what="the fake API endpoint: " + self.tail("api.log"))
        self.sa_dir = base / "api" / "fake-kube-api" / "serviceaccount"

    def api_state(self):
        return json.loads((self.base / "api" / "state.json").read_text())

    def labels(self):
        return self.api_state()["labels"].get(self.name, {})

    def _init_pid(self):
        if self.proc.poll() is not None:
            raise AssertionError("the node exited:\n" + self.tail("node.log"))
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        pids = children.read_text().split() if children.exists() else []
        return int(pids[0]) if pids and (self.base / "ready").exists() else None

    def tail(self, name, n=3000):
        p = self.base / name
        return p.read_text()[-n:] if p.exists() else ""

    def outside(self, path):
        """Where the test sees the node's `path` (only /run differs)."""
        return self.base / "run" / Path(path).relative_to("/run") if path.startswith("/run") else Path(path)

    def sh(self, *cmd, check=True, timeout=120):
        """A command on the node (its mount, PID and network namespaces)."""
        return run(["nsenter", "-t", self.init_pid, "-m", "-n", "-p", "--", *cmd], check=check, timeout=timeout)

    def cri(self, *args, check=True, timeout=180):
        return run([CRI_TOOL, "-r", self.endpoint, *args], check=check, timeout=timeout)

    def ctr(self, *args):
        return run(["ctr", "--address", self.sock, "-n", "k8s.io", *args], timeout=300)

    def containerd_starts(self):
        return len(self.tail("starts").split())

    def stop(self):
        if self.proc.poll() is None:
            for p in json.loads(self.cri("pods", check=False).stdout or "{}").get("items", []):
                self.cri("stopp", p["id"], check=False)
                self.cri("rmp", p["id"], check=False)
            (self.base / "halt").touch()
            os.kill(self.init_pid, signal.SIGKILL)  # the PID namespace goes with its init, its mounts with it
            self.proc.wait(timeout=30)
        if self.api_proc.poll() is None:
            self.api_proc.kill()
            self.api_proc.wait(timeout=30)


class Kubelet:
    """Translates pod specs into CRI calls on `node`, as the kubelet does."""

    PROPAGATION = {None: "PROPAGATION_PRIVATE", "None": "PROPAGATION_PRIVATE",
                   "HostToContainer": "PROPAGATION_HOST_TO_CONTAINER", "Bidirectional": "PROPAGATION_BIDIRECTIONAL"}

    def __init__(self, node: Node, configmaps):
        self.node, self.configmaps = node, configmaps

    def run_pod(self, name, namespace, template, handler=""):
        """RunPodSandbox, then the init containers to completion, then the
        containers. Returns the pod's record (ids, configs)."""
        spec, meta = template["spec"], template.get("metadata", {})
        uid = str(uuid.uuid4())
        pod = {"name": name, "namespace": namespace, "uid": uid, "spec": spec, "containers": {},
               "dir": self.node.base / "kubelet" / "pods" / uid}
        pod["dir"].mkdir(parents=True)
        pod["volumes"] = self.volumes(pod)
        privileged = any(c.get("securityContext", {}).get("privileged")
                         for c in spec.get("containers", []) + spec.get("initContainers", []))
        # Node network (no CNI here, see the module docstring): like the kubelet for hostNetwork pods, no hostname.
        pod["ns_options"] = {"network": "NODE",
                             "pid": "NODE" if spec.get("hostPID") else "POD",
                             "ipc": "NODE" if spec.get("hostIPC") else "POD"}
        labels = dict(meta.get("labels", {}), **{"io.kubernetes.pod.name": name,
                                                  "io.kubernetes.pod.namespace": namespace,
                                                  "io.kubernetes.pod.uid": uid})
        config = {"metadata": {"name": name, "namespace": namespace, "uid": uid, "attempt": 0},
                  "log_directory": str(self.node.base / "logs" / f"{namespace}_{name}_{uid}"),
                  "labels": labels, "annotations": meta.get("annotations", {}),
                  "linux": {"security_context": {"namespace_options": pod["ns_options"], "privileged": privileged}}}
        # The pod's memory limit when every container has one (the kubelet's sandbox resources).
        limits = [c.get("resources", {}).get("limits", {}).get("memory") for c in spec["containers"]]
        if all(limits):
            config["linux"]["resources"] = {"memory_limit_in_bytes": str(sum(map(parse_quantity, limits)))}
        pod["config_path"] = pod["dir"] / "sandbox.json"
        pod["config_path"].write_text(json.dumps(config))
        pod["id"] = self.node.cri("runp", pod["config_path"], *([handler] if handler else [])).stdout.strip()
        pod["init_attempts"] = {}
        for c in spec.get("initContainers", []):
            self.run_init(pod, c)
        for c in spec["containers"]:
            self.start_container(pod, c)
        return pod

    def run_init(self, pod, c, attempts=3):
        """An init container to completion; a failed one runs again (the
        pod's restartPolicy is Always), as the kubelet does."""
        for attempt in range(attempts):
            if attempt:
                self.node.cri("rm", pod["containers"][c["name"]], check=False)
            cid = self.start_container(pod, c, attempt=attempt)
            status = wait_for(lambda: self.exited(cid), timeout=120, interval=0.5,
                              what=f"init container {c['name']}: " + self.logs(pod, c["name"], attempt))
            pod["init_attempts"][c["name"]] = attempt + 1
            pod.setdefault("init_log", []).append((status, self.logs(pod, c["name"], attempt)))
            if status.get("exitCode", 0) == 0:
                return
        raise AssertionError(f"init container {c['name']} failed {attempts} times: {status}\n"
                             + self.logs(pod, c["name"], attempts - 1))

    def volumes(self, pod):
        out = {}
        for v in pod["spec"].get("volumes", []):
            if "hostPath" in v:
                path, kind = v["hostPath"]["path"], v["hostPath"].get("type", "")
                if kind == "Directory":
                    assert self.node.sh("test", "-d", path, check=False).returncode == 0, \
                        f"hostPath {path} is not a directory on the node"
                elif kind == "DirectoryOrCreate":
                    self.node.sh("mkdir", "-p", "-m", "0755", path)
                out[v["name"]] = path
            elif "configMap" in v:
                d = pod["dir"] / "volumes" / "kubernetes.io~configmap" / v["name"]
                d.mkdir(parents=True)
                for key, text in self.configmaps[v["configMap"]["name"]].items():
                    (d / key).write_text(text)
                out[v["name"]] = str(d)
            elif "projected" in v:
                # The service account token (the fake API's) and the cluster CA (kube-root-ca.crt).
                d = pod["dir"] / "volumes" / "kubernetes.io~projected" / v["name"]
                d.mkdir(parents=True)
                for src in v["projected"]["sources"]:
                    if "serviceAccountToken" in src:
                        (d / src["serviceAccountToken"]["path"]).write_text((self.node.sa_dir / "token").read_text())
                    else:
                        assert src["configMap"]["name"] == "kube-root-ca.crt", src
                        for item in src["configMap"]["items"]:
                            (d / item["path"]).write_text((self.node.sa_dir / "ca.crt").read_text())
                out[v["name"]] = str(d)
            else:
                raise AssertionError(f"volume kind not played by this kubelet: {v}")
        return out

    def env(self, c):
        """The container's env as the kubelet gives it: values, spec.nodeName, and the API's address."""
        out = []
        for e in c.get("env", []):
            if "valueFrom" in e:
                assert e["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}, e
                out.append({"key": e["name"], "value": self.node.name})
            else:
                out.append({"key": e["name"], "value": e.get("value", "")})
        host, port = self.node.api_url.removeprefix("https://").rsplit(":", 1)
        return out + [{"key": "KUBERNETES_SERVICE_HOST", "value": host}, {"key": "KUBERNETES_SERVICE_PORT", "value": port}]

    def start_container(self, pod, c, attempt=0):
        sc = c.get("securityContext", {})
        limit = c.get("resources", {}).get("limits", {}).get("memory")
        config = {"metadata": {"name": c["name"], "attempt": attempt}, "image": {"image": c["image"]},
                  "command": c.get("command", []), "args": c.get("args", []),
                  "envs": self.env(c),
                  "mounts": [{"container_path": m["mountPath"], "host_path": pod["volumes"][m["name"]],
                              "readonly": bool(m.get("readOnly")),
                              "propagation": self.PROPAGATION[m.get("mountPropagation")]}
                             for m in c.get("volumeMounts", [])],
                  "labels": {"io.kubernetes.container.name": c["name"], "io.kubernetes.pod.name": pod["name"],
                             "io.kubernetes.pod.namespace": pod["namespace"], "io.kubernetes.pod.uid": pod["uid"]},
                  "log_path": f"{c['name']}/{attempt}.log",
                  "linux": {"resources": {"memory_limit_in_bytes": parse_quantity(limit)} if limit else {},
                            "security_context": self.security_context(sc, pod)}}
        path = pod["dir"] / f"{c['name']}-{attempt}.json"
        path.write_text(json.dumps(config))
        cid = self.node.cri("create", pod["id"], path, pod["config_path"]).stdout.strip()
        p = self.node.cri("start", cid, check=False)
        if p.returncode != 0:
            # The install container may restart containerd before StartContainer has answered: once it is
            # back, the container's state says whether it started (the kubelet reads it the same way).
            assert "cri-tool: 14:" in p.stderr, p.stderr
            state = wait_for(lambda: (q := self.node.cri("inspect", cid, check=False)).returncode == 0
                             and json.loads(q.stdout)["status"].get("state", "CONTAINER_CREATED"), timeout=60,
                             what="containerd back after a restart")
            assert state != "CONTAINER_CREATED", p.stderr
        pod["containers"][c["name"]] = cid
        return cid

    def security_context(self, sc, pod):
        """The container's securityContext in CRI terms, as the kubelet maps it."""
        out = {"privileged": bool(sc.get("privileged")), "namespace_options": pod["ns_options"]}
        caps = sc.get("capabilities", {})
        if caps:
            out["capabilities"] = {"add_capabilities": caps.get("add", []), "drop_capabilities": caps.get("drop", [])}
        if sc.get("allowPrivilegeEscalation") is False:
            out["no_new_privs"] = True
        for field, key in (("seccompProfile", "seccomp"), ("appArmorProfile", "apparmor")):
            kind = sc.get(field, {}).get("type")
            if kind:
                out[key] = {"profile_type": {"RuntimeDefault": "RuntimeDefault", "Unconfined": "Unconfined"}[kind]}
            elif key == "seccomp" and not out["privileged"]:
                out[key] = {"profile_type": "Unconfined"}  # the kubelet's default (no SeccompDefault)
        return out

    def exited(self, cid):
        """The container's status once it has exited, or once containerd lost
        it (UNKNOWN: a restart raced with its exit; the kubelet runs it again)."""
        p = self.node.cri("inspect", cid, check=False)  # fails while containerd restarts: ask again
        status = json.loads(p.stdout)["status"] if p.returncode == 0 else {}
        if status.get("state") == "CONTAINER_UNKNOWN":
            return dict(status, exitCode=status.get("exitCode") or 255)
        return status if status.get("state") == "CONTAINER_EXITED" else None

    def logs(self, pod, name, attempt=0):
        p = self.node.base / "logs" / f"{pod['namespace']}_{pod['name']}_{pod['uid']}" / name / f"{attempt}.log"
        return p.read_text()[-3000:] if p.exists() else "(no log)"

    def kill_container(self, pod, name):
        """What the kubelet does to a container it stops: preStop, then StopContainer."""
        c = next(c for c in pod["spec"]["containers"] if c["name"] == name)
        pre = c.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command")
        if pre:
            self.node.cri("exec", pod["containers"][name], *pre, check=False)
        self.node.cri("stop", pod["containers"][name])

    def restart_container(self, pod, name, attempt):
        """A liveness kill: the container is stopped and created again; the
        init containers do not run again."""
        self.kill_container(pod, name)
        self.node.cri("rm", pod["containers"][name])
        c = next(c for c in pod["spec"]["containers"] if c["name"] == name)
        return self.start_container(pod, c, attempt=attempt)

    def delete_pod(self, pod):
        for name in pod["spec"]["containers"]:
            self.kill_container(pod, name["name"])
        self.node.cri("stopp", pod["id"])
        self.node.cri("rmp", pod["id"])

    def probe(self, pod, name, kind):
        """Runs the container's `kind` probe as the kubelet does; True if it passes."""
        c = next(c for c in pod["spec"]["containers"] if c["name"] == name)
        probe = c[kind]
        if "exec" in probe:
            return self.node.cri("exec", pod["containers"][name], *probe["exec"]["command"], check=False).returncode == 0
        get = probe["httpGet"]
        port = get["port"]
        if isinstance(port, str):
            port = next(p["containerPort"] for p in c["ports"] if p["name"] == port)
        return self.http(port, get["path"]).startswith("200 ")

    def http(self, port, path):
        """GET on the pod's address (the node's loopback here): "STATUS BODY"."""
        p = self.node.sh("curl", "-s", "-m", "5", "-w", "\n%{http_code}", f"http://127.0.0.1:{port}{path}",
                         check=False)
        body, _, code = p.stdout.rpartition("\n")
        return f"{code} {body}"


def workload(name, annotations=None, command=("sleep", "3600"), image=PAUSE_IMAGE, memory_limit=None):
    c = {"name": "main", "image": image, "command": list(command)}
    if memory_limit:
        c["resources"] = {"limits": {"memory": memory_limit}}
    return {"metadata": {"labels": {"app": name}, "annotations": annotations or {}}, "spec": {"containers": [c]}}


# The operator's overlay for a node without systemd: the restart command.
RESTART_PATCH = {"patches": [{"target": {"kind": "DaemonSet", "name": ds}, "patch": yaml.safe_dump({
    "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": ds},
    "spec": {"template": {"spec": {"initContainers": [{"name": init, "env": [
        {"name": "SHMKEEPER_RESTART_COMMAND", "value": RESTART_COMMAND}]}]}}}})}
    for ds, init in (("shmkeeper", "install"), ("shmkeeper-uninstall", "uninstall"))]}


def render(tmp_path, components):
    require(shutil.which("containerd") is not None and shutil.which("catatonit") is not None,
            "containerd and catatonit are needed")
    require(CRI_TOOL.exists() and SHMGROW.exists(), "cri-tool and shmgrow must be built")
    require((BUILD / "plugin" / "shmkeeper-static").exists(), "shmkeeper-static must be built")
    return kustomize(overlay(tmp_path, components, RESTART_PATCH))


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return render(tmp_path_factory.mktemp("overlay"), [])


def by(docs, kind, name=None):
    return next(d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name))


@pytest.fixture(scope="module")
def images(tmp_path_factory, rendered, rootfs, root_and_runc):
    """The node image (built offline), the pause image and a glibc image."""
    d = tmp_path_factory.mktemp("images")
    tag = by(rendered, "DaemonSet", "shmkeeper")["spec"]["template"]["spec"]["containers"][0]["image"]
    run([REPO / "deploy" / "image" / "build-offline.sh", BUILD, d / "shmkeeper.tar", tag], timeout=300)
    write_image_archive(rootfs, PAUSE_IMAGE, ["/bin/sleep", "2147483647"], d / "pause.tar")
    write_image_archive(glibc_rootfs(tmp_path_factory.mktemp("glibc")), GLIBC_IMAGE, ["/bin/sh"], d / "glibc.tar")
    return [d / "shmkeeper.tar", d / "pause.tar", d / "glibc.tar"]


def start_node(base, images, flavor="vanilla"):
    n = Node(base, flavor)
    try:
        for archive in images:
            n.ctr("images", "import", archive)
    except BaseException:
        n.stop()
        raise
    return n


@pytest.fixture(scope="module")
def node(tmp_path_factory, images):
    n = start_node(tmp_path_factory.mktemp("node"), images)
    yield n
    n.stop()


@pytest.fixture(scope="module")
def kubelet(node, rendered):
    cms = {d["metadata"]["name"]: d["data"] for d in rendered if d["kind"] == "ConfigMap"}
    return Kubelet(node, cms)


@pytest.fixture(scope="module")
def agent_pod(kubelet, rendered, node):
    ds = by(rendered, "DaemonSet", "shmkeeper")
    starts = node.containerd_starts()
    pod = kubelet.run_pod("shmkeeper-node", ds["metadata"]["namespace"], ds["spec"]["template"])
    pod["containerd_restarts"] = node.containerd_starts() - starts
    wait_for(lambda: node.cri("version", check=False).returncode == 0, timeout=30, what="containerd back")
    wait_for(lambda: kubelet.probe(pod, "agent", "readinessProbe"), timeout=60, interval=0.5,
             what="the agent's readiness probe")
    return pod


def handler(rendered):
    return by(rendered, "RuntimeClass")["handler"]


def test_init_installs_shmkeeper_and_restarts_containerd_without_systemd(node, agent_pod, kubelet):
    cfg = node.sh("cat", "/etc/containerd/config.toml").stdout
    assert "BinaryName = '/usr/local/bin/shmkeeper-runtime'" in cfg
    # Restarted exactly once, by the command: a second run of the init container (the kubelet's answer when
    # containerd lost the first one's exit in its restart) finds the config installed and restarts nothing.
    assert agent_pod["containerd_restarts"] == 1, (node.tail("starts"), agent_pod["init_log"])
    assert "statically linked" in node.sh("file", "/usr/local/bin/shmkeeper").stdout
    assert node.sh("test", "-f", "/usr/local/lib/shmkeeper/libshmkeeper-preload.so").returncode == 0
    assert node.sh("cat", "/etc/shmkeeper/config.yaml").stdout == kubelet.configmaps[
        next(iter(kubelet.configmaps))]["config.yaml"]
    assert kubelet.probe(agent_pod, "agent", "livenessProbe")
    # Labelled ready once, after the restart, with the pod's token over TLS.
    assert node.labels() == {"shmkeeper.io/runtime": "ready"}
    [req] = node.api_state()["requests"]
    assert req["path"] == f"/api/v1/nodes/{node.name}" and req["headers"]["Authorization"].startswith("Bearer ")
    log = "".join(text for _, text in agent_pod["init_log"])
    assert log.index("restarted containerd (command)") < log.index("labelled shmkeeper.io/runtime=ready"), log


def run_workload(kubelet, rendered, name, **kw):
    return kubelet.run_pod(name, "default", workload(name, **kw), handler=handler(rendered))


def test_workload_pods_get_their_size_and_the_preload(kubelet, rendered, agent_pod, node):
    pod = run_workload(kubelet, rendered, "trainer", annotations={"shmkeeper.io/shm-size": "2Gi"})
    out = node.cri("exec", pod["containers"]["main"], "df", "-k", "/dev/shm").stdout
    assert df_kib(out) == 2 * GiB // 1024
    node.cri("exec", pod["containers"]["main"], "dd", "if=/dev/zero", "of=/dev/shm/data", "bs=1M", "count=24")
    # No annotation, a 1 GiB memory limit: `auto` gives the pod its limit (as for a memory-backed emptyDir).
    limited = run_workload(kubelet, rendered, "limited", memory_limit="1Gi")
    assert df_kib(node.cri("exec", limited["containers"]["main"], "df", "-k", "/dev/shm").stdout) == GiB // 1024
    # The preload is the container's own process's (execs get containerd's copy of the spec, without it).
    glibc = run_workload(kubelet, rendered, "glibc", annotations={"shmkeeper.io/shm-size": "32Mi"}, image=GLIBC_IMAGE,
                         command=["sh", "-c", "shmgrow env; shmgrow create big 64; echo exit=$?; sleep 3600"])
    log = wait_for(lambda: (t := kubelet.logs(glibc, "main")) and "exit=" in t and t, timeout=30,
                   what="the glibc pod's output")
    assert "stdout F /run/shmkeeper/libshmkeeper-preload.so" in log, log
    assert "ftruncate: errno 28" in log and "exit=28" in log, log  # ENOSPC, not SIGBUS (exit=135)
    assert "shmkeeper: cannot fit 64.0 MiB for /dev/shm/big" in log, log

    # The agent in the DaemonSet pod reports the pod; `shmkeeper pods` on the node reaches its socket at the
    # host path the manifest mounts (/run/shmkeeper/agent.sock). A scan that ran while dd was writing lists part of
    # the 24 MiB, so wait for a scan that started after it (the next one shows all of it).
    def listed():
        pods = json.loads(node.sh("/usr/local/bin/shmkeeper", "pods", "-o", "json").stdout).get("pods", [])
        return next((p for p in pods if p.get("namespace") == "default" and p.get("name") == "trainer"
                     and int(p["shm"].get("usedBytes", 0)) >= 24 * MiB), None)
    rec = wait_for(listed, timeout=40, interval=1, what="the agent listing the trainer pod with its 24 MiB")
    assert rec["kind"] == "POD_KIND_KUBERNETES" and rec["uid"] == pod["uid"]
    assert int(rec["shm"]["usedBytes"]) == 24 * MiB and int(rec["shm"]["sizeBytes"]) == 2 * GiB
    assert rec["shm"]["sizedBy"] == "runtime"

    # The Service's endpoint: its targetPort, resolved by name in the agent container as the endpoints
    # controller does.
    target = by(rendered, "Service")["spec"]["ports"][0]["targetPort"]
    agent = next(c for c in agent_pod["spec"]["containers"] if c["name"] == "agent")
    port = next(p["containerPort"] for p in agent["ports"] if p["name"] == target)
    assert kubelet.http(port, "/healthz") == "200 ok\n"
    metrics = kubelet.http(port, "/metrics")
    assert metrics.startswith("200 ") and 'pod="trainer"' in metrics


def test_a_liveness_kill_leaves_the_node_registered(kubelet, rendered, agent_pod, node):
    kubelet.restart_container(agent_pod, "agent", attempt=1)
    wait_for(lambda: kubelet.probe(agent_pod, "agent", "readinessProbe"), timeout=60, interval=0.5,
             what="the restarted agent")
    assert "BinaryName = '/usr/local/bin/shmkeeper-runtime'" in node.sh("cat", "/etc/containerd/config.toml").stdout
    pod = run_workload(kubelet, rendered, "after-restart", annotations={"shmkeeper.io/shm-size": "1Gi"})
    assert df_kib(node.cri("exec", pod["containers"]["main"], "df", "-k", "/dev/shm").stdout) == GiB // 1024
    assert kubelet.probe(agent_pod, "agent", "livenessProbe")


def test_deleting_the_daemonset_pod_leaves_workloads_and_registration(kubelet, rendered, agent_pod, node):
    trainer = json.loads(node.cri("ps").stdout)
    before = node.sh("cat", "/etc/containerd/config.toml").stdout
    starts = node.containerd_starts()
    kubelet.delete_pod(agent_pod)
    assert node.sh("cat", "/etc/containerd/config.toml").stdout == before  # as documented: still registered
    assert node.containerd_starts() == starts
    for c in trainer["containers"]:
        if c["metadata"]["name"] == "main" and c["state"] == "CONTAINER_RUNNING":
            assert node.cri("exec", c["id"], "true", check=False).returncode == 0
    pod = run_workload(kubelet, rendered, "after-delete", annotations={"shmkeeper.io/shm-size": "2Gi"})
    assert df_kib(node.cri("exec", pod["containers"]["main"], "df", "-k", "/dev/shm").stdout) == 2 * GiB // 1024

    # The operator labels the node shmkeeper.io/uninstall=true: the kubelet runs the uninstall DaemonSet's pod.
    un = by(rendered, "DaemonSet", "shmkeeper-uninstall")
    assert un["spec"]["template"]["spec"]["nodeSelector"] == {"shmkeeper.io/uninstall": "true"}
    kubelet.run_pod("shmkeeper-uninstall-node", un["metadata"]["namespace"], un["spec"]["template"])
    assert node.labels() == {}  # no new shmkeeper pod is scheduled here
    assert node.sh("cat", "/etc/containerd/config.toml").stdout == node.initial_config  # the bytes before install
    assert node.containerd_starts() == starts + 1  # restarted once, through the command
    assert node.sh("test", "-x", "/usr/local/bin/shmkeeper-runtime").returncode == 0  # old containers need it
    assert node.cri("exec", pod["containers"]["main"], "true", check=False).returncode == 0  # still running


def test_agent_only_component_sizes_pods_without_touching_the_runtime(tmp_path_factory, images):
    """components/agent-only on a node of its own: containerd's config and
    process are left alone, no RuntimeClass exists, and the agent in the
    DaemonSet pod resizes a plain pod's /dev/shm from its annotation."""
    docs = render(tmp_path_factory.mktemp("agent-only"), ["components/agent-only"])
    assert not [d for d in docs if d["kind"] == "RuntimeClass"]
    n = start_node(tmp_path_factory.mktemp("agent-only-node"), images)
    try:
        kubelet = Kubelet(n, {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"})
        before = n.sh("cat", "/etc/containerd/config.toml").stdout
        ds = by(docs, "DaemonSet", "shmkeeper")
        agent = kubelet.run_pod("shmkeeper-node", ds["metadata"]["namespace"], ds["spec"]["template"])
        assert n.sh("cat", "/etc/containerd/config.toml").stdout == before and n.containerd_starts() == 1
        wait_for(lambda: kubelet.probe(agent, "agent", "readinessProbe"), timeout=60, interval=0.5, what="agent ready")
        pod = kubelet.run_pod("trainer", "default", workload("trainer", annotations={"shmkeeper.io/shm-size": "2Gi"}))
        cid = pod["containers"]["main"]
        wait_for(lambda: df_kib(n.cri("exec", cid, "df", "-k", "/dev/shm").stdout) == 2 * GiB // 1024, timeout=40,
                 interval=1, what="the agent resizing the pod's /dev/shm")

        def listed():
            pods = json.loads(n.sh("/usr/local/bin/shmkeeper", "pods", "-o", "json").stdout).get("pods", [])
            return next((p for p in pods if p.get("name") == "trainer" and p["shm"].get("sizedBy")), None)
        rec = wait_for(listed, timeout=30, interval=1, what="the agent listing the pod")
        assert rec["uid"] == pod["uid"] and rec["shm"]["sizedBy"] == "reconcile"
        assert kubelet.probe(agent, "agent", "livenessProbe")
    finally:
        n.stop()


def test_k3s_node_with_a_read_only_usr(tmp_path_factory, images):
    """components/k3s + components/install-root-opt on a node shaped like k3s
    on an immutable host (see the module docstring): the handler goes into
    config.toml.tmpl (the rendered config is version 2: containerd 1.x), k3s's
    regeneration keeps it, pods get their size, the label follows."""
    docs = render(tmp_path_factory.mktemp("k3s"), ["components/k3s", "components/install-root-opt"])
    rc = by(docs, "RuntimeClass")
    assert rc["scheduling"]["nodeSelector"] == {"shmkeeper.io/runtime": "ready"}
    n = start_node(tmp_path_factory.mktemp("k3s-node"), images, flavor="k3s")
    try:
        assert n.sh("touch", "/usr/local/x", check=False).returncode != 0  # /usr is read-only here
        kubelet = Kubelet(n, {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"})
        ds = by(docs, "DaemonSet", "shmkeeper")
        starts = n.containerd_starts()
        agent = kubelet.run_pod("shmkeeper-node", ds["metadata"]["namespace"], ds["spec"]["template"])
        wait_for(lambda: n.cri("version", check=False).returncode == 0, timeout=30, what="containerd back")
        assert n.containerd_starts() == starts + 1, agent["init_log"]
        tmpl = n.sh("cat", K3S_DIR + "/config.toml.tmpl").stdout
        assert tmpl.startswith('{{ template "base" . }}\n# >>> shmkeeper'), tmpl
        cfg = n.sh("cat", n.config_path).stdout
        assert cfg.startswith("# File generated by k3s.")  # rendered from the template at the restart
        assert "BinaryName = '/opt/shmkeeper/bin/shmkeeper-runtime'" in cfg
        assert n.sh("test", "-f", "/opt/shmkeeper/lib/shmkeeper/libshmkeeper-preload.so").returncode == 0
        assert n.labels() == {"shmkeeper.io/runtime": "ready"}
        pod = kubelet.run_pod("trainer", "default", workload("trainer", annotations={"shmkeeper.io/shm-size": "2Gi"}),
                              handler=rc["handler"])
        assert df_kib(n.cri("exec", pod["containers"]["main"], "df", "-k", "/dev/shm").stdout) == 2 * GiB // 1024
        # k3s restarts (an upgrade, a reboot): config.toml is generated again; the handler is still in it.
        n.sh("sh", "-c", RESTART_COMMAND)
        wait_for(lambda: n.containerd_starts() == starts + 2 and n.cri("version", check=False).returncode == 0,
                 timeout=60, what="containerd restarted")
        assert "BinaryName = '/opt/shmkeeper/bin/shmkeeper-runtime'" in n.sh("cat", n.config_path).stdout
        again = kubelet.run_pod("after-regeneration", "default",
                                workload("after-regeneration", annotations={"shmkeeper.io/shm-size": "1Gi"}),
                                handler=rc["handler"])
        assert df_kib(n.cri("exec", again["containers"]["main"], "df", "-k", "/dev/shm").stdout) == GiB // 1024
        wait_for(lambda: kubelet.probe(agent, "agent", "readinessProbe"), timeout=60, interval=0.5, what="agent ready")
        # Uninstall: the label first, then the template (install created it), then the restart renders the
        # base alone.
        un = by(docs, "DaemonSet", "shmkeeper-uninstall")
        kubelet.run_pod("shmkeeper-uninstall-node", un["metadata"]["namespace"], un["spec"]["template"])
        assert n.labels() == {}
        assert n.sh("test", "-e", K3S_DIR + "/config.toml.tmpl", check=False).returncode != 0
        assert n.sh("cat", n.config_path).stdout == n.initial_config
    finally:
        n.stop()


CAPS = {"CAP_SYS_PTRACE": 19, "CAP_DAC_READ_SEARCH": 2, "CAP_SYS_ADMIN": 21}


def test_report_only_agent_runs_with_three_capabilities(tmp_path_factory, images):
    """components/report-only: the agent container is not privileged, has
    exactly SYS_PTRACE, DAC_READ_SEARCH and SYS_ADMIN, no_new_privs and the
    runtime's default seccomp profile, and still reports a pod's usage."""
    docs = render(tmp_path_factory.mktemp("report-only"), ["components/report-only"])
    n = start_node(tmp_path_factory.mktemp("report-only-node"), images)
    try:
        kubelet = Kubelet(n, {d["metadata"]["name"]: d["data"] for d in docs if d["kind"] == "ConfigMap"})
        ds = by(docs, "DaemonSet", "shmkeeper")
        agent = kubelet.run_pod("shmkeeper-node", ds["metadata"]["namespace"], ds["spec"]["template"])
        wait_for(lambda: n.cri("version", check=False).returncode == 0, timeout=30, what="containerd back")
        wait_for(lambda: kubelet.probe(agent, "agent", "readinessProbe"), timeout=60, interval=0.5,
                 what="the report-only agent's readiness")
        [pid] = n.sh("pgrep", "-x", "shmkeeperd").stdout.split()  # the node's only agent
        status = dict(line.split(":\t", 1) for line in n.sh("cat", f"/proc/{pid}/status").stdout.splitlines()
                      if ":\t" in line)
        assert int(status["CapEff"], 16) == sum(1 << b for b in CAPS.values()), status["CapEff"]
        assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2", status  # filter mode
        pod = kubelet.run_pod("trainer", "default", workload("trainer", annotations={"shmkeeper.io/shm-size": "2Gi"}),
                              handler=by(docs, "RuntimeClass")["handler"])
        n.cri("exec", pod["containers"]["main"], "dd", "if=/dev/zero", "of=/dev/shm/data", "bs=1M", "count=24")

        def listed():
            pods = json.loads(n.sh("/usr/local/bin/shmkeeper", "pods", "-o", "json").stdout).get("pods", [])
            return next((p for p in pods if p.get("name") == "trainer" and int(p["shm"].get("usedBytes", 0)) > 0),
                        None)
        rec = wait_for(listed, timeout=40, interval=1, what="the report-only agent listing the pod's usage")
        assert int(rec["shm"]["usedBytes"]) == 24 * MiB and int(rec["shm"]["sizeBytes"]) == 2 * GiB
        assert kubelet.probe(agent, "agent", "livenessProbe")
    finally:
        n.stop()
