#!/usr/bin/env python3
"""Benchmark (not a test): shmkeeperd on a synthetic node load, against lsof.

shmload starts NPROCS processes holding FILES shm files on a private tmpfs
(25% unlinked while held, every 4th mapped) plus LEAKED files nobody holds.
shmkeeperd watches that tmpfs. Reported in one run: the agent's full scan
time (median of its own measurements), its RSS and steady-state CPU, GetPod
latency from the snapshot (p50/p99), and the time `lsof +D` takes to find
the holders of the same files. Run as root.
Usage: bench_agent.py [NPROCS] [FILES_PER_PROC] [LEAKED]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
import harness  # noqa: E402

NPROCS = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
PER = int(sys.argv[2]) if len(sys.argv) > 2 else 10
LEAKED = int(sys.argv[3]) if len(sys.argv) > 3 else 1000
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def rss_mib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main():
    tmp = Path(tempfile.mkdtemp(prefix="shmk-benchagent-"))
    shm = tmp / "shm"
    shm.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g", "benchshm", str(shm)], check=True)
    load = agent = None
    try:
        load = subprocess.Popen([str(harness.BUILD / "tests" / "shmload"), str(shm), str(NPROCS), str(PER), "25",
                                 str(LEAKED)], stdout=subprocess.PIPE, text=True)
        assert load.stdout.readline().strip() == "ready"
        files = len(os.listdir(shm))
        agent = harness.AgentProcess(tmp, f"""
agent:
  socket: {tmp}/agent.sock
  eventSocket: ""
  metricsAddress: ""
  scanInterval: 2s
  runtimeRoots: []
  dockerSocket: ""
  hostShmDirs: [{shm}]
""").start()
        durations, seen = [], set()
        deadline = time.time() + 120
        while len(durations) < 7 and time.time() < deadline:
            node = agent.json("status")["node"]
            if node["scans"] not in seen:
                seen.add(node["scans"])
                durations.append(float(node["lastScanDuration"].rstrip("s")) * 1000)
            time.sleep(0.5)
        leaks = len(agent.json("leaks").get("leaks", []))
        c0, t0 = cpu_seconds(agent.proc.pid), time.time()
        time.sleep(20)
        cpu_pct = 100 * (cpu_seconds(agent.proc.pid) - c0) / (time.time() - t0)
        rss = rss_mib(agent.proc.pid)
        lat = subprocess.run([str(harness.BUILD / "tests" / "getpod_latency"), str(agent.sock), str(shm), "2000"],
                             capture_output=True, text=True, check=True).stdout.split()
        p50, p99 = float(lat[1]), float(lat[3])
        lsof_ms = []
        for _ in range(3):
            t = time.perf_counter()
            subprocess.run(["lsof", "-n", "+D", str(shm)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            lsof_ms.append((time.perf_counter() - t) * 1000)
        scan = statistics.median(durations[1:] or durations)
        lsof = statistics.median(lsof_ms)
        print(f"shmkeeperd benchmark: {NPROCS} processes, {files} linked files "
              f"({NPROCS * PER} held, 25% of them unlinked), {leaks} leaks found")
        print(f"{'measure':<44}{'shmkeeperd':>14}{'lsof +D':>12}{'ratio':>9}")
        print(f"{'find holders of every file (median)':<44}{scan:>12.1f}ms{lsof:>10.1f}ms{lsof / scan:>8.1f}x")
        print(f"{'agent RSS':<44}{rss:>11.1f}MiB")
        print(f"{'agent steady-state CPU (scan every 2s)':<44}{cpu_pct:>13.1f}%")
        print(f"{'GetPod latency p50 / p99 (2000 calls)':<44}{p50 / 1000:>9.3f}ms / {p99 / 1000:.3f}ms")
    finally:
        if agent:
            agent.stop()
        if load:
            load.terminate()
            load.wait()
        subprocess.run(["umount", "-l", str(shm)])
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
