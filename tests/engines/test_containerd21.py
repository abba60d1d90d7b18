"""containerd 2.1 (sid) with its CRI plugin, config version 3, shmkeeper
installed by the static CLI inside the sid root; pods created the kubelet's
way over CRI (tests/helpers/cri_tool.cc on the host: the socket has the same
path on both sides), host network (no CNI)."""
import json

import pytest

from engines_env import RUNTIME, MiB, shmkeeper
from harness import CRI_TOOL, PAUSE_IMAGE, df_kib, require, run, write_image_archive

import sidroot

GiB = 1 << 30


def cri(engine, *args, check=True):
    return run([CRI_TOOL, "-r", engine.endpoint, *args], check=check, timeout=180)


@pytest.fixture(scope="session")
def pause_archive(ns, rootfs):
    require(CRI_TOOL.exists(), f"cri-tool not built at {CRI_TOOL}")
    return write_image_archive(rootfs, PAUSE_IMAGE, ["/bin/sleep", "2147483647"], ns.base / "pause.tar")


def start(ns, name, pause_archive, install):
    policy = ns.base / f"{name}.yaml"
    policy.write_text(f"shm:\n  default: 256Mi\nlog:\n  path: {ns.base}/{name}-runtime.log\n")
    engine = sidroot.SidContainerd(ns, ns.base / name, PAUSE_IMAGE, env={"SHMKEEPER_CONFIG": str(policy)})
    engine.write_config()
    if install:
        p = shmkeeper(ns, "install", "containerd", "--config", engine.config, "--set-as-default",
                      "--runtime-path", RUNTIME)
        assert "no running containerd uses it" in p.stdout, p.stdout
    engine.start()
    engine.ctr("images", "import", pause_archive)
    return engine


@pytest.fixture(scope="session")
def containerd(ns, pause_archive):
    engine = start(ns, "ctd", pause_archive, install=True)
    try:
        yield engine
    finally:
        engine.stop(cri=lambda *a: cri(engine, *a, check=False))


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


@pytest.fixture
def pods(containerd):
    made = []

    def make(name, **kw):
        made.append(Pod(containerd, name, **kw))
        return made[-1]
    yield make
    for p in made:
        p.remove()


def test_the_engine_is_containerd_2_1(containerd):
    assert containerd.ctr("version").stdout.count("2.1.") >= 2  # client and server


@pytest.mark.parametrize("annotations,expected", [
    ({"shmkeeper.io/shm-size": "2Gi"}, 2 * GiB),
    ({}, 256 * MiB),
    ({"shm-size.crio.io": "1Gi"}, GiB),
], ids=["annotation", "policy-default", "crio-annotation"])
def test_a_pod_is_sized(pods, annotations, expected):
    pod = pods("sized", annotations=annotations)
    pod.run()
    pod.container("a", "sleep", "600")
    pod.container("b", "sleep", "600")
    assert df_kib(pod.exec("a", "df", "-k", "/dev/shm").stdout) == expected // 1024
    pod.exec("a", "sh", "-c", "echo from-a > /dev/shm/shared")
    assert pod.exec("b", "cat", "/dev/shm/shared").stdout.strip() == "from-a"  # one tmpfs per pod


def test_a_bad_annotation_fails_the_sandbox_and_leaves_nothing(containerd, pods, ns):
    pod = pods("bad", annotations={"shmkeeper.io/shm-size": "lots"})
    p = pod.run(check=False)
    assert p.returncode != 0
    assert 'shmkeeper: annotation shmkeeper.io/shm-size: invalid size "lots"' in p.stderr, p.stderr
    assert all(s["metadata"]["name"] != "bad" for s in json.loads(cri(containerd, "pods").stdout).get("items", []))
    left = ns.run(["grep", "-c", "/sandboxes/", "/proc/self/mountinfo"], check=False).stdout.strip()
    assert left == "0", left


def test_install_and_uninstall_check_what_containerd_2_1_loaded(ns, pause_archive):
    """Config version 3 (io.containerd.cri.v1.runtime): install on a running
    containerd exits 3 until it restarts, then 0; uninstall the same, and the
    file comes back byte for byte."""
    engine = sidroot.SidContainerd(ns, ns.base / "ctd-live", PAUSE_IMAGE)
    engine.write_config()
    original = engine.config.read_bytes()
    engine.start()
    install = ["install", "containerd", "--config", engine.config, "--runtime-path", RUNTIME, "--set-as-default"]
    try:
        p = shmkeeper(ns, *install, check=False)
        assert p.returncode == 3 and "does not have it yet" in p.stdout, (p.stdout, p.stderr)
        assert 'still runs with default runtime "runc"' in p.stderr, p.stderr
        assert '[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.shmkeeper' in engine.config.read_text() \
            or "[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.shmkeeper" in engine.config.read_text(), \
            engine.config.read_text()
        engine.stop()
        engine.start()
        p = shmkeeper(ns, *install, check=False)
        assert p.returncode == 0 and "already installed" in p.stdout, (p.stdout, p.stderr)
        p = shmkeeper(ns, "uninstall", "containerd", "--config", engine.config, check=False)
        assert p.returncode == 3 and "the running containerd still has it" in p.stdout, (p.stdout, p.stderr)
        assert engine.config.read_bytes() == original
        engine.stop()
        engine.start()
        p = shmkeeper(ns, "uninstall", "containerd", "--config", engine.config, check=False)
        assert p.returncode == 0 and "already uninstalled" in p.stdout, (p.stdout, p.stderr)
    finally:
        engine.stop()
