"""What the engines stage's tests share: the build's binaries used inside the
sid root, the image name, and the static CLI run there."""
import json

from harness import BUILD, CRI_TOOL, PAUSE_IMAGE, run

STATIC_CLI = BUILD / "plugin" / "shmkeeper-static"
RUNTIME = BUILD / "plugin" / "shmkeeper-runtime"
HOOK = BUILD / "plugin" / "shmkeeper-hook"
IMAGE = "localhost/shmk-busybox:engines"
MiB = 1 << 20


def shmkeeper(ns, *args, check=True):
    """The static CLI (the Debian 12 one does not start on sid) inside the sid root."""
    return ns.run([STATIC_CLI, *args], check=check)


def cri(engine, *args, check=True):
    """cri-tool (tests/helpers/cri_tool.cc, the kubelet's calls) on the host against `engine`'s CRI socket."""
    return run([CRI_TOOL, "-r", engine.endpoint, *args], check=check, timeout=180)


class Pod:
    """One pod sandbox and its containers, created the kubelet's way."""

    def __init__(self, engine, name, annotations=None):
        self.engine = engine
        self.dir = engine.base / "pods" / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = self.dir / "pod.json"
        self.config.write_text(json.dumps({
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "annotations": annotations or {}, "labels": {"app": name},
            "linux": {"security_context": {"namespace_options": {"network": "NODE"}}}}))
        self.id = None
        self.containers = {}

    def run(self, check=True):
        p = cri(self.engine, "runp", self.config, check=check)
        self.id = p.stdout.strip() if p.returncode == 0 else None
        return p

    def container(self, name, *cmd):
        path = self.dir / f"{name}.json"
        path.write_text(json.dumps({"metadata": {"name": name}, "image": {"image": PAUSE_IMAGE}, "command": list(cmd)}))
        cid = cri(self.engine, "create", self.id, path, self.config).stdout.strip()
        cri(self.engine, "start", cid)
        self.containers[name] = cid
        return cid

    def exec(self, name, *cmd):
        return cri(self.engine, "exec", self.containers[name], *cmd)

    def remove(self):
        if self.id:
            cri(self.engine, "stopp", self.id, check=False)
            cri(self.engine, "rmp", self.id, check=False)
            self.id = None


def hook_config(pm, default="256Mi"):
    """The hook's policy for podman `pm`: shm.default `default` (None: auto), max 1Gi."""
    policy = f"  default: {default}\n" if default else ""
    pm.config.write_text(f"shm:\n{policy}  max: 1Gi\nlog:\n  path: {pm.log}\n")
