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
import os
import signal

import pytest

from harness import CLI, df_kib, run, wait_for

from nri_env import NriAgent, Pod, agent_running, nri_containerd, pod_maker

MiB = 1 << 20
GiB = 1 << 30
SHM_MAX = 4 * GiB  # the agent's policy: shm.default auto, shm.max 4Gi


@pytest.fixture(scope="module")
def containerd(ns, rootfs):
    """sid's containerd with its defaults (NRI on), the NRI socket under the test's base."""
    with nri_containerd(ns, rootfs, ns.base / "nri-ctd") as engine:
        yield engine


@pytest.fixture(scope="module")
def agent(containerd, tmp_path_factory):
    with agent_running(NriAgent(tmp_path_factory.mktemp("nri-agent"), containerd.nri_sock)) as a:
        yield a


@pytest.fixture
def pods(containerd, agent):
    with pod_maker(lambda name, **kw: Pod(containerd, name, **kw)) as make:
        yield make


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
