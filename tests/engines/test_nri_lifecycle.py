"""The agent as an NRI plugin of sid's containerd 2.1 when it is not there
at the moment a pod is created: killed (pods are created without it; when
it is back, the runtime's Synchronize catches them up: resized live, sized
by `nri-late`, counted), and stopped (SIGSTOP) against the runtime's plugin
request timeout (CreateContainer does not hang; the runtime closes the
connection; after SIGCONT the agent reconnects and catches the pod up). The
agent runs in the engines' pid namespace (a /proc of it) so that `shmkeeper
pods` lists containerd's containers, as a node agent on that host would.
Each container's first command records `df -k /dev/shm`: what its first
process saw, before any late resize."""
import json
import signal
import subprocess
import time

import pytest

from harness import AGENTD, CLI, df_kib, run, wait_for

import sidroot
from nri_env import NriAgent, Pod, agent_running, nri_containerd, pod_maker

MiB = 1 << 20
GiB = 1 << 30
REQUEST_TIMEOUT_S = 1  # containerd's plugin_request_timeout here (default 2s)


@pytest.fixture(scope="module")
def containerd(ns, rootfs):
    """sid's containerd, NRI on, a short plugin request timeout."""
    with nri_containerd(ns, rootfs, ns.base / "nri-life", request_timeout_s=REQUEST_TIMEOUT_S) as engine:
        yield engine


class PidNsNriAgent(NriAgent):
    """NriAgent in the engines' pid namespace (with a /proc of it; the host's files and network), discovering
    containerd's containers in its runc root: `shmkeeper pods` lists them."""

    def __init__(self, base, engine):
        super().__init__(base, engine.nri_sock)
        self.engine = engine
        with open(self.config, "a") as f:  # still under agent:
            f.write(f"  runtimeRoots: [{engine.runc_root / 'k8s.io'}]\n  scanInterval: 1s\n")

    def start(self):
        seen = len(self.lines()) if self.log.exists() else 0
        argv = ["nsenter", "-t", str(self.engine.ns.pid), "-p", "--", "unshare", "--mount", "--propagation",
                "private", "sh", "-c", 'mount -t proc proc /proc && exec "$@"', "agent",
                str(AGENTD), "--config", str(self.config)]
        with open(self.log, "a") as out:
            # sidroot.Daemon: signals go to the agent itself (nsenter's child), not to nsenter.
            self.proc = sidroot.Daemon(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                                        start_new_session=True))
        assert self.proc.pid is not None, self.log.read_text()[-2000:]
        self.wait_log("NRI: synchronized", after=seen)
        return self

    def pod(self, name, sized_by=None):
        """The agent's row of pod `name` (namespace nri) once listed with a size and, when `sized_by` is given,
        sized by that (`shmkeeper pods` shows the last scan: scanInterval 1s)."""
        last = []

        def row():
            out = json.loads(run([CLI, "pods", "-o", "json", "--agent", self.sock]).stdout)
            p = next((p for p in out.get("pods", []) if p.get("namespace") == "nri" and p.get("name") == name
                      and int(p.get("shm", {}).get("sizeBytes", 0)) > 0), None)
            last[:] = [p]
            return p if p and (sized_by is None or p["shm"].get("sizedBy", "") == sized_by) else None
        try:
            return wait_for(row, timeout=30, interval=0.5, what=f"`shmkeeper pods` to list {name}")
        except AssertionError as e:
            raise AssertionError(f"{e}; last row: {last}") from None


@pytest.fixture(scope="module")
def agent(containerd, tmp_path_factory):
    with agent_running(PidNsNriAgent(tmp_path_factory.mktemp("nri-life-agent"), containerd)) as a:
        yield a


@pytest.fixture
def pods(containerd, agent):
    with pod_maker(lambda name, **kw: Pod(containerd, name, **kw)) as make:
        yield make


def now_kib(pod, name):
    """/dev/shm's size in container `name` now."""
    return df_kib(pod.exec(name, "df", "-k", "/dev/shm").stdout)


def late(agent, outcome):
    return agent.metrics()[f'shmkeeper_nri_late_total{{outcome="{outcome}"}}']


