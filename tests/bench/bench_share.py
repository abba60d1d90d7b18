#!/usr/bin/env python3
"""Benchmark (not a test): handing a buffer to a second process.

1. The sharing API (shmkeeper/share.h): the second process opens and maps the
   segment and reads its first and last byte: O(1) in the size. The one-time
   reservation at create (posix_fallocate) is shown too.
2. The same buffer pickled through a multiprocessing.Queue to a second
   process (what a DataLoader-style program does without shared memory): O(n).
Medians side by side, in one run, for 64 MiB and 1 GiB. Usage: bench_share.py [ROUNDS]
"""
import multiprocessing as mp
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
import harness  # noqa: E402

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 5
SIZES_MIB = [64, 1024]


def receiver(q, done):
    buf = q.get()
    done.put((time.perf_counter(), len(buf)))


def queue_ms(size):
    payload = bytes(size)
    times = []
    for _ in range(ROUNDS):
        q, done = mp.Queue(), mp.Queue()
        p = mp.Process(target=receiver, args=(q, done))
        p.start()
        time.sleep(0.2)  # the receiver is waiting
        t0 = time.perf_counter()
        q.put(payload)
        t1, n = done.get()
        p.join()
        assert n == size
        times.append((t1 - t0) * 1000)
    return statistics.median(times)


def share_ms(mib):
    out = subprocess.run([str(harness.BUILD / "tests" / "share_bench"), str(mib), str(ROUNDS)], check=True,
                         capture_output=True, text=True).stdout.split("\n")
    reserve = float(out[0].split()[1])
    maps = [float(line.split()[1]) / 1000 for line in out[1:] if line.startswith("open_map_us")]
    return reserve, statistics.median(maps)


def main():
    print(f"handing a buffer to a second process, median of {ROUNDS}:")
    print(f"{'size':>8}{'share.h open+map':>20}{'Queue (pickle)':>18}{'ratio':>10}{'share.h reserve':>18}")
    for mib in SIZES_MIB:
        reserve, mapped = share_ms(mib)
        queued = queue_ms(mib << 20)
        print(f"{mib:>5} MiB{mapped:>17.3f} ms{queued:>15.1f} ms{queued / mapped:>9.0f}x{reserve:>15.1f} ms")


if __name__ == "__main__":
    main()
