"""The agent as an NRI plugin of Debian trixie's containerd 1.7.24, where NRI
is off by default and switched on in its config (version 2), as
docs/kubernetes.md tells a user to: the default runc handler, no `shmkeeper
install`, no RuntimeClass; the kubelet played over CRI (cri-tool), the agent
the Debian 12 build on the host (tests/engines/test_nri.py has the same on
containerd 2.1). Each container's first command records `df -k /dev/shm`.
Runs with the trixie engines (tests/engines/conftest.py)."""
import json

import pytest

from harness import CLI, run

from nri_env import NriAgent, Pod, agent_running, nri_containerd, pod_maker

GiB = 1 << 30


@pytest.fixture(scope="module")
def trixie_nri_containerd(trixie_ns, rootfs):
    """trixie's containerd 1.7, config version 2, with NRI switched on (socket under the test's base)."""
    with nri_containerd(trixie_ns, rootfs, trixie_ns.base / "nri-ctd17", version=2) as engine:
        yield engine


@pytest.fixture(scope="module")
def agent17(trixie_nri_containerd, tmp_path_factory):
    with agent_running(NriAgent(tmp_path_factory.mktemp("nri-agent17"), trixie_nri_containerd.nri_sock)) as a:
        yield a


@pytest.fixture
def pods17(trixie_nri_containerd, agent17):
    with pod_maker(lambda name, **kw: Pod(trixie_nri_containerd, name, **kw)) as make:
        yield make


def test_nri_containerd17_annotation_sizes_the_pod_before_its_first_process_and_both_containers_share_it(
        pods17, agent17):
    nri = json.loads(run([CLI, "status", "-o", "json", "--agent", agent17.sock]).stdout)["node"]["nri"]
    assert nri["connected"] is True and nri["runtimeName"] == "containerd", nri
    assert nri["runtimeVersion"].startswith("1.7.24"), nri
    pod = pods17("annotated", annotations={"shmkeeper.io/shm-size": "2Gi"})
    pod.create("a")
    pod.create("b")
    assert pod.first_df_kib("a") == 2 * GiB // 1024
    assert pod.first_df_kib("b") == 2 * GiB // 1024
    pod.exec("a", "sh", "-c", "echo from-a > /dev/shm/shared")
    assert pod.exec("b", "cat", "/dev/shm/shared").stdout.strip() == "from-a"
    m = agent17.metrics()
    assert m['shmkeeper_nri_decisions_total{action="resize"}'] >= 1
    assert m['shmkeeper_nri_decisions_total{action="keep"}'] >= 1


def test_nri_containerd17_bad_annotation_fails_create_container_with_the_reason(pods17, agent17):
    before = agent17.metrics()["shmkeeper_nri_refusals_total"]
    pod = pods17("bad", annotations={"shmkeeper.io/shm-size": "lots"})
    p = pod.create("a", check=False)
    assert p.returncode != 0
    print("cri-tool create:", p.stderr.strip())
    assert "shmkeeper: " in p.stderr and "shmkeeper.io/shm-size" in p.stderr, p.stderr
    assert agent17.metrics()["shmkeeper_nri_refusals_total"] == before + 1
    # Control: the same pod's container with a good size is created, and sized.
    good = pods17("good", annotations={"shmkeeper.io/shm-size": "1Gi"})
    good.create("a")
    assert good.first_df_kib("a") == GiB // 1024
