#!/usr/bin/env python3
"""Benchmark (not a test): what libshmkeeper-preload.so costs a program.

Loops of a dynamically linked C program (shmgrow):
  - the shm_open / ftruncate(4 KiB) / mmap / munmap / shm_unlink cycle
    (shmgrow bench), without the preload, with it (the default: no commit,
    a free-space check per growth), with it and an agent listening (a
    creator record per create, through the kept socket), and with the opt-in reservation
    (SHMKEEPER_PRELOAD_RESERVE=1: a fallocate per growth);
  - open(O_CREAT | O_RDWR) of an existing /dev/shm file and close
    (shmgrow bench-open), without and with the preload.
Runs interleaved; medians, and the median of each round's ratio to the plain run.
Then the memory a sparse segment costs: 1 GiB ftruncated and mapped, two pages
touched (shmgrow sparse), in a memory cgroup of its own (v1) and a private
2 GiB /dev/shm: the cgroup's peak, and /dev/shm's use, per variant.
Usage: bench_preload.py [ROUNDS] [CYCLES]
"""
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
import harness  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 9
CYCLES = sys.argv[2] if len(sys.argv) > 2 else "20000"
LIB = str(harness.BUILD / "plugin" / "libshmkeeper-preload.so")
NO_AGENT = "/nonexistent/events.sock"


def variants(agent_socket):
    return [("plain", {}),
            ("preload (no commit)", {"LD_PRELOAD": LIB, "SHMKEEPER_EVENT_SOCKET": NO_AGENT}),
            ("preload, agent listening", {"LD_PRELOAD": LIB, "SHMKEEPER_EVENT_SOCKET": agent_socket}),
            ("preload, reserve=1", {"LD_PRELOAD": LIB, "SHMKEEPER_EVENT_SOCKET": NO_AGENT,
                                    "SHMKEEPER_PRELOAD_RESERVE": "1"})]


class Agent:
    """A datagram socket that drains what the preload sends, as the agent would."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(path)
        self.sock.settimeout(0.2)
        self.received = 0
        self.stopped = False
        self.thread = threading.Thread(target=self.drain, daemon=True)
        self.thread.start()

    def drain(self):
        while not self.stopped:
            try:
                self.sock.recv(4096)
                self.received += 1
            except socket.timeout:
                pass

    def close(self):
        self.stopped = True
        self.thread.join()
        self.sock.close()


def measure(mode, chosen):
    """Per variant: the median time, and the median over rounds of its time
    over the plain run of the same round (robust to load that drifts between
    rounds on a shared machine)."""
    times = {name: [] for name, _ in chosen}
    for _ in range(ROUNDS):
        for name, extra in chosen:
            env = dict(os.environ, **extra)
            if "LD_PRELOAD" not in extra:
                env.pop("LD_PRELOAD", None)
            out = subprocess.run([str(harness.SHMGROW), mode, CYCLES], env=env, check=True, capture_output=True,
                                 text=True).stdout
            times[name].append(float(out))
    for name, _ in chosen:
        m = statistics.median(times[name])
        ratio = statistics.median(t / p for t, p in zip(times[name], times["plain"]))
        print(f"  {name:<28}{m / 1000:>8.2f} us   ratio {ratio:.3f}")


SPARSE = """
set -e
mount -t tmpfs -o size=2g shmk-bench /dev/shm
mkdir {cg}
echo $$ > {cg}/cgroup.procs
{env} {shmgrow} sparse seg 1024 | tr '\\n' ' '
echo $$ > /sys/fs/cgroup/memory/cgroup.procs
cat {cg}/memory.max_usage_in_bytes
"""


def sparse_memory():
    print("a 1 GiB segment ftruncated, mapped, two pages touched: its memory cgroup's peak, /dev/shm used:")
    for name, extra in [("plain", ""), ("preload (no commit)", f"LD_PRELOAD={LIB}"),
                        ("preload, reserve=1", f"LD_PRELOAD={LIB} SHMKEEPER_PRELOAD_RESERVE=1")]:
        cg = f"/sys/fs/cgroup/memory/shmk-bench-{os.getpid()}"
        script = SPARSE.format(cg=cg, env=extra, shmgrow=harness.SHMGROW)
        p = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script], capture_output=True,
                           text=True)
        os.rmdir(cg)
        if p.returncode != 0:
            print(f"  {name}: failed: {p.stderr.strip()}")
            continue
        words = p.stdout.split()
        print(f"  {name:<28}peak {int(words[-1]) / 2**20:>8.1f} MiB   /dev/shm used {int(words[2]):>8} KiB")


def main():
    with tempfile.TemporaryDirectory() as d:
        agent = Agent(f"{d}/events.sock")
        try:
            chosen = variants(f"{d}/events.sock")
            print(f"shm_open/ftruncate/mmap/munmap/shm_unlink cycle, median of {ROUNDS} x {CYCLES} cycles:")
            measure("bench", chosen)
            print(f"open(O_CREAT) of an existing /dev/shm file + close, median of {ROUNDS} x {CYCLES} cycles:")
            measure("bench-open", chosen[:2])
        finally:
            agent.close()
        print(f"  (the agent stand-in received {agent.received} datagrams)")
    if Path("/sys/fs/cgroup/memory/cgroup.procs").exists():
        sparse_memory()


if __name__ == "__main__":
    main()
