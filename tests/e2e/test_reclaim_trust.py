"""Verdicts under a real, private Docker engine (issue 10): forged creator
records from container users never make a segment `leaked` and never get it
removed, and `pods`, `leaks`, `watch -o json`, `status` and /metrics tell the
same story for one node state:

- a held file (held), a closed scratch file written with dd (unheld, never
  leaked), a torch_<deadpid>_0 file past grace (leaked);
- a leak in a tmpfs shared by two containers (--ipc=shareable and
  --ipc=container:), counted once, under the owner.

The agent runs with `leaks.reclaim: report`; reclaims are asked for per pod
(`reclaim --yes --pod NAME`), so no other test's container is ever touched.
"""
import json
import shutil
import subprocess
import time

import pytest

from harness import CLI, SHMTOOL, require, wait_for
from reclaim_attack import (HOLDERS, agent_config, metric_sum, metric_values, scrape, start_agent,
                            world_reachable_dir)

MiB = 1 << 20
IMG = "shmk-busybox:test"
NOBODY = "65534:65534"
NAMES = ("trust-owner", "trust-neighbour", "held-owner", "held-neighbour", "verdict-app", "verdict-owner",
         "verdict-neighbour", "userns-forge", "pidns-owner", "pidns-neighbour", "xattr-plant")


@pytest.fixture(scope="module")
def env(docker_engine, tmp_path_factory):
    require(SHMTOOL.exists() and HOLDERS.exists(), f"shmtool/holders not built at {SHMTOOL.parent}")
    base = tmp_path_factory.mktemp("trust-agent")
    evdir = world_reachable_dir()
    agent = start_agent(base, agent_config(base, [], event_socket=evdir / "events.sock",
                                           runtime_roots=[docker_engine.exec_root / "runtime-runc" / "moby"],
                                           docker_socket=docker_engine.sock))
    agent.evdir = evdir
    yield agent
    agent.stop()
    for n in NAMES:
        docker_engine.docker("rm", "-f", n, check=False)
    shutil.rmtree(evdir, ignore_errors=True)


def start(engine, evdir, name, *flags):
    engine.docker("rm", "-f", name, check=False)
    engine.docker("run", "-d", "--name", name, "-v", f"{SHMTOOL}:/t/shmtool:ro", "-v", f"{HOLDERS}:/t/holders:ro",
                  "-v", f"{evdir}:/ev", *flags, IMG, "sleep", "600")


def sh(engine, name, script, user=None, check=True):
    return engine.docker("exec", *(["-u", user] if user else []), name, "sh", "-c", script, check=check)


def inode(engine, name, path):
    p = engine.docker("exec", name, "stat", "-c", "%i", path, check=False)
    return p.stdout.strip() if p.returncode == 0 else None


def torch_leak(engine, name, mib):
    """A torch_<pid>_0 file of `mib` MiB whose creator is dead (SIGKILL); its pid in the container."""
    return int(engine.docker("exec", name, "/t/shmtool", "torch-leak", str(mib), check=False).stdout.split()[1])


def json_stream(text):
    """The JSON documents printed one after another (watch -o json)."""
    dec, out, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        doc, i = dec.raw_decode(text, i)
        out.append(doc)


def leaks(agent):
    return agent.json("leaks").get("leaks", [])


def pods(agent):
    return {p["name"]: p for p in agent.json("pods").get("pods", [])}


