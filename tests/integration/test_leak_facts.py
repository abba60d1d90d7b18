"""The node facts a leak verdict reads (every process's namespaces, every mount
namespace's mounts) are kept between scans and read again when something says
they changed (issue 35, "cost that follows events"; node/node_facts.h). The
one thing they must not do is go stale: a leaked torch_<deadpid>_ file that is
bind-mounted afterwards, in a mount namespace the agent already knows, is
shown held by that mount (not leaked) within one scan after the mount; so is
one made in a mount namespace made after the verdict (told by the newest
mount namespace id, scan/mount_ns.h).

A private shmkeeperd (scan 1 s, grace 1 s, `leaks.reclaim: report`, so no
reclaim reads the facts afresh for it) watches a private tmpfs. Positive
control: before the mount, and with no mount at all, the file stays leaked
over several scans, and the agent did not re-read the facts at each of them
(shmkeeper_proc_walks_total{reason="evidence"} stays below the scans).
"""
import os
import subprocess

import pytest

from harness import read_line, wait_for, wait_scans
from reclaim_attack import agent_config, leaks_by_path, make_leaks, metric_values, scrape, start_agent

LEAKED = "LEAK_STATE_LEAKED"


def evidence_reads(agent):
    return sum(v for k, v in metric_values(scrape(agent), "shmkeeper_proc_walks_total").items()
               if 'reason="evidence"' in k)


def state(agent, seg):
    leak = leaks_by_path(agent).get(str(seg))
    return leak["state"] if leak else "not listed"


def mount_holders(agent, seg):
    pods = agent.json("pods").get("pods", [])
    return [h.get("reference", "") for p in pods for s in p.get("topSegments", []) if s["path"] == str(seg)
            for h in s.get("holders", []) if h.get("reference", "").startswith("mount ")]


@pytest.mark.parametrize("where", ["known_namespace", "host_namespace", "new_namespace", "none"])
def test_bind_mount_after_the_verdict_shows_within_a_scan(tmp_path, shm, where):
    # A mount namespace that exists before the file is judged (a consumer
    # that stays), so the agent knows it when it first reads the facts.
    consumer = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "300"],
                                start_new_session=True)
    base = tmp_path / "agent"
    agent = start_agent(base, agent_config(base, [shm], reclaim="report"))
    target = tmp_path / "consumer-data"
    target.write_bytes(b"")
    mounted_here = False
    later = []
    try:
        own = os.readlink("/proc/self/ns/mnt")
        wait_for(lambda: os.readlink(f"/proc/{consumer.pid}/ns/mnt") != own, timeout=10,
                 what="the consumer in a mount namespace of its own")
        _, (seg,) = make_leaks(shm, 1, "facts", size=1 << 20)
        wait_for(lambda: state(agent, seg) == LEAKED, timeout=20, what=f"{seg.name} leaked")
        # Positive control: it stays leaked, and the facts are not read at every scan.
        reads = evidence_reads(agent)
        wait_scans(agent.sock, 4)
        assert state(agent, seg) == LEAKED
        assert evidence_reads(agent) - reads < 3, "the facts were read again at every scan with nothing changed"
        if where == "known_namespace":
            subprocess.run(["nsenter", "-t", str(consumer.pid), "-m", "mount", "--bind", str(seg), str(target)],
                           check=True)
        elif where == "host_namespace":
            subprocess.run(["mount", "--bind", str(seg), str(target)], check=True)
            mounted_here = True
        elif where == "new_namespace":  # one the agent has never seen: told by its id (Linux >= 6.12)
            binder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                                       f'mount --bind "{seg}" "{target}" && echo ready && exec sleep 300'],
                                      stdout=subprocess.PIPE, text=True, start_new_session=True)
            later.append(binder)
            assert read_line(binder, 30, "the bind mount in a new namespace").strip() == "ready"
        # One scan may have started before the mount: the one after it shows it.
        wait_scans(agent.sock, 2)
        if where == "none":
            assert state(agent, seg) == LEAKED
            assert mount_holders(agent, seg) == []
            return
        assert state(agent, seg) != LEAKED, f"{seg} still leaked one scan after it was bind-mounted ({where})"
        refs = mount_holders(agent, seg)
        assert any(str(target) in r for r in refs), f"no mount shown among the holders of {seg}: {refs}"
    finally:
        if mounted_here:
            subprocess.run(["umount", str(target)])
        agent.stop()
        for p in [consumer] + later:
            p.kill()
            p.wait()
