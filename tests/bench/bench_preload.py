#!/usr/bin/env python3
"""Benchmark (not a test): what libshmkeeper-preload.so costs a program.

The shm_open / ftruncate(4 KiB) / mmap / munmap / shm_unlink cycle (shmgrow
bench, a dynamically linked C program), without the preload, with it, and with
it but the deliberate reservation off (SHMKEEPER_PRELOAD_RESERVE=0: what the
interposition itself costs). Runs interleaved; medians and ratios side by side.
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


def main():
    times = {name: [] for name, _ in VARIANTS}
    for _ in range(ROUNDS):
        for name, extra in VARIANTS:
            out = subprocess.run([str(harness.SHMGROW), "bench", CYCLES], env=dict(os.environ, **extra),
                                 check=True, capture_output=True, text=True).stdout
            times[name].append(float(out))
    base = statistics.median(times["plain"])
    print(f"shm_open/ftruncate/mmap/munmap/shm_unlink cycle, median of {ROUNDS} x {CYCLES} cycles:")
    for name, _ in VARIANTS:
        m = statistics.median(times[name])
        print(f"  {name:<22}{m / 1000:>8.2f} us   ratio {m / base:.2f}")


if __name__ == "__main__":
    main()