def test_forged_records_from_container_users(docker_engine, env):
    """In the owner container: a file held by a process, a root-owned 0600
    file, and a file whose live creator sent a verified record and closed it.
    From the neighbour sharing its /dev/shm: records by uid 65534 for all
    three (the 0600 one it cannot even open), and by root (holding the file
    as it sends) for the live creator's file. None may become `leaked` or be
    removed; the rejected records are counted."""
    agent, e = env, docker_engine
    start(e, agent.evdir, "trust-owner", "--ipc", "shareable")
    start(e, agent.evdir, "trust-neighbour", "--ipc", "container:trust-owner")
    sh(e, "trust-owner", "for f in held secret alive; do dd if=/dev/zero of=/dev/shm/$f bs=4k count=4 2>/dev/null; "
                         "done; busybox chmod 600 /dev/shm/secret; busybox chmod 644 /dev/shm/held /dev/shm/alive")
    e.docker("exec", "-d", "trust-owner", "/t/holders", "hold", "-t", "600", "/dev/shm/held")
    e.docker("exec", "-d", "trust-owner", "/t/holders", "forge", "-S", "/ev/events.sock", "-o", "-k", "600", "alive")
    time.sleep(1)  # the creator's record is in before any forgery
    paths = ["/dev/shm/held", "/dev/shm/secret", "/dev/shm/alive"]
    before_ino = {p: inode(e, "trust-owner", p) for p in paths}
    rejected0 = metric_sum(scrape(agent), "shmkeeper_event_datagrams_rejected_total")
    out = []
    for name, opts in [("held", ""), ("secret", "-o"), ("alive", "")]:
        out.append(sh(e, "trust-neighbour", f"/t/holders forge -S /ev/events.sock {opts} {name}", user=NOBODY).stdout)
    out.append(sh(e, "trust-neighbour", "/t/holders forge -S /ev/events.sock -o alive").stdout)
    assert all("sent path=" in o for o in out), out
    assert "opened=0" in out[1], f"uid 65534 must not be able to open the 0600 file: {out[1]}"
    leaked, deadline = set(), time.time() + 5  # five scans past grace
    while time.time() < deadline:
        leaked |= {l["path"] for l in leaks(agent) if l["path"] in paths and l["state"] == "LEAK_STATE_LEAKED"}
        time.sleep(0.5)
    for pod in ("trust-owner", "trust-neighbour"):
        agent.cli("reclaim", "--yes", "--pod", pod, check=False)
    after_ino = {p: inode(e, "trust-owner", p) for p in paths}
    rejected = metric_sum(scrape(agent), "shmkeeper_event_datagrams_rejected_total") - rejected0
    problems = []
    if leaked:
        problems.append(f"forged records made these leaked: {sorted(leaked)}")
    if after_ino != before_ino:
        problems.append(f"removed or replaced after forged records: before {before_ino}, after {after_ino}")
    if rejected < 3:
        problems.append(f"shmkeeper_event_datagrams_rejected_total grew by {rejected}, expected >= 3")
    assert not problems, "\n".join(problems)


