"""What an idle scan no longer reads again (issue 23, "100 idle containers"),
attacked: each fact the agent now keeps between scans changes while the
agent is idle, and the agent still reports the change within its documented
bound (docs/benchmarks.md, docs/agent.md). One real runc container with its
own IPC namespace and /dev/shm tmpfs, a private agent at scanInterval 1s
(fanotify observer):

- a SysV segment created in the idle container's namespace shows in `pods`
  and `leaks` at the next scans (SysV is listed per scan; a namespace that
  SHM_INFO shows empty is not read further, which is exact);
- pages written through a mapping into its /dev/shm (no write(2), no close:
  no fanotify event) show in usedBytes and memcgShmemBytes at the next scans
  (statfs moved: the listing and the memory cgroup are read again);
- shmem the scan cannot see (a memfd) shows in memcgShmemBytes within the
  memory-cgroup cadence (6 scans);
- the container restarted with a new init under the same id: its new pid,
  IPC namespace and tmpfs are reported (the cached init facts are keyed by
  pid and start time), the old namespace's segment is gone;
- a bind mount made, while the agent is idle, of a closed scratch file (no
  creator evidence: never reclaimable, its mount references are reused for
  up to 6 scans) shows as held by that mount within 6 scans; a bind mount of
  a file with evidence (torch_<dead pid>_…, leaked before the mount) is held
  at the next scan and never reclaimed (references read afresh for it).
Tests wait on the agent's scan counter, not on fixed sleeps.
"""
import json
import os
import shutil
import signal
import subprocess

from harness import SHMTOOL, oci_bundle, read_line, require, run, wait_for
from reclaim_attack import HOLDERS, Tmpfs, agent_config, make_leaks, metric_values, scrape, start_agent

MiB = 1 << 20
MEMCG_EVERY = 6  # Scanner::kMemcgEvery
REFS_EVERY = 6  # Scanner::kRefsEvery


def scans(agent):
    return sum(metric_values(scrape(agent), "shmkeeper_scans_total").values())


def wait_scans(agent, n):
    start = scans(agent)
    wait_for(lambda: scans(agent) >= start + n, timeout=30, what=f"{n} scans")


