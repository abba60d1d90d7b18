#!/usr/bin/env python3
"""Benchmark (not a test): what libshmkeeper-preload.so costs a program.

Two loops of a dynamically linked C program (shmgrow):
  - the shm_open / ftruncate(4 KiB) / mmap / munmap / shm_unlink cycle
    (shmgrow bench), without the preload, with it, and with it but the
    deliberate reservation off (SHMKEEPER_PRELOAD_RESERVE=0: what the
    interposition itself costs);
  - open(O_CREAT | O_RDWR) of an existing /dev/shm file and close
    (shmgrow bench-open), without and with the preload.
Runs interleaved; medians, and the median of each round's ratio to the plain run.
Usage: bench_preload.py [ROUNDS] [CYCLES]
"""
import os
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
import harness  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 9
CYCLES = sys.argv[2] if len(sys.argv) > 2 else "20000"
LIB = str(harness.BUILD / "plugin" / "libshmkeeper-preload.so")
VARIANTS = [("plain", {}), ("preload", {"LD_PRELOAD": LIB}),
            ("preload, no reserve", {"LD_PRELOAD": LIB, "SHMKEEPER_PRELOAD_RESERVE": "0"})]


def measure(mode, variants):
    """Per variant: the median time, and the median over rounds of its time
    over the plain run of the same round (robust to load that drifts between
    rounds on a shared machine)."""
    times = {name: [] for name, _ in variants}
    for _ in range(ROUNDS):
        for name, extra in variants:
            out = subprocess.run([str(harness.SHMGROW), mode, CYCLES], env=dict(os.environ, **extra),
                                 check=True, capture_output=True, text=True).stdout
            times[name].append(float(out))
    for name, _ in variants:
        m = statistics.median(times[name])
        ratio = statistics.median(t / p for t, p in zip(times[name], times["plain"]))
        print(f"  {name:<22}{m / 1000:>8.2f} us   ratio {ratio:.3f}")


def main():
    print(f"shm_open/ftruncate/mmap/munmap/shm_unlink cycle, median of {ROUNDS} x {CYCLES} cycles:")
    measure("bench", VARIANTS)
    print(f"open(O_CREAT) of an existing /dev/shm file + close, median of {ROUNDS} x {CYCLES} cycles:")
    measure("bench-open", VARIANTS[:2])


if __name__ == "__main__":
    main()
