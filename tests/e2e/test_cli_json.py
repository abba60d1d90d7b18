"""The CLI's machine output against a real private agent watching two host
tmpfs "pods", one idle (empty) and one busy (a file held by a process):
every verb's `-o json` starts with schemaVersion, uses camelCase keys, and
has every key of its golden shape present with zeros included (an idle pod's
usedBytes is "0", not missing); `reclaim` of a segment the agent does not
know exits 1 with the reason. Golden files (tests/e2e/golden/, how to
regenerate them: golden/README.md) hold every verb's whole document for the
idle and the busy pod, volatile values (times, pids, the host's sizes)
replaced by their type, so a renamed, removed, retyped or reordered key, or a
changed deterministic value, fails with a diff."""
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import golden
from harness import AGENTD, CLI, AgentProcess, HostTmpfs, read_line, require, wait_for

MiB = 1 << 20
CAMEL = re.compile(r"^[a-z][a-zA-Z0-9]*$")

# The golden key sets: what scripts may rely on (a key may be added, never removed or renamed).
STATUS_NODE = {"hostname", "hostShmSizeBytes", "hostShmUsedBytes", "podsShmUsedBytes", "leakedBytes", "podCount",
               "policy", "agentVersion", "lastScanTime", "lastScanDuration", "scans", "unheldBytes", "configFile"}
POLICY = {"shmDefaultBytes", "shmMaxBytes", "shmOverMax", "leaksReclaim", "leaksGrace", "scanInterval"}
CONFIG_FILE = {"path", "loadedTime", "reloadFailed", "onDisk", "onDiskError", "reloads"}
POD_SOME = {"uid", "namespace", "name", "kind", "containers", "shm", "leakedBytes", "unheldBytes", "labels",
            "annotations", "shmCountedElsewhere"}  # a subset every pod has
SHM_USAGE = {"sizeBytes", "usedBytes", "files", "unlinkedBytes", "sysvBytes", "sysvSegments", "memcgShmemBytes",
             "requestedBytes", "requestedSource", "peakUsedBytes", "sizedBy", "memoryLimitBytes"}