def test_files_held_from_the_neighbour_container_are_never_reclaimed(docker_engine, env):
    """torch_<deadpid>_* files in the owner's /dev/shm, held only by processes
    of the neighbour sharing it: a zombie leader's worker and a thread with a
    private fd table."""
    agent, e = env, docker_engine
    start(e, agent.evdir, "held-owner", "--ipc", "shareable")
    # Docker's default seccomp profile refuses unshare(2) without CAP_SYS_ADMIN:
    # unconfined, so that the private-fd-table holder really runs.
    start(e, agent.evdir, "held-neighbour", "--ipc", "container:held-owner", "--security-opt", "seccomp=unconfined")
    names = [f"torch_99999_{k}" for k in ("zombie", "private")]
    sh(e, "held-owner", "; ".join(f"dd if=/dev/zero of=/dev/shm/{n} bs=4k count=4 2>/dev/null" for n in names))
    before = {n: inode(e, "held-owner", f"/dev/shm/{n}") for n in names}
    e.docker("exec", "-d", "held-neighbour", "/t/holders", "zombie", "-t", "600", f"/dev/shm/{names[0]}")
    e.docker("exec", "-d", "held-neighbour", "/t/holders", "private-fd", "-t", "600", f"/dev/shm/{names[1]}")
    running = wait_for(lambda: (lambda t: "[holders] <defunct>" in t and "private-fd" in t and t)(
        e.docker("top", "held-neighbour").stdout), timeout=20, what="both holders running")
    agent.wait_scans(4)  # several scans past grace with the holders in place
    assert "[holders] <defunct>" in running and "private-fd" in running, f"a holder did not start:\n{running}"
    listed = [(l["pod"]["name"], l["path"], l["state"]) for l in leaks(agent) if l["path"].endswith(tuple(names))]
    for pod in ("held-owner", "held-neighbour"):
        agent.cli("reclaim", "--yes", "--pod", pod, check=False)
    after = {n: inode(e, "held-owner", f"/dev/shm/{n}") for n in names}
    assert after == before and not listed, f"held files listed: {listed}; inodes before {before}, after {after}"
    # Positive control: with the neighbour (and so both holders) gone, the very
    # files become leaks of the owner and are reclaimed: the holders, nothing
    # else, kept them.
    e.docker("rm", "-f", "held-neighbour")
    paths = {f"/dev/shm/{n}" for n in names}
    wait_for(lambda: paths <= {l["path"] for l in leaks(agent) if l.get("reclaimable")}, timeout=30,
             what="the released files listed as reclaimable leaks")
    agent.cli("reclaim", "--yes", "--pod", "held-owner")
    gone = {n: inode(e, "held-owner", f"/dev/shm/{n}") for n in names}
    assert gone == {n: None for n in names}, f"released files not reclaimed: {gone}"


