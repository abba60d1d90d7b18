"""The observer (issue 23): who uses shm learnt from fanotify events and lease
probes, not from sampling /proc. Private shmkeeperd instances on private
tmpfs mounts, real processes, real kernel.

- intermittent use: a file opened, used and closed every 300 ms by a
  consumer whose creator is dead is never `leaked` and never removed while
  `reclaim --yes` runs in a loop for 3x leaks.grace; the same consumer
  against the forced scan mode (agent.observer: scan) is the positive
  control: there the file is reclaimed under it (the sampling blind spot);
- the same for a SysV segment attached and detached every 300 ms in a real
  runc container (its own IPC namespace), its creator dead; a second segment
  of the same creator nobody uses is reclaimed (the loop works);
- start-up with files already held: correct from the first snapshot;
- a queue overflow (agent stopped while 20,000 files are opened): counted,
  followed by a walk of /proc, no wrong verdict afterwards;
- the forced fallback reports mode scan and keeps the verdicts;
- an O_PATH holder (the lease probe's blind spot): judged leaked by the
  observer, kept by reclaim's final walk, counted by the audit (walk_only).
- creates in a runc container's /dev/shm: each disarms that tmpfs's create
  events once and is listed by an early scan (the scan re-armed them).
Tests wait on the agent's counters (scans, walks), not on fixed sleeps.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from harness import BULK_S, SHMTOOL, oci_bundle, read_line, require, run, wait_for
from reclaim_attack import (Holder, IntermittentUser, ReclaimLoop, Tmpfs, agent_config, leaks_by_path, make_leaks,
                            metric_values, scrape, start_agent)

GRACE = 2  # seconds


def config(base, shm, observer="fanotify"):
    text = agent_config(base, [shm], grace=f"{GRACE}s")
    return text.replace("  scanInterval:", f"  observer: {observer}\n  scanInterval:", 1)


def metric(agent, name, labels=""):
    vals = metric_values(scrape(agent), name)
    if labels:
        return sum(v for k, v in vals.items() if labels in k)
    return sum(vals.values())


def wait_scans(agent, n=2, timeout=30):
    """Waits until `n` more scans have completed (an event to wait on)."""
    start = metric(agent, "shmkeeper_scans_total")
    wait_for(lambda: metric(agent, "shmkeeper_scans_total") >= start + n, timeout=timeout, what=f"{n} scans")


@pytest.mark.parametrize("observer", ["fanotify", "scan"])
def test_intermittent_use_is_never_leaked(tmp_path, shm, observer):
    agent = start_agent(tmp_path / "agent", config(tmp_path / "agent", shm, observer=observer))
    user = None
    try:
        assert metric(agent, "shmkeeper_observer_mode", f'mode="{observer}"') == 1
        _, (used,) = make_leaks(shm, 1, "used")
        _, (control,) = make_leaks(shm, 1, "control")  # a true leak: must go (the loop works)
        ino = os.stat(used).st_ino
        # The user outlives the loop (ended only after the last reclaim, below): once it stops, `used` is
        # rightly a leak after the grace, and a loop still running then would reclaim it.
        user = IntermittentUser(used)
        loop = ReclaimLoop(agent)
        seen = set()
        try:
            end = time.monotonic() + 3 * GRACE + 2
            while time.monotonic() < end:
                l = leaks_by_path(agent).get(str(used))
                if l:
                    seen.add(l.get("state"))
                time.sleep(0.1)
        finally:
            loop.stop()
        try:
            assert user.running(), "the user stopped while the reclaim loop ran"
            assert not loop.errors, loop.errors
            assert loop.calls >= 1, "no reclaim ran"
            wait_for(lambda: not control.exists(), timeout=20, what="the true leak reclaimed")
            kept = used.exists() and os.stat(used).st_ino == ino
        finally:
            out = user.finish()
        if observer == "fanotify":
            assert kept, f"intermittently used file removed ({out})"
            assert "enoent=0" in out, out
            assert "LEAK_STATE_LEAKED" not in seen and "leaked" not in seen, seen
            assert metric(agent, "shmkeeper_proc_walks_total", 'reason="scan"') == 0
        else:
            # Positive control: sampling misses the use between scans, so the
            # scan mode removes the file under its consumer.
            assert not kept or "enoent=0" not in out, out
    finally:
        if user:
            user.kill()
        agent.stop()


def runc_with_shmtool(tmp_path, rootfs, name):
    """A runc container `name` (sleep 600, its own namespaces, shmtool at
    /t/shmtool) under the runc root it returns; the caller deletes it."""
    require(shutil.which("runc") is not None, "runc is not installed")
    require(SHMTOOL.exists(), f"shmtool not built at {SHMTOOL}")
    state = tmp_path / "runc-root"

    def edit(spec):
        spec["mounts"].append({"destination": "/t/shmtool", "type": "bind", "source": str(SHMTOOL),
                               "options": ["bind", "ro"]})

    bundle = oci_bundle(tmp_path / name, rootfs, ["sleep", "600"], edit=edit)
    subprocess.run(["runc", "--root", str(state), "run", "-d", "--bundle", str(bundle), name], check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    return state


def test_intermittent_sysv_peer_in_a_container_is_never_leaked(tmp_path, rootfs):
    state = runc_with_shmtool(tmp_path, rootfs, "sysv")
    base = tmp_path / "agent"
    agent = None
    try:
        init = int(json.loads(run(["runc", "--root", state, "state", "sysv"]).stdout)["pid"])
        # Positive control: the container has an IPC namespace of its own.
        assert os.readlink(f"/proc/{init}/ns/ipc") != os.readlink("/proc/self/ns/ipc")

        def ctr(*args, **kw):
            return run(["runc", "--root", state, "exec", "sysv", *args], **kw)

        # Two segments whose creators (shmtool sysv) have exited.
        used, control = (int(ctr("/t/shmtool", "sysv", "1").stdout.split()[1]) for _ in range(2))

        def segments():
            return {int(line.split()[1]) for line in ctr("cat", "/proc/sysvipc/shm").stdout.splitlines()[1:]}

        assert {used, control} <= segments()
        agent = start_agent(base, agent_config(base, [], grace=f"{GRACE}s", runtime_roots=[state]))
        assert metric(agent, "shmkeeper_observer_mode", 'mode="fanotify"') == 1
        seconds = 3 * GRACE + 2
        # One peer for both phases, ended by SIGTERM (runc forwards it) only after the last reclaim loop has
        # stopped: once it stops attaching, `used` is a true leak after the grace, so a loop that outlives it
        # (or starts before its first attach: `used` was last detached by its creator, before the agent
        # started) rightly reclaims it. Its 600 s are a bound, never waited for.
        peer = subprocess.Popen(["runc", "--root", str(state), "exec", "sysv", "/t/shmtool", "sysv-use", str(used),
                                 "300", "600"], stdout=subprocess.PIPE, text=True)
        try:
            assert read_line(peer, 60, "the peer's first attach").startswith("ready"), "the peer did not attach"
            loop = ReclaimLoop(agent)
            seen = set()
            try:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    seen |= {l.get("state") for l in agent.json("leaks").get("leaks", []) if l.get("sysvId") == used}
                    time.sleep(0.1)
            finally:
                loop.stop()
            assert peer.poll() is None, "the peer stopped while the reclaim loop ran"
            assert not loop.errors, loop.errors
            assert loop.calls >= 1, "no reclaim ran"
            assert "LEAK_STATE_LEAKED" not in seen, seen
            assert used in segments(), "the intermittently attached segment was removed"
            # The control: the same creator's segment nobody attaches is reclaimed by the same kind of loop,
            # while `used` is still attached every 300 ms.
            loop = ReclaimLoop(agent)
            try:
                wait_for(lambda: control not in segments(), timeout=20, what="the unused SysV segment reclaimed")
                assert used in segments()
            finally:
                loop.stop()
            assert peer.poll() is None, "the peer stopped while the reclaim loop ran"
        finally:
            peer.terminate()
            try:
                out = peer.communicate(timeout=30)[0]
            except subprocess.TimeoutExpired:
                peer.kill()
                raise
        assert "errors=0" in out and int(out.split("uses=")[1].split()[0]) >= seconds * 2, out
    finally:
        run(["runc", "--root", state, "delete", "-f", "sysv"], check=False)
        if agent:
            agent.stop()


def test_startup_with_files_already_held(tmp_path, shm):
    _, held = make_leaks(shm, 3, "held")
    _, free = make_leaks(shm, 3, "free")
    holder = Holder(tmp_path, "hold", "hold", "-t", 60, *held)
    holder.wait_ready()
    agent = start_agent(tmp_path / "agent", config(tmp_path / "agent", shm))
    try:
        leaks = leaks_by_path(agent)  # the first snapshot, right after start
        assert not any(str(p) in leaks for p in held), leaks.keys()
        assert all(str(p) in leaks for p in free), leaks.keys()
        wait_for(lambda: all(l.get("reclaimable") for p, l in leaks_by_path(agent).items() if "free" in p),
                 timeout=20, what="free files leaked")
        out = agent.json("reclaim", "--yes")
        gone = {l["path"] for l in out.get("reclaimed", [])}
        assert gone == {str(p) for p in free}, gone
        assert all(p.exists() for p in held)
        assert metric(agent, "shmkeeper_proc_walks_total", 'reason="startup"') == 1
        # Holders opened before the mark: named by scans that do not walk too
        # (seeded from the start-up walk), with no walk since.
        wait_scans(agent, 2)
        walks = metric(agent, "shmkeeper_proc_walks_total")
        segs = {sg["path"]: sg for pd in agent.json("pods").get("pods", []) for sg in pd.get("topSegments", [])}
        for p in held:
            pids = {h.get("pid") for h in segs[str(p)].get("holders", [])}
            assert holder.proc.pid in pids, (p, segs[str(p)])
        assert metric(agent, "shmkeeper_proc_walks_total") == walks
    finally:
        agent.stop()
        holder.kill()


def test_overflow_is_counted_and_rescanned(tmp_path, shm):
    """Events are lost while the agent is stopped and 4,000 more files than the
    kernel queues are opened on a second tmpfs; meanwhile a holder takes files
    on the first. The overflow is counted, /proc is walked, and the held files
    are held (never reclaimed) while true leaks there still go."""
    with open("/proc/sys/fs/fanotify/max_queued_events") as f:
        n = int(f.read()) + 4000
    flood_fs = Tmpfs(tmp_path / "flood")
    flood = [flood_fs.path / f"f{i}" for i in range(n)]  # plain names: unheld, never leaked
    for p in flood:
        os.close(os.open(p, os.O_CREAT | os.O_RDWR, 0o600))
    _, held = make_leaks(shm, 2, "held")
    _, free = make_leaks(shm, 2, "free")
    cfg = config(tmp_path / "agent", shm).replace(f"hostShmDirs: [{shm}]", f"hostShmDirs: [{shm}, {flood_fs.path}]")
    # Every flood file listed and probed (marked): their opens are the events that overflow.
    cfg = cfg.replace("  scanInterval:", f"  maxFilesPerPod: {min(2 * n, 100000)}\n  scanInterval:", 1)
    # Every step from here works on the ~20,000 flood files (the start-up scan lists and marks them; each scan
    # re-lists them; after SIGCONT the agent reads a full queue of their events before the overflow event):
    # each waits up to harness.BULK_S, a bound on a hang, not a speed check.
    agent = start_agent(tmp_path / "agent", cfg, timeout=BULK_S)
    holder = None
    pod = ["--pod", str(shm)]
    try:
        wait_scans(agent, 1, timeout=BULK_S)
        assert metric(agent, "shmkeeper_observer_overflows_total") == 0
        walks = metric(agent, "shmkeeper_proc_walks_total", 'reason="overflow"')
        os.kill(agent.proc.pid, signal.SIGSTOP)
        try:
            for p in flood:
                os.close(os.open(p, os.O_RDONLY))
            holder = Holder(tmp_path, "hold", "hold", "-t", 60, *held)
            holder.wait_ready()
        finally:
            os.kill(agent.proc.pid, signal.SIGCONT)
        wait_for(lambda: metric(agent, "shmkeeper_observer_overflows_total") >= 1, timeout=BULK_S, what="overflow")
        wait_for(lambda: metric(agent, "shmkeeper_proc_walks_total", 'reason="overflow"') > walks, timeout=BULK_S,
                 what="a walk after the overflow")
        leaks = {l["path"]: l for l in agent.json("leaks", *pod).get("leaks", [])}
        assert not any(str(p) in leaks for p in held), "a held file judged unheld after the overflow"
        assert all(str(p) in leaks for p in free)
        wait_for(lambda: all(l.get("reclaimable") for l in agent.json("leaks", *pod).get("leaks", [])),
                 timeout=BULK_S, what="the free files leaked again after their grace")
        out = agent.json("reclaim", "--yes", *pod)
        assert {l["path"] for l in out.get("reclaimed", [])} == {str(p) for p in free}
        assert all(p.exists() for p in held)
    finally:
        agent.stop()
        if holder:
            holder.kill()
        flood_fs.stop()


def test_forced_fallback_keeps_verdicts(tmp_path, shm):
    _, held = make_leaks(shm, 2, "held")
    _, free = make_leaks(shm, 2, "free")
    holder = Holder(tmp_path, "hold", "hold", "-t", 60, *held)
    holder.wait_ready()
    agent = start_agent(tmp_path / "agent", config(tmp_path / "agent", shm, observer="scan"))
    try:
        assert metric(agent, "shmkeeper_observer_mode", 'mode="scan"') == 1
        assert metric(agent, "shmkeeper_observer_mode", 'mode="fanotify"') == 0
        wait_scans(agent, 2)
        assert metric(agent, "shmkeeper_proc_walks_total", 'reason="scan"') >= 2
        wait_for(lambda: all(l.get("reclaimable") for p, l in leaks_by_path(agent).items() if "free" in p),
                 timeout=20, what="free files leaked")
        out = agent.json("reclaim", "--yes")
        assert {l["path"] for l in out.get("reclaimed", [])} == {str(p) for p in free}
        assert all(p.exists() for p in held)
        assert "observer is scan" in agent.log.read_text()
    finally:
        agent.stop()
        holder.kill()


def test_o_path_holder_is_the_probes_blind_spot_and_the_walks_catch_it(tmp_path, shm):
    """An O_PATH descriptor takes no part in leases: the observer calls the
    file unheld (positive control: it becomes `leaked`), the audit's walk
    counts the disagreement, and reclaim's final walk keeps the file."""
    _, (f,) = make_leaks(shm, 1, "opath")
    holder = subprocess.Popen([sys.executable, "-c", "import os,sys,time; fd=os.open(sys.argv[1], os.O_PATH); "
                               "print('ready', flush=True); time.sleep(120)", str(f)], stdout=subprocess.PIPE,
                              text=True)
    assert read_line(holder, 60, "the O_PATH holder ready").strip() == "ready"
    cfg = config(tmp_path / "agent", shm).replace("  scanInterval:", "  auditInterval: 8s\n  scanInterval:", 1)
    agent = start_agent(tmp_path / "agent", cfg)
    try:
        wait_for(lambda: leaks_by_path(agent).get(str(f), {}).get("reclaimable"), timeout=20,
                 what="the O_PATH-held file judged leaked by the observer")
        out = agent.json("reclaim", "--yes")
        assert not out.get("reclaimed"), out
        assert f.exists()
        assert metric(agent, "shmkeeper_reclaim_kept_total", 'reason="held"') >= 1
        wait_for(lambda: metric(agent, "shmkeeper_proc_walks_total", 'reason="audit"') >= 1, timeout=30,
                 what="an audit walk")
        assert metric(agent, "shmkeeper_observer_audit_disagreements_total", 'kind="walk_only"') >= 1
        assert metric(agent, "shmkeeper_observer_audit_disagreements_total", 'kind="missed_event"') == 0
    finally:
        agent.stop()
        holder.kill()
        holder.wait()