def test_nri_pods_created_while_the_agent_was_away_are_caught_up_late_and_reported(pods, agent):
    """Killed: the runtime creates pods without the plugin (64 MiB seen by their first process); back, the agent
    resizes the pod live (sized by nri-late, counted), refuses to apply a bad size (reported, left at 64 MiB),
    and leaves alone the pod it sized in time (the control: sized by nri, not caught up)."""
    timely = pods("timely", annotations={"shmkeeper.io/shm-size": "1Gi"})
    timely.create("a")
    assert timely.first_df_kib("a") == GiB // 1024
    agent.pod("timely", sized_by="nri")
    agent.stop()
    away = pods("away", annotations={"shmkeeper.io/shm-size": "2Gi"})
    away.create("a")
    bad = pods("away-bad", annotations={"shmkeeper.io/shm-size": "lots"})
    bad.create("a")  # no plugin: nothing refuses it
    assert away.first_df_kib("a") == 64 * MiB // 1024
    assert bad.first_df_kib("a") == 64 * MiB // 1024
    agent.start()  # returns once the runtime's Synchronize was handled
    assert now_kib(away, "a") == 2 * GiB // 1024
    assert away.first_df_kib("a") == 64 * MiB // 1024  # what its first process saw: said, not hidden
    row = agent.pod("away", sized_by="nri-late")
    assert int(row["shm"]["sizeBytes"]) == 2 * GiB, row
    assert now_kib(bad, "a") == 64 * MiB // 1024
    assert agent.pod("away-bad")["shm"].get("sizedBy", "") == ""
    assert late(agent, "resized") == 1 and late(agent, "refused") == 1 and late(agent, "failed") == 0
    assert now_kib(timely, "a") == GiB // 1024 and agent.pod("timely")["shm"]["sizedBy"] == "nri"  # same scan
    msgs = [m["msg"] for m in agent.lines()]
    assert any("nri/away was created while the agent was away: resized late" in m for m in msgs), msgs[-10:]
    assert any("nri/away-bad was created while the agent was away: not resized" in m
               and "shmkeeper.io/shm-size" in m for m in msgs), msgs[-10:]


def test_nri_a_stopped_agent_does_not_hang_pod_creation_and_catches_up_after_sigcont(pods, agent):
    """SIGSTOP: containerd waits its plugin request timeout, creates the container without the plugin and closes
    the connection; after SIGCONT the agent does not apply the stale request (abandoned, counted), reconnects
    and resizes the pod late (sized by nri-late). Control: the same pod created while the agent runs is sized
    before its first process."""
    control = pods("awake", annotations={"shmkeeper.io/shm-size": "2Gi"})
    control.create("a")
    assert control.first_df_kib("a") == 2 * GiB // 1024
    before = agent.metrics()
    seen = len(agent.lines())
    agent.proc.send_signal(signal.SIGSTOP)
    try:
        stopped = pods("stopped", annotations={"shmkeeper.io/shm-size": "2Gi"})
        t0 = time.monotonic()
        stopped.create("a")
        took = time.monotonic() - t0
    finally:
        # nsenter stops itself when its child stops (util-linux's continue_as_child): continue both.
        agent.proc.proc.send_signal(signal.SIGCONT)
        agent.proc.send_signal(signal.SIGCONT)
    print(f"CreateContainer with the agent stopped took {took:.1f} s (plugin_request_timeout {REQUEST_TIMEOUT_S}s)")
    assert took < REQUEST_TIMEOUT_S + 30, took  # no hang: the runtime's timeout, not the agent, ends the wait
    assert stopped.first_df_kib("a") == 64 * MiB // 1024
    agent.wait_log("NRI: synchronized", after=seen)  # the reconnection's
    assert now_kib(stopped, "a") == 2 * GiB // 1024
    # Not "nri": the request read after SIGCONT was not applied as if in time.
    agent.pod("stopped", sized_by="nri-late")
    agent.wait_log("NRI: the runtime stopped waiting for CreateContainer of nri/stopped", after=seen)
    after = agent.metrics()
    assert after["shmkeeper_nri_abandoned_total"] == before["shmkeeper_nri_abandoned_total"] + 1
    assert after['shmkeeper_nri_late_total{outcome="resized"}'] == \
        before['shmkeeper_nri_late_total{outcome="resized"}'] + 1
    assert after["shmkeeper_nri_connections_total"] == before["shmkeeper_nri_connections_total"] + 1
    assert agent.pod("awake")["shm"]["sizedBy"] == "nri"  # the control is not caught up again