def test_verdicts_agree_across_pods_leaks_watch_and_metrics(docker_engine, env):
    agent, e = env, docker_engine
    watch_out = agent.base / "watch.jsonl"
    watch = subprocess.Popen([str(CLI), "watch", "-o", "json", "--agent", str(agent.sock)],
                             stdout=open(watch_out, "w"), stderr=subprocess.STDOUT)
    try:
        agent.wait_watching()  # subscribed: every event from here reaches it
        start(e, agent.evdir, "verdict-app")
        start(e, agent.evdir, "verdict-owner", "--ipc", "shareable")
        start(e, agent.evdir, "verdict-neighbour", "--ipc", "container:verdict-owner")
        e.docker("exec", "-d", "verdict-app", "/t/shmtool", "hold", "data", "4")
        sh(e, "verdict-app", "dd if=/dev/zero of=/dev/shm/scratch bs=1M count=3 2>/dev/null")
        app_pid = torch_leak(e, "verdict-app", 2)
        nb_pid = torch_leak(e, "verdict-neighbour", 1)
        app_leak, shared_leak = f"/dev/shm/torch_{app_pid}_0", f"/dev/shm/torch_{nb_pid}_0"

        def settled():
            ls = leaks(agent)
            mine = [l for l in ls if l["path"] in (app_leak, shared_leak)]
            return len(mine) >= 2 and all(l.get("reclaimable") for l in mine) and ls
        ls = wait_for(settled, timeout=15, what="both leaks past grace")
        ps, node, text = pods(agent), agent.json("status")["node"], scrape(agent)

        def delivered():  # watch has written the LEAK_FOUND of both leaks (a document cut short: not yet)
            try:
                evs = json_stream(watch_out.read_text())
            except ValueError:
                return False
            found = {ev.get("path") for ev in evs if ev.get("type") == "EVENT_TYPE_LEAK_FOUND"}
            return {app_leak, shared_leak} <= found
        wait_for(delivered, timeout=30, what="watch's LEAK_FOUND of both leaks")
    finally:
        watch.terminate()
        watch.wait(timeout=10)
    events = json_stream(watch_out.read_text())
    problems = []

    def expect(cond, what):
        if not cond:
            problems.append(what)

    by = {}
    for l in ls:
        by.setdefault(l["path"], []).append(l)
    # leaks
    expect("/dev/shm/data" not in by, f"the held file is listed as a leak: {by.get('/dev/shm/data')}")
    scratch = [l for l in by.get("/dev/shm/scratch", []) if l["pod"]["name"] == "verdict-app"]
    expect(len(scratch) == 1 and scratch[0]["state"] == "LEAK_STATE_UNHELD" and not scratch[0].get("reclaimable"),
           f"the dd scratch file must be listed once as LEAK_STATE_UNHELD, not reclaimable: {scratch}")
    app = by.get(app_leak, [])
    expect(len(app) == 1 and app[0]["state"] == "LEAK_STATE_LEAKED" and app[0].get("reclaimable"),
           f"{app_leak} must be listed once, LEAK_STATE_LEAKED and reclaimable: {app}")
    shared = by.get(shared_leak, [])
    expect(len(shared) == 1 and shared[0]["pod"]["name"] == "verdict-owner" and
           shared[0]["state"] == "LEAK_STATE_LEAKED",
           "the shared tmpfs's leak must be listed once, under verdict-owner: "
           f"{[(l['pod']['name'], l['state']) for l in shared]}")
    leaked_sum = sum(int(l["bytes"]) for l in ls if l["state"] == "LEAK_STATE_LEAKED")

    def pod_sum(name, states):
        return sum(int(l["bytes"]) for l in ls if l["pod"]["name"] == name and l["state"] in states)
    both = ("LEAK_STATE_LEAKED", "LEAK_STATE_UNHELD")
    # pods
    for name, leaked_want, unheld_want in [("verdict-app", 2 * MiB, 5 * MiB), ("verdict-owner", MiB, MiB),
                                           ("verdict-neighbour", 0, 0)]:
        p = ps.get(name, {})
        got_l, got_u = int(p.get("leakedBytes", 0)), int(p.get("unheldBytes", 0))
        expect(got_l == pod_sum(name, ("LEAK_STATE_LEAKED",)) == leaked_want,
               f"pods {name}: leakedBytes {got_l}, leaks says {pod_sum(name, ('LEAK_STATE_LEAKED',))}, "
               f"want {leaked_want}")
        expect(got_u == pod_sum(name, both) == unheld_want,
               f"pods {name}: unheldBytes {got_u}, leaks says {pod_sum(name, both)}, want {unheld_want}")
    # status
    expect(int(node.get("leakedBytes", 0)) == leaked_sum,
           f"status: node leakedBytes {node.get('leakedBytes')} != sum of LEAKED in leaks {leaked_sum}")
    expect(sum(int(p.get("leakedBytes", 0)) for p in ps.values()) == leaked_sum,
           "status/pods: the pods' leakedBytes do not add up to the leaks' (a shared tmpfs counted twice?)")
    # watch
    found = [ev for ev in events if ev.get("type") == "EVENT_TYPE_LEAK_FOUND"]
    paths = [ev.get("path") for ev in found]
    expect(app_leak in paths and shared_leak in paths, f"watch: no LEAK_FOUND for the leaks: {paths}")
    expect("/dev/shm/scratch" not in paths and "/dev/shm/data" not in paths,
           "watch: LEAK_FOUND for a file that is not leaked: "
           f"{[(ev['pod'].get('name'), ev.get('path')) for ev in found]}")
    expect(paths.count(shared_leak) == 1, f"watch: {paths.count(shared_leak)} LEAK_FOUND for the shared leak")
    # metrics
    for name, series, want in [("verdict-app", "shmkeeper_pod_leaked_bytes", 2 * MiB),
                               ("verdict-app", "shmkeeper_pod_unheld_bytes", 5 * MiB),
                               ("verdict-owner", "shmkeeper_pod_leaked_bytes", MiB),
                               ("verdict-neighbour", "shmkeeper_pod_leaked_bytes", 0)]:
        vals = [v for k, v in metric_values(text, series).items() if f'pod="{name}"' in k]
        expect(vals == [want], f"/metrics {series}{{pod={name}}} = {vals}, want [{want}]")
    expect(metric_values(text, "shmkeeper_node_leaked_bytes").get("") == leaked_sum,
           f"/metrics shmkeeper_node_leaked_bytes = {metric_values(text, 'shmkeeper_node_leaked_bytes')}, "
           f"leaks says {leaked_sum}")
    assert not problems, "\n".join(problems)



