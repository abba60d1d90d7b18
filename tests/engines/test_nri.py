"""The agent as an NRI plugin of Debian sid's containerd 2.1 (NRI on by
default), with nothing installed into the runtime: the default runc handler,
no `shmkeeper install`, no RuntimeClass. The kubelet is played over CRI
(cri-tool); the agent is the Debian 12 build, run on the host, connected to
containerd's NRI socket. containerd runs in the sid namespace
(tests/engines/sidroot.py), whose mounts the host does not see: the agent
sizes the pod's tmpfs in the runtime's mount namespace (the NRI socket's
peer). Each container's first command records `df -k /dev/shm`, so a size
is the one the container's first process saw, not one applied later."""
import json
import signal
import subprocess

import pytest

from harness import AGENTD, CLI, CRI_TOOL, PAUSE_IMAGE, df_kib, require, run, wait_for, write_image_archive

import sidroot

MiB = 1 << 20
GiB = 1 << 30
SHM_MAX = 4 * GiB  # the agent's policy: shm.default auto, shm.max 4Gi


@pytest.fixture(scope="module")
def containerd(ns, rootfs):
    """sid's containerd with its defaults (NRI on), the NRI socket under the test's base."""
    require(CRI_TOOL.exists(), f"cri-tool not built at {CRI_TOOL}")
    engine = sidroot.SidContainerd(ns, ns.base / "nri-ctd", PAUSE_IMAGE)
    engine.write_config()
    engine.nri_sock = engine.base / "nri.sock"
    with open(engine.config, "a") as f:
        f.write(f"""[plugins."io.containerd.nri.v1.nri"]
  disable = false
  socket_path = "{engine.nri_sock}"
""")
    engine.start()
    archive = write_image_archive(rootfs, PAUSE_IMAGE, ["/bin/sleep", "2147483647"], engine.base / "pause.tar")
    engine.ctr("images", "import", archive)
    engine.cri = lambda *a, check=True: run([CRI_TOOL, "-r", engine.endpoint, *a], check=check, timeout=180)
    yield engine
    engine.stop(cri=engine.cri)


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


@pytest.fixture(scope="module")
def agent(containerd, tmp_path_factory):
    a = NriAgent(tmp_path_factory.mktemp("nri-agent"), containerd.nri_sock).start()
    yield a
    a.stop()


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


@pytest.fixture
def pods(containerd, agent):
    made = []

    def make(name, **kw):
        p = Pod(containerd, name, **kw)
        made.append(p)
        return p
    yield make
    for p in made:
        p.remove()


def test_nri_annotation_sizes_the_pod_before_its_first_process_and_both_containers_share_it(pods, agent):
    pod = pods("annotated", annotations={"shmkeeper.io/shm-size": "2Gi"})
    pod.create("a")
    pod.create("b")
    assert pod.first_df_kib("a") == 2 * GiB // 1024
    assert pod.first_df_kib("b") == 2 * GiB // 1024
    pod.exec("a", "sh", "-c", "echo from-a > /dev/shm/shared")
    assert pod.exec("b", "cat", "/dev/shm/shared").stdout.strip() == "from-a"
    m = agent.metrics()
    assert m['shmkeeper_nri_decisions_total{action="resize"}'] >= 1
    assert m['shmkeeper_nri_decisions_total{action="keep"}'] >= 1  # the second container found it sized


def test_nri_memory_limit_gives_auto_its_size(pods):
    pod = pods("limited", memory=300 * MiB)
    pod.create("a")
    assert pod.first_df_kib("a") == 300 * MiB // 1024


def test_nri_nothing_asked_gets_the_policy(pods, agent):
    # shm.default auto with no memory limit: half the RAM, clamped to shm.max.
    import os
    half = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // 2
    pod = pods("plain")
    pod.create("a")
    assert pod.first_df_kib("a") == min(half, SHM_MAX) // 1024


def test_nri_bad_annotation_fails_create_container_with_the_reason(pods, agent):
    before = agent.metrics()["shmkeeper_nri_refusals_total"]
    pod = pods("bad", annotations={"shmkeeper.io/shm-size": "lots"})
    p = pod.create("a", check=False)
    assert p.returncode != 0
    print("cri-tool create:", p.stderr.strip())
    assert "shmkeeper: " in p.stderr and "shmkeeper.io/shm-size" in p.stderr, p.stderr
    assert agent.metrics()["shmkeeper_nri_refusals_total"] == before + 1
    # Control: the same pod's container with a good size is created.
    good = pods("good", annotations={"shmkeeper.io/shm-size": "1Gi"})
    good.create("a")
    assert good.first_df_kib("a") == GiB // 1024


