"""Several agents on one node (issue 23): a `shmkeeperd --read-only` beside
the node's agent lease-probes every file an event made dirty, as the node's
agent does, and fanotify reports each probe as an open and a close. Every
agent registers in <stateDir>/shmkeeperd.probers (a POSIX record lock, a
kernel credential: node/probers.h) and does not take a registered agent's
opens for use. Private agents on a private tmpfs, real processes.

- With the read-only agent registered beside it (the same state directory), a
  true leak becomes `leaked` for both agents and `reclaim --yes` on the node's
  agent removes it while the read-only agent runs. Positive control, first: the
  same read-only agent with a state directory of its own (not registered where
  the node's agent looks) keeps the file in use for it through its probes, and
  the other way round: never `leaked` for 3x leaks.grace, never reclaimed,
  while each agent re-probes a file nobody uses.
- With both agents running, a file held open and a file opened, used and
  closed every 300 ms by real processes (creators dead) are never `leaked`
  and never removed, under auto-reclaim and a `reclaim --yes` loop, while a
  true leak beside them is reclaimed; control: once their users stop, both
  are reclaimed.
Tests wait on the agents' verdicts and counters, not on fixed sleeps.
"""
import os
import subprocess
import sys
import time

from harness import AgentProcess, read_line, wait_for
from reclaim_attack import (IntermittentUser, ReclaimLoop, agent_config, leaks_by_path, make_leaks, metric_values,
                            scrape, start_agent)

GRACE = 3  # seconds; scans every second: a probe ping-pong refreshes "unheld since" at least every ~2 s
LEAKED = "LEAK_STATE_LEAKED"


HOLD = r"""
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
print("ready", flush=True)
time.sleep(float(sys.argv[2]))
"""


def metric(agent, name, labels=""):
    vals = metric_values(scrape(agent), name)
    return sum(v for k, v in vals.items() if labels in k)


def start_read_only(base, shm, state):
    base.mkdir(parents=True, exist_ok=True)
    return AgentProcess(base, agent_config(base, [shm], grace=f"{GRACE}s", state_dir=state)).start("--read-only")


def states_during(agents, path, seconds):
    """{agent index: set of states} that `leaks` gave for `path` during `seconds`."""
    seen = {i: set() for i in range(len(agents))}
    deadline = time.time() + seconds
    while time.time() < deadline:
        for i, a in enumerate(agents):
            l = leaks_by_path(a).get(str(path))
            if l:
                seen[i].add(l.get("state"))
        time.sleep(0.2)
    return seen


def test_read_only_agent_beside_does_not_keep_a_leak_in_use(tmp_path, shm):
    state = tmp_path / "state"
    node = start_agent(tmp_path / "node", agent_config(tmp_path / "node", [shm], grace=f"{GRACE}s", state_dir=state))
    ro = None
    try:
        # Positive control: the read-only agent registered elsewhere (its own state directory).
        ro = start_read_only(tmp_path / "ro-elsewhere", shm, tmp_path / "ro-own-state")
        _, (seg,) = make_leaks(shm, 1, "probed")
        ino = os.stat(seg).st_ino
        probes0 = metric(node, "shmkeeper_observer_probes_total")
        seen = states_during([node, ro], seg, 3 * GRACE)
        probes = metric(node, "shmkeeper_observer_probes_total") - probes0
        r = node.cli("reclaim", "--yes", check=False)
        assert r.returncode == 0, r.stderr
        assert seg.exists() and os.stat(seg).st_ino == ino, "reclaimed while the foreign probes went on"
        assert LEAKED not in seen[0] | seen[1], f"the bug did not reproduce: {seen}"
        assert seen[0] and seen[1], seen  # both listed it (unheld, not yet leaked)
        # The ping-pong: the node's agent re-probed a file that only the other agent's probes touched.
        assert probes >= GRACE, probes
        assert metric(node, "shmkeeper_observer_other_agents") == 0
        ro.stop()

        # The fix: the same read-only agent, registered in the node agent's state directory.
        ro = start_read_only(tmp_path / "ro-beside", shm, state)
        wait_for(lambda: metric(node, "shmkeeper_observer_other_agents") == 1, timeout=20,
                 what="the node's agent recognises the read-only one")
        wait_for(lambda: (leaks_by_path(node).get(str(seg)) or {}).get("state") == LEAKED, timeout=20,
                 what="leaked for the node's agent with the read-only agent probing beside it")
        wait_for(lambda: (leaks_by_path(ro).get(str(seg)) or {}).get("state") == LEAKED, timeout=20,
                 what="leaked for the read-only agent too")
        assert ro.proc.poll() is None
        r = node.cli("reclaim", "--yes", check=False)
        assert r.returncode == 0 and not seg.exists(), (r.returncode, r.stdout, r.stderr)
        assert metric(ro, "shmkeeper_observer_other_agents") == 1
        assert metric(node, "shmkeeper_observer_prober_events_total") > 0
        log = node.log.read_text()
        assert f"other shmkeeperd processes registered in {state}/shmkeeperd.probers: pid {ro.proc.pid}" in log, \
            log[-3000:]
        assert oct(os.stat(state / "shmkeeperd.probers").st_mode & 0o7777) == "0o600"
    finally:
        if ro:
            ro.stop()
        node.stop()


