"""What the NRI engine tests share (test_nri.py, test_nri_containerd17.py,
test_nri_lifecycle.py, test_nri_inject.py): a containerd of a Debian root with
NRI switched on (its socket under the test's base), the agent on the host as
its NRI plugin, and pods created as the kubelet does (cri-tool)."""
import contextlib
import json
import signal
import subprocess

from harness import AGENTD, CRI_TOOL, PAUSE_IMAGE, df_kib, require, run, wait_for, write_image_archive

import sidroot


def nri_toml(sock, request_timeout_s=None):
    """containerd's NRI plugin section: on, its socket at `sock`."""
    toml = f"""[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{sock}"
"""
    if request_timeout_s is not None:
        toml += f'  plugin_request_timeout = "{request_timeout_s}s"\n'
    return toml


def with_cri(engine):
    """Gives `engine` its kubelet: engine.cri(*args) runs cri-tool against its CRI endpoint."""
    engine.cri = lambda *a, check=True: run([CRI_TOOL, "-r", engine.endpoint, *a], check=check, timeout=180)
    return engine


@contextlib.contextmanager
def nri_containerd(ns, rootfs, base, version=3, request_timeout_s=None):
    """The root's containerd with NRI on, the pause image imported offline; stopped (pods and all) after."""
    require(CRI_TOOL.exists(), f"cri-tool not built at {CRI_TOOL}")
    engine = sidroot.SidContainerd(ns, base, PAUSE_IMAGE, version=version)
    engine.nri_sock = engine.base / "nri.sock"
    engine.extra_config = nri_toml(engine.nri_sock, request_timeout_s)
    engine.write_config()
    engine.start()
    try:
        archive = write_image_archive(rootfs, PAUSE_IMAGE, ["/bin/sleep", "2147483647"], engine.base / "pause.tar")
        engine.ctr("images", "import", archive)
        yield with_cri(engine)
    finally:
        engine.stop(cri=getattr(engine, "cri", None))


@contextlib.contextmanager
def agent_running(agent):
    """`agent` started for the block, stopped after."""
    agent.start()
    try:
        yield agent
    finally:
        agent.stop()


@contextlib.contextmanager
def pod_maker(make_pod):
    """A factory of pods (make_pod(*args, **kw)) that removes every pod it made after the block."""
    made = []

    def make(*a, **kw):
        made.append(make_pod(*a, **kw))
        return made[-1]
    try:
        yield make
    finally:
        for p in made:
            p.remove()


class NriAgent:
    """shmkeeperd on the host with agent.nri.socket set."""

    def __init__(self, base, nri_sock):
        self.base = base
        base.mkdir(parents=True, exist_ok=True)
        self.sock = base / "agent.sock"
        self.config = base / "agent.yaml"
        self.log = base / "agent.log"
        self.config.write_text(f"""shm:
  default: auto
  max: 4Gi
log:
  path: {base}/decisions.log
agent:
  socket: {self.sock}
  stateDir: {base}/state
  metricsAddress: 127.0.0.1:0
  eventSocket: ""
  dockerSocket: ""
  criSocket: none
  nri:
    socket: {nri_sock}
""")
        self.proc = None

    def start(self):
        seen = len(self.lines()) if self.log.exists() else 0
        self.proc = subprocess.Popen([str(AGENTD), "--config", str(self.config)], stdout=open(self.log, "a"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_log("NRI: registered", after=seen)
        return self

    def lines(self):
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")]

    def wait_log(self, text, after=0, timeout=60):
        def seen():
            if self.proc.poll() is not None:
                raise AssertionError("shmkeeperd exited:\n" + self.log.read_text()[-3000:])
            return [m for m in self.lines()[after:] if text in m.get("msg", "")]
        return wait_for(seen, timeout=timeout, interval=0.1, what=f"agent log line {text!r}")

    def metrics(self):
        import urllib.request
        port = [m["metrics_port"] for m in self.lines() if m.get("msg") == "serving"][-1]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines() if line and not line.startswith("#")}

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=30)


class Pod:
    """A pod sandbox and its containers, created as the kubelet does, on the default handler."""

    def __init__(self, engine, name, annotations=None, memory=None):
        self.engine, self.name = engine, name
        self.dir = engine.base / "pods" / name
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = {"metadata": {"name": name, "namespace": "nri", "uid": f"uid-nri-{name}"},
                       "annotations": annotations or {},
                       "linux": {"security_context": {"namespace_options": {"network": "NODE"}}}}
        if memory:
            self.config["linux"]["resources"] = {"memory_limit_in_bytes": memory}
        self.config_path = self.dir / "pod.json"
        self.config_path.write_text(json.dumps(self.config))
        self.id = engine.cri("runp", self.config_path).stdout.strip()
        self.containers = {}
        self.memory = memory

    def create(self, name, check=True, mounts=()):
        """Creates and starts a container whose first command records df -k /dev/shm."""
        cfg = {"metadata": {"name": name}, "image": {"image": PAUSE_IMAGE},
               "command": ["sh", "-c", f"df -k /dev/shm > /dev/shm/first-df-{name}; exec sleep 600"],
               "mounts": [{"container_path": c, "host_path": str(h)} for c, h in mounts]}
        if self.memory:
            cfg["linux"] = {"resources": {"memory_limit_in_bytes": self.memory}}
        path = self.dir / f"{name}.json"
        path.write_text(json.dumps(cfg))
        p = self.engine.cri("create", self.id, path, self.config_path, check=check)
        if p.returncode != 0:
            return p
        cid = p.stdout.strip()
        self.engine.cri("start", cid)
        self.containers[name] = cid
        return p

    def exec(self, name, *cmd):
        return self.engine.cri("exec", self.containers[name], *cmd)

    def first_df_kib(self, name):
        """/dev/shm's size as the container's first command saw it."""
        out = wait_for(lambda: self.exec(name, "cat", f"/dev/shm/first-df-{name}").stdout, timeout=30,
                       what=f"{name}'s first df")
        return df_kib(out)

    def remove(self):
        self.engine.cri("stopp", self.id, check=False)
        self.engine.cri("rmp", self.id, check=False)
