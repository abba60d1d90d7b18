"""shmkeeperd against real containers on a private Docker engine: usage,
holders, leaks, SysV, reclaim and restart, seen through the CLI's JSON (the
gRPC responses in protobuf's canonical JSON)."""
import pytest

from harness import SHMTOOL, AgentProcess, require, run, wait_for

MiB = 1 << 20
IMG = "shmk-busybox:test"
SCAN = 1  # seconds


@pytest.fixture(scope="module")
def agent(docker_engine, tmp_path_factory):
    require(SHMTOOL.exists(), f"shmtool not built at {SHMTOOL}")
    base = tmp_path_factory.mktemp("agent")
    a = AgentProcess(base, f"""
agent:
  socket: {base}/agent.sock
  eventSocket: {base}/events.sock
  metricsAddress: 127.0.0.1:0
  scanInterval: {SCAN}s
  runtimeRoots: [{docker_engine.exec_root}/runtime-runc/moby]
  dockerSocket: {docker_engine.sock}
leaks:
  grace: 1s
""").start()
    yield a
    a.stop()
    for name in ("writer", "leaky", "sysv"):
        docker_engine.docker("rm", "-f", name, check=False)


def container(engine, name, *cmd):
    engine.docker("rm", "-f", name, check=False)
    engine.docker("run", "-d", "--name", name, "-v", f"{SHMTOOL}:/t/shmtool:ro", IMG, *cmd)
    return engine.docker("inspect", "-f", "{{.State.Pid}}", name).stdout.strip()


def pod(agent, name):
    for p in agent.json("pods").get("pods", []):
        if p.get("name") == name:
            return p
    return None


def leaks_of(agent, name):
    return [l for l in agent.json("leaks").get("leaks", []) if l["pod"].get("name") == name]


def test_usage_and_holder_of_a_100mib_writer(docker_engine, agent):
    pid = container(docker_engine, "writer", "/t/shmtool", "hold", "data", "100")
    # A deadline against a hang, not a timing rule: the container's start and the agent's scans are slow on a
    # loaded machine (10 s was not enough beside two builds).
    p = wait_for(lambda: (q := pod(agent, "writer")) and int(q["shm"].get("usedBytes", 0)) >= 95 * MiB and q,
                 timeout=60, what="writer's usage")
    used = int(p["shm"]["usedBytes"])
    assert abs(used - 100 * MiB) <= 5 * MiB
    seg = p["topSegments"][0]
    assert seg["path"] == "/dev/shm/data"
    assert any(str(h["pid"]) == pid and "shmtool" in h["command"] for h in seg["holders"])
    assert p["kind"] == "POD_KIND_CONTAINER"
    assert int(p["shm"]["memcgShmemBytes"]) >= 95 * MiB
    assert leaks_of(agent, "writer") == []


def test_killed_creator_leaks_but_held_mapped_and_unlinked_do_not(docker_engine, agent):
    container(docker_engine, "leaky", "sleep", "600")
    for mode, name in [("map", "mapped"), ("unlinked", "gone"), ("hold", "open")]:
        docker_engine.docker("exec", "-d", "leaky", "/t/shmtool", mode, name, "4")
    out = docker_engine.docker("exec", "leaky", "/t/shmtool", "torch-leak", "8", check=False).stdout
    creator = int(out.split()[1])
    leak = wait_for(lambda: [l for l in leaks_of(agent, "leaky") if l["state"] == "LEAK_STATE_LEAKED"],
                    timeout=2 * SCAN + 3, what="the leak")[0]
    assert leak["path"] == f"/dev/shm/torch_{creator}_0"
    assert leak["evidence"]["creatorPid"] == creator and leak["evidence"]["creatorDead"]
    assert int(leak["bytes"]) == 8 * MiB
    listed = {l.get("path") for l in leaks_of(agent, "leaky")}
    assert not listed & {"/dev/shm/mapped", "/dev/shm/gone", "/dev/shm/open"}
    p = pod(agent, "leaky")
    assert int(p["shm"]["unlinkedBytes"]) >= 4 * MiB  # the unlinked-but-mapped one counts as usage


def test_reclaim_frees_leaks_and_keeps_held(docker_engine, agent):
    def df_used():
        out = docker_engine.docker("exec", "leaky", "df", "-k", "/dev/shm").stdout.splitlines()[1].split()
        return int(out[2]) * 1024
    before = df_used()
    wait_for(lambda: any(l.get("reclaimable") for l in leaks_of(agent, "leaky")), timeout=5, what="reclaimable")
    dry = agent.json("reclaim")
    assert dry["dryRun"] and df_used() == before
    done = agent.json("reclaim", "--yes")
    assert not done.get("dryRun", False)
    assert int(done["freedBytes"]) >= 8 * MiB
    assert before - df_used() >= 8 * MiB  # statfs inside the container confirms
    files = docker_engine.docker("exec", "leaky", "ls", "/dev/shm").stdout.split()
    assert "mapped" in files and "open" in files


def test_sysv_leak_reported_with_its_pod(docker_engine, agent):
    container(docker_engine, "sysv", "sleep", "600")
    out = docker_engine.docker("exec", "sysv", "/t/shmtool", "sysv", "2").stdout
    shmid = int(out.split()[1])
    # unheld at first sight, leaked once leaks.grace (1 s) is over
    leak = wait_for(lambda: [l for l in leaks_of(agent, "sysv") if l.get("sysvId", 0) == shmid and not l.get("path")
                             and l["state"] == "LEAK_STATE_LEAKED"],
                    timeout=2 * SCAN + 20, what="the SysV leak")[0]
    assert int(leak["bytes"]) == 2 * MiB
    p = pod(agent, "sysv")
    assert p["shm"]["sysvSegments"] == 1 and int(p["shm"]["sysvBytes"]) == 2 * MiB


def test_restarted_agent_rebuilds_its_view(docker_engine, agent):
    before = pod(agent, "writer")
    agent.stop()
    agent.start()
    after = pod(agent, "writer")
    assert after["uid"] == before["uid"]
    assert abs(int(after["shm"]["usedBytes"]) - int(before["shm"]["usedBytes"])) <= MiB
    assert any(l["pod"]["name"] == "sysv" for l in agent.json("leaks")["leaks"])


def test_bad_requests_and_unreachable_agent(agent, bins):
    p = agent.cli("pods", "-l", "a b=c", check=False)
    assert p.returncode == 2 and "malformed selector" in p.stderr
    p = run([bins.CLI, "pods", "--agent", "/nonexistent/agent.sock"], check=False)
    assert p.returncode == 1 and "cannot reach the agent at /nonexistent/agent.sock" in p.stderr
    assert agent.cli("status").returncode == 0  # still serving