def test_held_and_intermittently_used_files_survive_both_agents(tmp_path, shm):
    state = tmp_path / "state"
    base = tmp_path / "node"
    node = start_agent(base, agent_config(base, [shm], grace=f"{GRACE}s", state_dir=state, reclaim="auto"))
    ro = start_read_only(tmp_path / "ro", shm, state)
    holder = user = None
    try:
        _, (held,) = make_leaks(shm, 1, "held")
        _, (used,) = make_leaks(shm, 1, "used")
        keep = {p: os.stat(p).st_ino for p in (held, used)}
        window = 3 * GRACE
        holder = subprocess.Popen([sys.executable, "-c", HOLD, str(held), str(window + 60)], stdout=subprocess.PIPE,
                                  text=True)
        assert read_line(holder, 60, "the holder ready").strip() == "ready"
        # The user outlives the loop and the check that `used` was kept (it is ended after them): once it
        # stops, `used` is rightly a leak after the grace, and the agent (reclaim: auto) removes it.
        user = IntermittentUser(used)
        _, (control,) = make_leaks(shm, 1, "control")  # a true leak beside them: must go
        loop = ReclaimLoop(node)
        try:
            seen = {0: set(), 1: set()}
            end = time.monotonic() + window
            while time.monotonic() < end:
                for i, a in enumerate([node, ro]):
                    for p in (held, used):
                        l = leaks_by_path(a).get(str(p))
                        if l:
                            seen[i].add((p.name, l.get("state")))
                time.sleep(0.2)
        finally:
            loop.stop()
        try:
            assert user.running(), "the user stopped while the reclaim loop ran"
            assert not loop.errors, loop.errors
            wait_for(lambda: not control.exists(), timeout=20, what="the true leak reclaimed with both agents running")
            kept = {p: os.stat(p).st_ino for p in (held, used) if p.exists()}
        finally:
            out = user.finish()
        assert kept == keep, f"a used file was removed ({out})"
        assert "enoent=0" in out and "uses=0" not in out, out
        assert not [s for s in seen[0] | seen[1] if s[1] == LEAKED], seen
        assert metric(node, "shmkeeper_observer_other_agents") == 1  # the read-only agent's probes were ignored
        # Control: with their users gone, both files are leaks, and go.
        holder.kill()
        holder.wait()
        wait_for(lambda: not held.exists() and not used.exists(), timeout=30,
                 what="held and used files reclaimed once their users stopped")
    finally:
        if holder and holder.poll() is None:
            holder.kill()
            holder.wait()
        if user:
            user.kill()
        ro.stop()
        node.stop()