def containerd_pids(engine):
    """Host pids of this containerd (not its shims), found in the namespace's pid namespace."""
    out = []
    for pid in engine.ns.processes():
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd") and str(engine.config).encode() in argv:
            out.append(pid)
    return out


def restart_containerd(engine, while_down=None):
    """SIGTERM to containerd itself (the nsenter in front of it does not pass signals on), `while_down()`,
    then a new one."""
    import os
    pids = containerd_pids(engine)
    assert pids, "containerd is not running"
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    wait_for(lambda: not containerd_pids(engine), timeout=60, what="containerd to exit")
    engine.proc.wait(timeout=30)
    if while_down:
        while_down()
    engine.start()


def agent_nri_status(agent):
    return json.loads(run([CLI, "status", "-o", "json", "--agent", agent.sock]).stdout)["node"]["nri"]


def test_nri_agent_reconnects_after_containerd_restarts(containerd, agent, pods):
    seen = len(agent.lines())
    before = agent.metrics()["shmkeeper_nri_connections_total"]
    # While containerd is down the agent says so (and retries).
    restart_containerd(containerd, while_down=lambda: wait_for(
        lambda: agent_nri_status(agent)["connected"] is False, timeout=30, what="status: not connected"))
    agent.wait_log("NRI: registered", after=seen)
    assert agent.metrics()["shmkeeper_nri_connections_total"] == before + 1
    nri = agent_nri_status(agent)
    assert nri["connected"] is True and nri["runtimeName"] == "containerd", nri
    assert nri["runtimeVersion"].startswith("2.1.") and int(nri["connections"]) == before + 1, nri
    text = run([CLI, "status", "--agent", agent.sock]).stdout
    assert f"connected to containerd {nri['runtimeVersion']} at {containerd.nri_sock}" in text, text
    pod = pods("after-restart", annotations={"shmkeeper.io/shm-size": "512Mi"})
    pod.create("a")
    assert pod.first_df_kib("a") == 512 * MiB // 1024


def test_nri_a_memory_emptydir_at_dev_shm_is_left_alone(containerd, pods, agent):
    """A tmpfs volume of the pod's own at /dev/shm (a memory emptyDir): the annotation does not touch it."""
    vol = containerd.base / "emptydir-dshm"
    vol.mkdir(exist_ok=True)
    containerd.ns.run(["mount", "-t", "tmpfs", "-o", "size=100m", "tmpfs", vol])
    try:
        before = agent.metrics()['shmkeeper_nri_decisions_total{action="skip"}']
        pod = pods("emptydir", annotations={"shmkeeper.io/shm-size": "2Gi"})
        pod.create("a", mounts=[("/dev/shm", vol)])
        assert pod.first_df_kib("a") == 100 * MiB // 1024
        assert agent.metrics()['shmkeeper_nri_decisions_total{action="skip"}'] == before + 1
        pod.remove()
    finally:
        containerd.ns.run(["umount", "-l", vol], check=False)


def test_nri_without_the_agent_pods_get_the_runtimes_64mib_and_are_caught_up_when_it_comes_back(containerd, pods,
                                                                                              agent):
    """The control for every test above: the same annotated pod, created while the agent is stopped, gets
    containerd's 64 MiB before its first process (the runtime goes on without the plugin). Started again, the
    agent registers, catches that pod up from the runtime's Synchronize (resized live; its sizing record says
    nri-late: the first process saw 64 MiB) and sizes the next pod in time. tests/engines/test_nri_lifecycle.py
    has the rest (shmkeeper pods, a bad size, SIGSTOP)."""
    seen = len(agent.lines())
    agent.stop()
    absent = pods("agent-away", annotations={"shmkeeper.io/shm-size": "2Gi"})
    absent.create("a")
    assert absent.first_df_kib("a") == 64 * MiB // 1024
    agent.start()
    agent.wait_log("NRI: synchronized", after=seen)
    assert df_kib(absent.exec("a", "df", "-k", "/dev/shm").stdout) == 2 * GiB // 1024
    assert absent.first_df_kib("a") == 64 * MiB // 1024
    record = containerd.base / "state" / "io.containerd.runtime.v2.task" / "k8s.io" / absent.id / "shmkeeper-shm.json"
    assert json.loads(record.read_text())["by"] == "nri-late", record.read_text()
    assert agent.metrics()['shmkeeper_nri_late_total{outcome="resized"}'] == 1
    back = pods("agent-back", annotations={"shmkeeper.io/shm-size": "2Gi"})
    back.create("a")
    assert back.first_df_kib("a") == 2 * GiB // 1024
    connected = {k: v for k, v in agent.metrics().items() if k.startswith("shmkeeper_nri_connected{")}
    assert list(connected.values()) == [1] and 'runtime="containerd",version="2.1.' in next(iter(connected)), connected
