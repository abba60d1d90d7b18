#!/usr/bin/env python3
"""Benchmark (not a test): the cost of a safe reclaim, against a plain unlink loop.

FILES leaked files (torch_<deadpid>_<i>, 4 KiB, nobody holds them) on a
private tmpfs that shmkeeperd watches, PROCS sleeping processes on the node
(every reclaim must rule all of them out as holders). Each round: make the
files, wait until the agent lists them all reclaimable, time `shmkeeper
reclaim --yes` (the agent's fresh scan, its checks and the removals, plus
one CLI round trip); then make the same files again and time a plain C unlink
loop over them (tests/helpers/holders.c `unlink`). Reported side by side in
one run: medians of files/s and the ratio, the agent's scan time with FILES
files, and its RSS (current and peak). Run as root; a few minutes.
Usage: bench_reclaim.py [FILES] [PROCS] [ROUNDS]
"""
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from harness import AgentProcess, run  # noqa: E402
from reclaim_attack import HOLDERS, agent_config  # noqa: E402

FILES = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
PROCS = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3


def status_kib(pid, field):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reclaimable(agent):
    return sum(1 for l in agent.json("leaks").get("leaks", []) if l.get("reclaimable"))


def make(shm):
    run([HOLDERS, "leak", "-p", shm, "-n", FILES, "-x", "b"], timeout=600)


def main():
    tmp = Path(tempfile.mkdtemp(prefix="shmk-benchreclaim-"))
    shm = tmp / "shm"
    shm.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1g", "benchreclaim", str(shm)], check=True)
    sleepers = agent = None
    try:
        sleepers = subprocess.Popen([str(HOLDERS), "sleepers", "-n", str(PROCS)], stdout=subprocess.PIPE, text=True)
        assert sleepers.stdout.readline().startswith("ready"), "sleepers did not start"
        agent = AgentProcess(tmp, agent_config(tmp, [shm], scan="2s", grace="1s", max_files=2 * FILES)).start()
        agent_rate, unlink_rate, scans = [], [], []
        for _ in range(ROUNDS):
            make(shm)
            deadline = time.time() + 120
            while reclaimable(agent) < FILES and time.time() < deadline:
                time.sleep(0.5)
            node = agent.json("status")["node"]
            scans.append(float(node["lastScanDuration"].rstrip("s")) * 1000)
            t = time.perf_counter()
            out = json.loads(agent.cli("reclaim", "--yes", "-o", "json").stdout)
            wall = time.perf_counter() - t
            done = len(out.get("reclaimed", []))
            agent_rate.append(done / wall)
            if done != FILES:
                print(f"warning: the agent reclaimed {done} of {FILES} files; skipped "
                      f"{len(out.get('skipped', []))}", file=sys.stderr)
                run([HOLDERS, "unlink", shm])
            make(shm)
            res = run([HOLDERS, "unlink", shm]).stdout
            n = int(res.split("unlinked=")[1].split()[0])
            unlink_rate.append(n / float(res.split("seconds=")[1].split()[0]))
        rss, hwm = status_kib(agent.proc.pid, "VmRSS") / 1024, status_kib(agent.proc.pid, "VmHWM") / 1024
        a, u = statistics.median(agent_rate), statistics.median(unlink_rate)
        print(f"reclaim benchmark: {FILES} leaked files, {PROCS} sleeping processes, median of {ROUNDS} rounds")
        print(f"{'measure':<52}{'shmkeeperd':>14}{'unlink loop':>14}{'ratio':>9}")
        print(f"{'reclaim throughput (files/s)':<52}{a:>14.0f}{u:>14.0f}{u / a:>8.1f}x")
        print(f"{'time for all files':<52}{FILES / a * 1000:>12.1f}ms{FILES / u * 1000:>12.1f}ms")
        print(f"{'agent scan with the files present (median)':<52}{statistics.median(scans):>12.1f}ms"
              f"{'':>14}  target < 500 ms")
        print(f"{'agent RSS now / peak':<52}{rss:>8.1f}/{hwm:.1f}MiB{'':>8}  target < 64 MiB")
    finally:
        if agent:
            agent.stop()
        if sleepers:
            sleepers.terminate()
            sleepers.wait()
        subprocess.run(["umount", "-l", str(shm)])
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