def test_creates_in_a_container_cost_one_event_per_scan(tmp_path, rootfs):
    """A real runc container's /dev/shm (reached through its process, as the
    scan does): the first create after a scan disarms that tmpfs's create
    events (counted), the early scan it asks for re-arms them before it
    lists: each of three creates, one after the other's listing, is listed by
    an early scan (the periodic one is 10 minutes away)."""
    state = runc_with_shmtool(tmp_path, rootfs, "arm")
    base = tmp_path / "agent"
    agent = None
    try:
        agent = start_agent(base, agent_config(base, [], scan="600s", runtime_roots=[state]))
        assert metric(agent, "shmkeeper_observer_mode", 'mode="fanotify"') == 1

        def files():
            for p in agent.json("pods").get("pods", []):
                if "arm" in (p.get("name"), p.get("id")):
                    return int(p.get("shm", {}).get("files", 0))
            return None

        wait_for(lambda: files() == 0, timeout=10, what="the container's pod, no files")
        for i in range(1, 4):
            # Creates torch_<pid>_0 and dies by SIGKILL (a crashed creator).
            out = run(["runc", "--root", state, "exec", "arm", "/t/shmtool", "torch-leak", "1"], check=False).stdout
            assert out.startswith("ready"), out
            wait_for(lambda: files() == i, timeout=10, what=f"create {i} listed by an early scan")
            assert metric(agent, "shmkeeper_observer_create_disarms_total") >= i
    finally:
        run(["runc", "--root", state, "delete", "-f", "arm"], check=False)
        if agent:
            agent.stop()