def test_idle_container_changes_are_reported(tmp_path, rootfs, root_and_runc):
    require(shutil.which("runc") is not None, "runc is not installed")
    require(SHMTOOL.exists(), f"shmtool not built at {SHMTOOL}")
    state = tmp_path / "runc-root"
    cid = f"idle-{os.getpid()}"

    def edit(spec):
        spec["mounts"].append({"destination": "/t/shmtool", "type": "bind", "source": str(SHMTOOL),
                               "options": ["bind", "ro"]})

    bundle = oci_bundle(tmp_path / "bundle", rootfs, ["sleep", "600"], edit=edit)

    def start_container():
        subprocess.run(["runc", "--root", str(state), "run", "-d", "--bundle", str(bundle), cid], check=True,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        return int(json.loads(run(["runc", "--root", state, "state", cid]).stdout)["pid"])

    def ctr(*args):
        return run(["runc", "--root", state, "exec", cid, *args])

    def spawn(*args):
        p = subprocess.Popen(["runc", "--root", str(state), "exec", cid, *args], stdout=subprocess.PIPE, text=True)
        assert read_line(p, 60, f"{args} ready").startswith("ready"), f"{args} did not start"
        return p

    def pods():
        return [p for p in agent.json("pods").get("pods", [])
                if any(c.get("id") == cid for c in p.get("containers", []))]

    def pod():
        found = pods()
        assert len(found) == 1, found
        return found[0]

    def shm(key):
        return int(pod()["shm"].get(key, 0))

    agent = None
    spawned = []
    try:
        init = start_container()
        # Positive control: the container has an IPC namespace and a tmpfs of its own.
        assert os.readlink(f"/proc/{init}/ns/ipc") != os.readlink("/proc/self/ns/ipc")
        assert os.stat(f"/proc/{init}/root/dev/shm").st_dev != os.stat("/dev/shm").st_dev
        base = tmp_path / "agent"
        agent = start_agent(base, agent_config(base, [], grace="1h", runtime_roots=[state]))
        wait_for(lambda: any(c.get("id") == cid for p in agent.json("pods").get("pods", [])
                             for c in p.get("containers", [])), timeout=20, what="the container discovered")
        wait_scans(agent, 3)  # idle: everything cached
        assert shm("sysvSegments") == 0 and shm("files") == 0

        # 1. A SysV segment (its creator exits, nattch 0) in the idle namespace.
        shmid = int(ctr("/t/shmtool", "sysv", "2").stdout.split()[1])
        wait_scans(agent, 2)
        assert shm("sysvSegments") == 1 and shm("sysvBytes") == 2 * MiB
        assert any(l.get("sysvId") == shmid and not l.get("path") for l in agent.json("leaks").get("leaks", []))

        # 2. Pages written through a mapping: no event, only statfs moves.
        # Its pages are written at SIGUSR1 (not after a time: under load two scans can take longer).
        spawned.append(spawn("/t/shmtool", "map-later", "data", "8", "600"))
        wait_scans(agent, 2)  # the create and close events are behind: the listing is cached again
        used, memcg = shm("usedBytes"), shm("memcgShmemBytes")
        assert used < 1 * MiB, used  # ftruncate allocates nothing
        spawned[-1].send_signal(signal.SIGUSR1)  # runc exec forwards it to map-later
        assert read_line(spawned[-1], 60, "map-later's pages touched").strip() == "touched"
        wait_scans(agent, 2)
        assert shm("usedBytes") >= used + 8 * MiB
        assert shm("memcgShmemBytes") >= memcg + 7 * MiB

        # 3. Shmem nothing on /dev/shm shows (a memfd): the memory cgroup's cadence.
        memcg = shm("memcgShmemBytes")
        used = shm("usedBytes")
        # Counted by the agent from after the memfd is written (spawn returns at its "ready"), +1 for a
        # scan that had begun before; not by polls, which under load see several scans each.
        spawned.append(spawn("/t/shmtool", "memfd", "16"))
        wait_scans(agent, MEMCG_EVERY + 1)
        assert shm("memcgShmemBytes") >= memcg + 15 * MiB, "the memory cgroup was read later than its cadence"
        assert shm("usedBytes") == used  # positive control: the memfd is not on /dev/shm

        # 4. Restarted with a new init under the same id: new pid, IPC namespace and tmpfs.
        for p in spawned:
            p.kill()
        run(["runc", "--root", state, "delete", "-f", cid])
        new_init = start_container()
        assert new_init != init
        # (between the delete and the run a scan may find no container: no pod)
        wait_for(lambda: [c.get("pid") for p in pods() for c in p["containers"]] == [new_init], timeout=20,
                 what="the new init discovered")
        wait_scans(agent, 2)
        assert shm("sysvSegments") == 0 and shm("usedBytes") < MiB, pod()["shm"]
        assert not any(l.get("sysvId") == shmid for l in agent.json("leaks").get("leaks", []))
        shmid = int(ctr("/t/shmtool", "sysv", "1").stdout.split()[1])
        ctr("/t/shmtool", "create", "after", "1")
        wait_scans(agent, 2)
        assert shm("sysvSegments") == 1 and shm("sysvBytes") == MiB
        assert shm("files") == 1
    finally:
        for p in spawned:
            p.kill()
        run(["runc", "--root", state, "delete", "-f", cid], check=False)
        if agent:
            agent.stop()


def test_bind_mount_of_an_idle_file_is_seen(tmp_path, root_and_runc):
    require(HOLDERS.exists(), f"holders not built at {HOLDERS}")
    fs = Tmpfs(tmp_path / "shm")
    shm = fs.path
    base = tmp_path / "agent"
    agent = None
    mounts = []

    def state_of(path):
        for p in agent.json("pods").get("pods", []):
            for seg in p.get("topSegments", []):
                if seg["path"] == str(path):
                    return seg.get("state"), [h.get("reference", "") for h in seg.get("holders", [])]
        return None, []

    def bind(src, name):
        target = tmp_path / name
        target.write_bytes(b"")
        m = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                              f'mount --bind "{src}" "{target}" && echo ready && exec sleep 120'],
                             stdout=subprocess.PIPE, text=True, start_new_session=True)
        mounts.append(m)
        assert read_line(m, 60, "the bind mount ready").strip() == "ready"
        assert str(target) in open(f"/proc/{m.pid}/mountinfo").read()  # positive control: the mount exists
        return target

    try:
        scratch = shm / "scratch"
        scratch.write_bytes(b"x" * 4096)
        agent = start_agent(base, agent_config(base, [shm], grace="1s"))
        wait_for(lambda: state_of(scratch)[0] == "LEAK_STATE_UNHELD", timeout=20, what="the scratch file unheld")
        wait_scans(agent, 3)  # idle

        # No evidence: recent references, the mount shows within REFS_EVERY scans of its making (counted
        # by the agent from after the mount exists, +1 for a scan that had begun before; not by polls,
        # which under load see several scans each).
        target = bind(scratch, "scratch-data")
        wait_scans(agent, REFS_EVERY + 1)
        assert state_of(scratch)[0] == "LEAK_STATE_HELD", "the mount references were read later than their bound"
        assert any(str(target) in r for r in state_of(scratch)[1])

        # Evidence: references read afresh, held at the next scan, never reclaimed.
        _, (seg,) = make_leaks(shm, 1, "bind")
        wait_for(lambda: state_of(seg)[0] == "LEAK_STATE_LEAKED", timeout=20, what="the dead creator's file leaked")
        target = bind(seg, "consumer-data")
        wait_scans(agent, 2)
        state, refs = state_of(seg)
        assert state == "LEAK_STATE_HELD" and any(str(target) in r for r in refs), (state, refs)
        agent.cli("reclaim", "--yes", check=False)
        assert seg.exists()
    finally:
        for m in mounts:
            m.kill()
            m.wait()
        if agent:
            agent.stop()
        fs.stop()