def test_userns_root_in_a_container_cannot_claim_roots_file(docker_engine, env):
    """Issue 22: uid 1000 in a container (seccomp unconfined, as Kubernetes'
    default profile is) makes a user namespace whose root maps to itself,
    opens root's 0644 /dev/shm/model-cache.bin and sends a creator record,
    then exits. The record is refused (userns_unmapped), the file never leaked
    nor removed. Control: its record for a file uid 1000 owns is honoured."""
    agent, e = env, docker_engine
    start(e, agent.evdir, "userns-forge", "--security-opt", "seccomp=unconfined")
    sh(e, "userns-forge", "dd if=/dev/zero of=/dev/shm/model-cache.bin bs=64k count=1 2>/dev/null; "
                          "dd if=/dev/zero of=/dev/shm/own-cache.bin bs=64k count=1 2>/dev/null; "
                          "busybox chmod 644 /dev/shm/*.bin; busybox chown 1000:1000 /dev/shm/own-cache.bin")
    before = inode(e, "userns-forge", "/dev/shm/model-cache.bin")
    refused0 = metric_values(scrape(agent), "shmkeeper_event_datagrams_rejected_total").get(
        '{reason="userns_unmapped"}', 0)
    outs = [sh(e, "userns-forge", f"/t/holders forge -S /ev/events.sock -U -o {n}", user="1000:1000").stdout
            for n in ("model-cache.bin", "own-cache.bin")]
    # Positive control: sent from root of a user namespace, holding the file.
    assert all("sent path=" in o and "opened=1" in o and " uid=0 " in o for o in outs), outs
    states, deadline = {}, time.time() + 6
    while time.time() < deadline:
        for l in leaks(agent):
            if l["pod"]["name"] == "userns-forge":
                states.setdefault(l["path"], set()).add(l["state"])
        time.sleep(0.5)
    agent.cli("reclaim", "--yes", "--pod", "userns-forge", check=False)
    refused = metric_values(scrape(agent), "shmkeeper_event_datagrams_rejected_total").get(
        '{reason="userns_unmapped"}', 0) - refused0
    problems = []
    if "LEAK_STATE_LEAKED" in states.get("/dev/shm/model-cache.bin", set()):
        problems.append("root's file became leaked on a record from a user namespace that does not map root")
    if inode(e, "userns-forge", "/dev/shm/model-cache.bin") != before:
        problems.append("root's file was removed")
    if refused < 1:
        problems.append(f"rejected_total{{reason=userns_unmapped}} grew by {refused}")
    if "LEAK_STATE_LEAKED" not in states.get("/dev/shm/own-cache.bin", set()):
        problems.append(f"control: the record for the sender's own file was not honoured: {states}")
    assert not problems, "\n".join(problems)


