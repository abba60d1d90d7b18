#!/usr/bin/env python3
"""Benchmark (not a test, issue 23): does lease probing make an application wait?

A busy workload (openloop: open/close of NFILES files round robin on a private
tmpfs, every open(2) timed) runs for SECONDS: without an agent; with an agent
in fanotify mode watching that tmpfs (scanInterval 1s: the workload's opens
make every file dirty, so every scan lease-probes every file); and with that
agent stopped (SIGSTOP) for STOP seconds at random moments, then continued
(SIGCONT). Each stop reads /proc/locks while the agent is stopped: a LEASE
line of the agent's pid is a stop that caught a probe's lease (an open of that
file then waits until SIGCONT, at most fs.lease-break-time). Reported in one
run: opens, p50/p99/p99.9/max open latency, opens over 1 ms and 100 ms, probes
the agent ran, stops and stops that caught a lease; and the lease window
itself (openloop lease: F_SETLEASE to F_UNLCK, timed) with the probability
that a stop at a random moment lands in one (probes per second x window).
Run as root. Usage: bench_lease_latency.py [NFILES] [SECONDS] [STOP]
"""
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
import harness  # noqa: E402

NFILES = int(sys.argv[1]) if len(sys.argv) > 1 else 5000
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 60
STOP = float(sys.argv[3]) if len(sys.argv) > 3 else 2
OPENLOOP = harness.BUILD / "tests" / "openloop"


def workload(shm):
    out = subprocess.run([str(OPENLOOP), str(shm), str(NFILES), str(SECONDS)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)


def probes(agent):
    return agent.metrics().get("shmkeeper_observer_probes_total", 0)


def leases_of(pid):
    # /proc/locks: "1: LEASE  ACTIVE    WRITE 1234 00:2e:5678 0 EOF"
    return sum(1 for line in Path("/proc/locks").read_text().splitlines()
               if " LEASE " in line and line.split()[4] == str(pid))


class Stopper:
    """SIGSTOP the agent for STOP seconds at random moments until stopped."""

    def __init__(self, pid):
        self.pid, self.stops, self.caught, self.done = pid, 0, 0, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        rnd = random.Random(23)
        while not self.done.wait(rnd.uniform(0.2, 1.2)):
            os.kill(self.pid, signal.SIGSTOP)
            time.sleep(0.01)  # stopped by now (a group stop takes effect at the next return to user space)
            self.stops += 1
            self.caught += leases_of(self.pid) > 0
            time.sleep(STOP)
            os.kill(self.pid, signal.SIGCONT)

    def stop(self):
        self.done.set()
        self.t.join()


def main():
    harness.require(OPENLOOP.exists(), f"openloop not built at {OPENLOOP}")
    tmp = Path(tempfile.mkdtemp(prefix="shmk-benchlease-"))
    shm = tmp / "shm"
    shm.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "benchlease", str(shm)], check=True)
    rows, agent = [], None
    try:
        for i in range(NFILES):
            (shm / f"f{i}").write_bytes(b"x" * 64)
        rows.append(("no agent", workload(shm), 0, "-"))
        out = subprocess.run([str(OPENLOOP), "lease", str(shm), str(NFILES)], capture_output=True, text=True,
                             check=True)
        window = json.loads(out.stdout)
        agent = harness.AgentProcess(tmp, f"""
agent:
  socket: {tmp}/agent.sock
  eventSocket: ""
  metricsAddress: "127.0.0.1:0"
  scanInterval: 1s
  observer: fanotify
  runtimeRoots: []
  dockerSocket: ""
  hostShmDirs: [{shm}]
""").start()
        time.sleep(2)
        p0 = probes(agent)
        rows.append(("agent probing", workload(shm), probes(agent) - p0, "-"))
        p0 = probes(agent)
        stopper = Stopper(agent.proc.pid)
        try:
            w = workload(shm)
        finally:
            stopper.stop()
        rows.append((f"agent, SIGSTOP {STOP:g}s", w, probes(agent) - p0, f"{stopper.caught}/{stopper.stops}"))
    finally:
        if agent:
            os.kill(agent.proc.pid, signal.SIGCONT)
            agent.stop()
        subprocess.run(["umount", "-l", str(shm)])
        subprocess.run(["rm", "-rf", str(tmp)])
    print(f"open/close loop over {NFILES} files on a watched tmpfs, {SECONDS:.0f}s per row; "
          f"fs.lease-break-time {Path('/proc/sys/fs/lease-break-time').read_text().strip()}s")
    print(f"{'':<22}{'opens':>10}{'p50 µs':>9}{'p99 µs':>9}{'p99.9 µs':>10}{'max µs':>10}{'>1ms':>7}{'>100ms':>8}"
          f"{'probes':>9}{'stops caught':>14}")
    for label, w, n, caught in rows:
        print(f"{label:<22}{w['opens']:>10}{w['p50_us']:>9.1f}{w['p99_us']:>9.1f}{w['p999_us']:>10.1f}"
              f"{w['max_us']:>10.0f}{w['over_1ms']:>7}{w['over_100ms']:>8}{n:>9.0f}{caught:>14}")
    rate = rows[1][2] / SECONDS
    print(f"lease window (F_SETLEASE F_WRLCK entry to F_UNLCK return, {window['leases']} files): "
          f"p50 {window['p50_us']:.2f} µs, p99 {window['p99_us']:.2f} µs, mean {window['mean_us']:.3f} µs; "
          f"probes {rate:.0f}/s while probing: a stop at a random moment catches a lease with probability "
          f"<= {rate * window['mean_us'] / 1e6:.2e}")


if __name__ == "__main__":
    main()