def keys(obj, path=""):
    """Every key of a JSON document, with its path."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield f"{path}.{k}", k
            yield from keys(v, f"{path}.{k}")
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from keys(v, f"{path}[{i}]")


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    require(os.geteuid() == 0, "needs root (mounts a tmpfs)")
    require(AGENTD.exists(), f"shmkeeperd not built at {AGENTD}")
    base = tmp_path_factory.mktemp("clijson")
    idle, busy = HostTmpfs(base / "idle", 8 * MiB), HostTmpfs(base / "busy", 8 * MiB)
    busy.fill("data", 2 * MiB)
    busy.fill("scratch", 1 * MiB)  # held by nobody: an unheld segment (leaks, reclaim's dry run)
    holder = subprocess.Popen(["sh", "-c", f"exec 3<{busy.path}/data; exec sleep 600"])  # one process: kill ends it
    agent = None
    try:
        # A metrics port: test_golden_watch waits on shmkeeper_watch_streams for its subscription.
        agent = AgentProcess.watching(base, [idle.path, busy.path], metrics_address="127.0.0.1:0").start()
        wait_for(lambda: len(agent.json("pods")["pods"]) == 2, timeout=10, what="both pods")
        # Settled: the held file has its holder, the unheld one is past leaks.grace.
        wait_for(lambda: [l["path"] for l in agent.json("leaks")["leaks"]] == [f"{busy.path}/scratch"] and
                 [h["pid"] for p in agent.json("pods")["pods"] for t in p["topSegments"] for h in t["holders"]] ==
                 [holder.pid], timeout=15, what="the held and the unheld segment")
        agent.idle, agent.busy, agent.holder = idle, busy, holder
        yield agent, idle, busy
    finally:
        holder.kill()
        holder.wait()
        if agent:
            agent.stop()
        idle.umount()
        busy.umount()


def check_style(doc):
    assert list(doc)[0] == "schemaVersion" and doc["schemaVersion"] == "shmkeeper.io/v1", list(doc)[:3]
    bad = [p for p, k in keys(doc) if not CAMEL.match(k)]
    assert bad == [], bad


def test_status(stack):
    agent, _, _ = stack
    doc = agent.json("status")
    check_style(doc)
    node = doc["node"]
    assert STATUS_NODE <= set(node), STATUS_NODE - set(node)
    assert POLICY <= set(node["policy"]) and CONFIG_FILE <= set(node["configFile"])
    assert node["leakedBytes"] == "0" and node["configFile"]["reloadFailed"] is False  # zeros present


def test_pods_idle_and_busy(stack):
    agent, idle, busy = stack
    doc = agent.json("pods")
    check_style(doc)
    pods = {p["name"]: p for p in doc["pods"]}
    i, b = pods[str(idle.path)], pods[str(busy.path)]
    assert set(i) == set(b), set(i) ^ set(b)  # an idle pod has every key a busy one has
    assert POD_SOME <= set(i), POD_SOME - set(i)
    assert SHM_USAGE <= set(i["shm"]) and set(i["shm"]) == set(b["shm"]), SHM_USAGE - set(i["shm"])
    assert i["shm"]["usedBytes"] == "0" and i["shm"]["files"] == 0 and int(b["shm"]["usedBytes"]) >= 2 * MiB


def test_leaks_and_reclaim_with_nothing_to_do(stack):
    agent, _, _ = stack
    for verb in (["leaks"], ["reclaim"]):
        doc = agent.json(*verb)
        check_style(doc)
    assert agent.json("reclaim")["freedBytes"] == "0"


def test_reclaim_of_an_unknown_segment_exits_1_with_a_reason(stack):
    agent, _, busy = stack
    for args in (["reclaim", "--yes", "/dev/shm/no-such-segment"], ["reclaim", "--yes", f"{busy.path}/data"]):
        p = agent.cli(*args, check=False)
        assert p.returncode == 1, (p.stdout, p.stderr)
        assert "not a leaked segment the agent knows: " + args[-1] in p.stderr, p.stderr
    assert (busy.path / "data").exists()  # held: kept


# ---- golden documents -------------------------------------------------------

GOLDEN = Path(__file__).parent / "golden"
# doctor's description of the machine it runs on (its IPC namespace, engine,
# SysV segments, memory cgroup, and what it concludes from them): reduced to
# its shape.
DOCTOR_HOST = {"ipc", "engine", "sizeSource", "inContainer", "sysv", "memcg", "findings", "fixes", "warnings",
               "workloads"}


def check_golden(name, doc, base, host_keys=frozenset()):
    golden.check_golden(GOLDEN, name, doc, base, host_keys)


def base_of(agent):
    return agent.idle.path.parent


@pytest.mark.parametrize("verb", ["status", "pods", "leaks", "reclaim"])
def test_golden_agent_views(stack, verb):
    agent = stack[0]
    check_golden(verb, agent.json(verb), base_of(agent))


def test_golden_pods_one_at_a_time(stack):
    """`pods` filtered to the idle pod and to the busy one (a selector on the
    host pod's name): each pod's whole document."""
    agent, idle, busy = stack
    pods = agent.json("pods")["pods"]
    for which, path in (("idle", idle.path), ("busy", busy.path)):
        [pod] = [p for p in pods if p["name"] == str(path)]
        check_golden(f"pods_{which}", pod, base_of(agent))


@pytest.mark.parametrize("which", ["idle", "busy"])
def test_golden_doctor(stack, which):
    agent = stack[0]
    d = getattr(agent, which).path
    p = subprocess.run([str(CLI), "doctor", "-o", "json", "--shm", str(d)], capture_output=True, text=True, timeout=60)
    assert p.returncode in (0, 1), p.stderr  # 1: findings
    check_golden(f"doctor_{which}", json.loads(p.stdout), base_of(agent), DOCTOR_HOST)


def test_golden_watch(stack):
    """`watch -o json`: one JSON document per line (JSON Lines), each event
    whole. The busy pod crosses 80 % (a 4 MiB burst on its 8 MiB tmpfs); the
    idle pod says nothing."""
    agent, _, busy = stack
    w = subprocess.Popen([str(CLI), "watch", "-o", "json", "--agent", str(agent.sock)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        agent.wait_watching()  # subscribed: the burst's event reaches it
        busy.fill("burst", 4 * MiB)
        line = read_line(w, 60, "the USAGE_HIGH event")  # the agent's next scan reports it
    finally:
        (busy.path / "burst").unlink()
        w.terminate()
        rest, err = w.communicate(timeout=10)
    event = json.loads(line)
    assert line.count("\n") == 1 and event["type"] == "EVENT_TYPE_USAGE_HIGH", (line, rest, err)
    check_golden("watch_usage_high", event, base_of(agent))
    wait_for(lambda: int([p for p in agent.json("pods")["pods"] if p["name"] == str(busy.path)][0]["shm"]["usedBytes"])
             == 3 * MiB, timeout=10, what="the burst gone")
