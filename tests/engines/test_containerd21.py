"""containerd 2.1 (sid) with its CRI plugin, config version 3, shmkeeper
installed by the static CLI inside the sid root; pods created the kubelet's
way over CRI (tests/helpers/cri_tool.cc on the host: the socket has the same
path on both sides), host network (no CNI)."""
import json

import pytest

from engines_env import RUNTIME, MiB, Pod, cri, shmkeeper
from harness import PAUSE_IMAGE, df_kib

import sidroot

GiB = 1 << 30


@pytest.fixture
def pods(any_containerd):
    made = []

    def make(name, **kw):
        made.append(Pod(any_containerd, name, **kw))
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


def test_the_trixie_engine_is_containerd_1_7(trixie_containerd):
    assert trixie_containerd.ctr("version").stdout.count("1.7.") >= 2  # client and server


def test_a_bad_annotation_fails_the_sandbox_and_leaves_nothing(any_containerd, pods):
    pod = pods("bad", annotations={"shmkeeper.io/shm-size": "lots"})
    p = pod.run(check=False)
    assert p.returncode != 0
    assert 'shmkeeper: annotation shmkeeper.io/shm-size: invalid size "lots"' in p.stderr, p.stderr
    assert all(s["metadata"]["name"] != "bad" for s in json.loads(cri(any_containerd, "pods").stdout).get("items", []))
    left = any_containerd.ns.run(["grep", "-c", "/sandboxes/", "/proc/self/mountinfo"], check=False).stdout.strip()
    assert left == "0", left


def test_install_and_uninstall_check_what_containerd_2_1_loaded(ns, pause_archive):
    """A pod on a plain containerd 2.1 gets 64 MiB. Config version 3
    (io.containerd.cri.v1.runtime): install on a running
    containerd exits 3 until it restarts, then 0; uninstall the same, and the
    file comes back byte for byte."""
    engine = sidroot.SidContainerd(ns, ns.base / "ctd-live", PAUSE_IMAGE)
    engine.write_config()
    original = engine.config.read_bytes()
    engine.start()
    install = ["install", "containerd", "--config", engine.config, "--runtime-path", RUNTIME, "--set-as-default"]
    try:
        # the control: without shmkeeper, containerd 2.1 gives a pod its 64 MiB
        engine.ctr("images", "import", pause_archive)
        pod = Pod(engine, "plain")
        pod.run()
        pod.container("a", "sleep", "600")
        assert df_kib(pod.exec("a", "df", "-k", "/dev/shm").stdout) == 64 * MiB // 1024
        pod.remove()
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
