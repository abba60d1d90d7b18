#!/usr/bin/env python3
"""Benchmark (not a test): the agent's CPU at node scale, per workload (issue 35).

On a node with NPROCS extra idle processes (default 4000), the agent
(observer: fanotify, the default scanInterval of 10 s) watches a private
tmpfs that holds, in turn, one of these workloads:
  idle        nothing
  churn       a file created, held 200 ms, removed, 5 times a second
  dataloader  a real torch DataLoader (4 workers, file_descriptor sharing,
              the Debian package) iterating without pause, its /dev/shm
              the watched tmpfs (a mount namespace of its own)
  leaked      one 1 MiB torch_<pid>_ file whose creator is gone
  leaked+churn  both at once: the tmpfs's listing changes at every scan, so
              the leaked file is judged again at each (the case where the
              facts its verdict reads are read or reused at every scan)
  held        100 processes holding 200 files each (shmload)
Each cell: the agent's CPU in % of one core over SECONDS (default 30), all
its threads, exited ones too (a cpuacct cgroup of its own), after its first
scan; and the /proc walks it made in that time. SHMKEEPERD_BASELINE=<another
shmkeeperd> (e.g. main's build) adds its column, measured in the same run,
the columns interleaved per workload (ROUNDS rounds, default 1; the median).
Run as root.
Usage: bench_observer_cost.py [NPROCS] [SECONDS] [ROUNDS] [WORKLOADS]
"""
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
import harness  # noqa: E402
from bench_agent import Churn, CpuAccount, in_private_shm, start_bench_agent, walks  # noqa: E402

NPROCS = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 30
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 1
WORKLOADS = (sys.argv[4] if len(sys.argv) > 4 else "idle,churn,dataloader,leaked,held").split(",")

DATALOADER = r"""
import sys, torch
from torch.utils.data import DataLoader, Dataset
class Blocks(Dataset):
    def __len__(self): return 1 << 30
    def __getitem__(self, i): return torch.full((64, 1024), float(i % 7))
print("ready", flush=True)
for batch in DataLoader(Blocks(), batch_size=8, num_workers=4):
    pass
"""


class Workload:
    """Starts one named workload on `shm`; stop() ends it and empties the tmpfs."""

    def __init__(self, name, shm):
        self.name, self.shm, self.proc, self.churn = name, shm, None, None
        if name in ("churn", "leaked+churn"):
            self.churn = Churn(shm)
        elif name == "dataloader":
            self.proc = subprocess.Popen(["/usr/bin/python3", "-c", DATALOADER], stdout=subprocess.PIPE, text=True,
                                         preexec_fn=in_private_shm(shm))
            assert self.proc.stdout.readline().strip() == "ready"
        if name in ("leaked", "leaked+churn"):
            gone = subprocess.Popen(["true"])
            gone.wait()
            (shm / f"torch_{gone.pid}_1804289383_0").write_bytes(b"t" * (1 << 20))
        elif name == "held":
            self.proc = subprocess.Popen([str(harness.BUILD / "tests" / "shmload"), str(shm), "100", "200", "25", "0"],
                                         stdout=subprocess.PIPE, text=True, start_new_session=True)  # kill(0) ends it
            assert self.proc.stdout.readline().strip() == "ready"

    def stop(self):
        if self.churn:
            self.churn.stop()
        if self.proc:
            self.proc.terminate()
            self.proc.wait()
        for f in self.shm.iterdir():
            f.unlink()


def measure(binary, tmp, shm, label):
    """The agent's CPU % and /proc walks over SECONDS, after its first scan."""
    saved = harness.AGENTD
    harness.AGENTD = binary
    try:
        agent = start_bench_agent(tmp, [shm], "fanotify")
    finally:
        harness.AGENTD = saved
    acc = CpuAccount(agent.proc.pid, label)
    try:
        agent.wait_scans(1, timeout=60)
        w0, c0, t0 = walks(agent), acc.ns(), time.time()
        time.sleep(SECONDS)
        return 100 * (acc.ns() - c0) / 1e9 / (time.time() - t0), walks(agent) - w0
    finally:
        agent.stop()
        acc.close()


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a timeout still cleans up (finally)
    columns = [("this build", harness.AGENTD)]
    if os.environ.get("SHMKEEPERD_BASELINE"):
        columns.insert(0, ("baseline", Path(os.environ["SHMKEEPERD_BASELINE"])))
    tmp = Path(tempfile.mkdtemp(prefix="shmk-benchcost-"))
    shm = tmp / "shm"
    shm.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g,mode=1777", "benchcost", str(shm)], check=True)
    sleepers = None
    cells = {}
    try:
        sleepers = subprocess.Popen([str(harness.BUILD / "tests" / "holders"), "sleepers", "-n", str(NPROCS)],
                                    stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert sleepers.stdout.readline().startswith("ready")
        procs = sum(1 for d in os.listdir("/proc") if d.isdigit())
        for r in range(ROUNDS):
            for w in WORKLOADS:
                order = columns if r % 2 == 0 else columns[::-1]
                for label, binary in order:
                    load = Workload(w, shm)
                    try:
                        cells.setdefault((w, label), []).append(measure(binary, tmp, shm, f"{w}-{r}-{label[0]}"))
                    finally:
                        load.stop()
                print(f"round {r + 1}: {w} done", file=sys.stderr, flush=True)
        print(f"agent CPU, % of one core over {SECONDS:.0f}s after its first scan (/proc walks in that time); "
              f"{procs} processes on the node; scanInterval 10s; median of {ROUNDS} round(s)")
        print(f"{'workload':<12}" + "".join(f"{label:>26}" for label, _ in columns)
              + ("   ratio" if len(columns) > 1 else ""))
        for w in WORKLOADS:
            meds = [(statistics.median(c for c, _ in cells[(w, label)]),
                     statistics.median(k for _, k in cells[(w, label)])) for label, _ in columns]
            line = f"{w:<12}" + "".join(f"{c:>17.3f}% ({k:>4.0f})" for c, k in meds)
            if len(meds) > 1 and meds[0][0] > 0:
                line += f"{meds[1][0] / meds[0][0]:>8.2f}"
            print(line)
    finally:
        if sleepers:
            os.killpg(sleepers.pid, 15)
            sleepers.wait()
        subprocess.run(["umount", "-l", str(shm)])
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