def test_pid_in_a_neighbour_pid_namespace_is_alive(docker_engine, env):
    """Issue 22: two containers share one /dev/shm and IPC namespace
    (--ipc=shareable, --ipc=container:) but not their pid namespaces. A live
    process of the neighbour creates torch_<its pid>_0 and closes it; that pid
    does not exist in the owner's namespace. The file is not leaked and
    survives reclaim; once that process exits, it is leaked (control)."""
    agent, e = env, docker_engine
    start(e, agent.evdir, "pidns-owner", "--ipc", "shareable")
    start(e, agent.evdir, "pidns-neighbour", "--ipc", "container:pidns-owner")
    # Burn pids first, so that the creator's pid is one the owner's namespace does not have.
    e.docker("exec", "-d", "pidns-neighbour", "sh", "-c",
             "i=0; while [ $i -lt 40 ]; do true & i=$((i+1)); done; wait; "
             "sh -c 'dd if=/dev/zero of=/dev/shm/torch_$$_0 bs=64k count=1 2>/dev/null; echo $$ > /tmp/creator; "
             "exec sleep 600' & wait")
    pid = int(wait_for(lambda: sh(e, "pidns-neighbour", "cat /tmp/creator", check=False).stdout.strip(),
                       timeout=20, what="the neighbour's creator"))
    path = f"/dev/shm/torch_{pid}_0"
    # Positive control: the creator runs in the neighbour, its pid is absent from the owner's namespace.
    assert sh(e, "pidns-neighbour", f"kill -0 {pid}", check=False).returncode == 0
    assert sh(e, "pidns-owner", f"test -e /proc/{pid}", check=False).returncode != 0, "pid collision: rerun"
    before = inode(e, "pidns-owner", path)
    seen, deadline = set(), time.time() + 5
    while time.time() < deadline:
        seen |= {l["state"] for l in leaks(agent) if l["path"] == path}
        time.sleep(0.5)
    for pod in ("pidns-owner", "pidns-neighbour"):
        agent.cli("reclaim", "--yes", "--pod", pod, check=False)
    kept = metric_values(scrape(agent), "shmkeeper_node_segments_kept").get('{reason="creator_in_other_pid_ns"}', 0)
    problems = []
    if "LEAK_STATE_LEAKED" in seen:
        problems.append(f"{path} of a live process of the neighbour pid namespace was called leaked")
    if inode(e, "pidns-owner", path) != before:
        problems.append(f"{path} was removed while its creator runs")
    if kept < 1:
        problems.append(f"shmkeeper_node_segments_kept{{reason=creator_in_other_pid_ns}} = {kept}")
    assert not problems, "\n".join(problems)
    sh(e, "pidns-neighbour", f"kill {pid}")
    wait_for(lambda: any(l["path"] == path and l["state"] == "LEAK_STATE_LEAKED" for l in leaks(agent)),
             timeout=20, what="leaked once its creator is gone (control)")


def test_privileged_container_plants_quarantine_name_xattrs(docker_engine, env):
    """Issue 22: a privileged container plants trusted.shmkeeper.name on
    quarantine-named files: one naming a held file of its /dev/shm, one naming
    a quarantine name (a rename loop). Neither the held file nor any other is
    replaced, and no quarantine name is taken from an xattr."""
    agent, e = env, docker_engine
    # CAP_SYS_ADMIN is what trusted.* xattrs need (this sandbox cannot start a fully --privileged container).
    start(e, agent.evdir, "xattr-plant", "--cap-add", "SYS_ADMIN")
    sh(e, "xattr-plant", "dd if=/dev/zero of=/dev/shm/victim bs=64k count=1 2>/dev/null")
    e.docker("exec", "-d", "xattr-plant", "/t/holders", "hold", "-t", "600", "/dev/shm/victim")
    before = inode(e, "xattr-plant", "/dev/shm/victim")
    outs = [sh(e, "xattr-plant", f"/t/holders plant -p {v} /dev/shm/.shmkeeper-reclaim.#{i}").stdout
            for i, v in ((1, "victim"), (2, ".shmkeeper-reclaim.again"))]
    # Positive control: the xattrs were set (a privileged container may).
    assert all("planted " in o for o in outs), outs
    for _ in range(4):
        agent.cli("reclaim", "--yes", "--pod", "xattr-plant", check=False)
        time.sleep(1)
    names = sh(e, "xattr-plant", "ls -a /dev/shm").stdout.split()
    assert inode(e, "xattr-plant", "/dev/shm/victim") == before, names
    # On the landed main the second file went .shmkeeper-reclaim.again, then "again" at the next scan.
    assert ".shmkeeper-reclaim.again" not in names and "again" not in names, names
