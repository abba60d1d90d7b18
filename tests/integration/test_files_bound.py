"""Bounded per pod (issue 35, item 3; docs/agent.md#bounded-per-pod): one
pod's /dev/shm never sets the agent's memory and CPU.

A real shmkeeperd, the release build users run (under ASan the RSS is the
allocator's: harness.release_agentd), with the default agent.maxFilesPerPod:
10000, watches two private
tmpfs: `big` (64 MiB, nr_inodes 700,000) and the usual 512 MiB one. A true
leak (torch_<dead pid>_…) on each is leaked while both are under the limit
(the positive control: judged as before). Then 600,000 empty files are made
on `big` while the agent runs. The bound: the agent's peak RSS (VmHWM) stays
under 100 MiB, its CPU (utime+stime, exited threads included) under 10 % of
a core over the scans that follow, its last scan under 1 s. Reported: the pod
is over the limit (pods -o json, the FILES column, the
shmkeeper_pod_files_over_limit gauge, a FILES_OVER_LIMIT event on the watch
stream), every file of `big` is kept (no leak listed there; kept reason
files_over_limit), and the other tmpfs's leak is still leaked. A restart with
the 600,000 files in place (the start-up walk) keeps the same bound.
On the main of issue 35 the agent lists and tracks every file: its RSS
reaches hundreds of MiB and a scan takes seconds.
"""
import os
import subprocess
import sys
import time
from pathlib import Path

from harness import CLI, release_agentd, run, wait_for
from reclaim_attack import agent_config, make_leaks, metric_values, scrape, start_agent

FILES = 600_000
RSS_BOUND_KIB = 100 * 1024
CPU_SHARE_BOUND = 0.10
SCAN_BOUND_S = 1.0
LIMIT = 10000  # agent.maxFilesPerPod's default

MAKE_FILES = r"""
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
flags = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC
for i in range(int(sys.argv[2])):
    os.close(os.open(f"empty{i}", flags, 0o644, dir_fd=fd))
"""


def status_kib(pid, field):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def cpu_seconds(pid):
    """utime + stime of the whole process (threads that exited included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pod_of(agent, path):
    pods = [p for p in agent.json("pods").get("pods", []) if p["name"] == str(path)]
    assert len(pods) == 1, pods
    return pods[0]


def leak_states(agent):
    return {l["path"]: l.get("state") for l in agent.json("leaks").get("leaks", [])}


def scans(agent):
    return int(agent.json("status")["node"]["scans"])


def measure_bound(agent, n_scans=5):
    """Waits `n_scans` scans; asserts the agent's CPU share over them, its
    peak RSS and its last scan's duration against the bounds."""
    pid = agent.proc.pid
    start, cpu0, t0 = scans(agent), cpu_seconds(pid), time.monotonic()
    wait_for(lambda: scans(agent) >= start + n_scans, timeout=60, interval=0.2, what=f"{n_scans} scans")
    share = (cpu_seconds(pid) - cpu0) / (time.monotonic() - t0)
    hwm = status_kib(pid, "VmHWM")
    print(f"agent peak RSS {hwm // 1024} MiB")
    assert hwm < RSS_BOUND_KIB, f"agent peak RSS {hwm // 1024} MiB >= {RSS_BOUND_KIB // 1024} MiB"
    assert share < CPU_SHARE_BOUND, f"agent CPU {share:.1%} of a core over {n_scans} scans"
    # scrape: the metrics port of the agent's latest start (it changes at a restart)
    last = metric_values(scrape(agent), "shmkeeper_scan_duration_seconds").get("", 0)
    assert last < SCAN_BOUND_S, f"last scan took {last:.2f} s"
    return hwm, share


def test_600k_files_in_one_tmpfs_keep_the_agent_bounded(tmp_path, shm):
    big = tmp_path / "big"
    big.mkdir()
    run(["mount", "-t", "tmpfs", "-o", "size=64m,nr_inodes=700000,mode=1777", "shmk-s9-bound", big])
    agent = watch = None
    try:
        base = tmp_path / "agent"
        agent = start_agent(base, agent_config(base, [big, shm]), release_agentd())
        _, (big_leak,) = make_leaks(big, 1, "big")
        _, (small_leak,) = make_leaks(shm, 1, "small")
        # Positive control: under the limit both are judged, leaked.
        wait_for(lambda: leak_states(agent).get(str(big_leak)) == "LEAK_STATE_LEAKED"
                 and leak_states(agent).get(str(small_leak)) == "LEAK_STATE_LEAKED", timeout=30,
                 what="both true leaks leaked")
        assert not pod_of(agent, big)["shm"].get("filesOverLimit")

        events = tmp_path / "watch.jsonl"
        watch = subprocess.Popen([str(CLI), "watch", "-o", "json", "--agent", str(agent.sock)],
                                 stdout=open(events, "w"), stderr=subprocess.STDOUT)
        agent.wait_watching(1)
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", MAKE_FILES, str(big), str(FILES)], check=True, timeout=300)
        made_in = time.monotonic() - t0
        assert os.statvfs(big).f_files - os.statvfs(big).f_ffree >= FILES

        hwm, share = measure_bound(agent)

        pod = pod_of(agent, big)
        assert pod["shm"].get("filesOverLimit") is True, pod["shm"]
        assert pod["shm"].get("filesLimit") == LIMIT, pod["shm"]
        assert pod["shm"]["files"] >= FILES + 1, pod["shm"]
        assert not pod.get("topSegments"), pod.get("topSegments")
        states = leak_states(agent)
        assert str(big_leak) not in states, "a file of a tmpfs over the limit was judged"
        assert not [p for p in states if p.startswith(str(big) + "/")], states
        assert states.get(str(small_leak)) == "LEAK_STATE_LEAKED", "the tmpfs under the limit is judged as before"
        assert not pod_of(agent, shm)["shm"].get("filesOverLimit")
        text = scrape(agent)
        over = metric_values(text, "shmkeeper_pod_files_over_limit")
        assert [v for k, v in over.items() if f'pod="{big}"' in k] == [1], over
        assert [v for k, v in over.items() if f'pod="{shm}"' in k] == [0], over
        kept = metric_values(text, "shmkeeper_node_segments_kept")
        assert kept['{reason="files_over_limit"}'] >= FILES + 1, kept
        assert f"(over limit {LIMIT})" in agent.cli("pods").stdout
        wait_for(lambda: "EVENT_TYPE_FILES_OVER_LIMIT" in events.read_text(), timeout=10,
                 what="the files_over_limit event")
        line = next(l for l in events.read_text().splitlines() if "EVENT_TYPE_FILES_OVER_LIMIT" in l)
        assert str(big) in line, line

        # The start-up walk with the files in place: bounded too.
        agent.stop()
        agent.start()
        wait_for(lambda: pod_of(agent, big)["shm"].get("filesOverLimit"), timeout=30, what="over the limit at start")
        hwm2, share2 = measure_bound(agent)
        assert leak_states(agent).get(str(small_leak)) == "LEAK_STATE_LEAKED"
        assert str(big_leak) not in leak_states(agent)
        print(f"made {FILES} files in {made_in:.1f} s; agent peak RSS {hwm // 1024} MiB, CPU {share:.1%}; "
              f"after a restart {hwm2 // 1024} MiB, {share2:.1%}")
    finally:
        if watch:
            watch.terminate()
            watch.wait(timeout=10)
        if agent:
            agent.stop()
        subprocess.run(["umount", "-l", str(big)], check=False)
