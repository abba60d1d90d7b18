#!/usr/bin/env python3
"""Benchmark (not a test): shmkeeperd on a synthetic node load, against lsof.

shmload starts NPROCS processes holding FILES shm files on a private tmpfs
(25% unlinked while held, every 4th mapped) plus LEAKED files nobody holds.
shmkeeperd watches that tmpfs. Reported in one run: the agent's full scan
time (median of its own measurements), its RSS and steady-state CPU, GetPod
latency from the snapshot (p50/p99), and the time `lsof +D` takes to find
the holders of the same files. Run as root.
Usage: bench_agent.py [NPROCS] [FILES_PER_PROC] [LEAKED]

  bench_agent.py scaling [SECONDS] [SIZES]   (issue 23)
Agent CPU (% of one core, measured over SECONDS, default 20) on a node with
SIZES (default 500,1000,2000,4000) extra idle processes, idle and under churn
(a file created, held 200 ms, removed, 5 times a second), the scan mode
(agent.observer: scan, today's agent) beside the fanotify observer, in one
run, interleaved; the default scanInterval (10 s). Also the /proc walks each
made.

  bench_agent.py preload [ROUNDS] [CYCLES] [OTHER_PRELOAD]   (issue 23)
The preload's shm_open/ftruncate/mmap/munmap/shm_unlink cycle (shmgrow bench)
on the host /dev/shm with the agent listening (event socket, /dev/shm
watched): (workload CPU + agent CPU) / the plain program's CPU, scan mode
beside observer, beside the observer with no datagrams (the preload finds no
socket) and no agent at all (the preload alone), medians over ROUNDS. With
OTHER_PRELOAD (another build's libshmkeeper-preload.so), its scan and
observer rows too, in the same run (before/after).
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

MODE = sys.argv[1] if len(sys.argv) > 1 and sys.argv[1] in ("scaling", "preload") else ""
NPROCS = int(sys.argv[1]) if len(sys.argv) > 1 and not MODE else 2000
PER = int(sys.argv[2]) if len(sys.argv) > 2 and not MODE else 10
LEAKED = int(sys.argv[3]) if len(sys.argv) > 3 and not MODE else 1000
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


def agent_cpu(pid):
    return cpu_seconds(pid)


def start_bench_agent(tmp, shm_dirs, observer, event_socket=""):
    base = Path(tempfile.mkdtemp(prefix=f"agent-{observer}-", dir=tmp))
    return harness.AgentProcess(base, f"""
agent:
  socket: {base}/agent.sock
  eventSocket: "{event_socket}"
  metricsAddress: "127.0.0.1:0"
  scanInterval: 10s
  observer: {observer}
  runtimeRoots: []
  dockerSocket: ""
  hostShmDirs: [{", ".join(str(d) for d in shm_dirs)}]
""").start()


def walks(agent):
    return sum(v for k, v in agent.metrics().items() if k.startswith("shmkeeper_proc_walks_total"))


class Churn:
    """A file created, held 200 ms, removed, 5 times a second (a thread of this process)."""

    def __init__(self, shm):
        import threading
        self.shm, self.n, self.stop_ = shm, 0, threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop_.is_set():
            p = self.shm / f"churn_{self.n}"
            fd = os.open(p, os.O_CREAT | os.O_RDWR, 0o600)
            os.write(fd, b"c" * 4096)
            time.sleep(0.2)
            os.close(fd)
            os.unlink(p)
            self.n += 1
            time.sleep(0.0)

    def stop(self):
        self.stop_.set()
        self.t.join()


def scaling():
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 20
    sizes = [int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "500,1000,2000,4000").split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="shmk-benchscale-"))
    shm = tmp / "shm"
    shm.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "benchshm", str(shm)], check=True)
    rows, sleepers = [], []
    try:
        for n in sizes:
            have = sum(1 for _ in sleepers)
            if n > have:
                p = subprocess.Popen([str(harness.BUILD / "tests" / "holders"), "sleepers", "-n", str(n - have)],
                                     stdout=subprocess.PIPE, text=True, start_new_session=True)
                assert p.stdout.readline().startswith("ready")
                sleepers.extend([p] * (n - have))
            procs = sum(1 for d in os.listdir("/proc") if d.isdigit())
            row = {"n": n, "procs": procs}
            for load in ("idle", "churn"):
                for observer in ("scan", "fanotify"):
                    agent = start_bench_agent(tmp, [shm], observer)
                    churn = None
                    try:
                        time.sleep(1)
                        churn = Churn(shm) if load == "churn" else None
                        w0, c0, t0 = walks(agent), agent_cpu(agent.proc.pid), time.time()
                        time.sleep(seconds)
                        cpu = 100 * (agent_cpu(agent.proc.pid) - c0) / (time.time() - t0)
                        row[(load, observer)] = (cpu, walks(agent) - w0)
                    finally:
                        if churn:
                            churn.stop()
                        agent.stop()
            rows.append(row)
            print(f"{n} idle processes done ({procs} on the node)", flush=True)
        print(f"agent CPU, % of one core over {seconds:.0f}s (walks of /proc in that time), scanInterval 10s")
        print(f"{'processes':>10} | {'idle: scan':>16} {'fanotify':>16} | {'churn 5/s: scan':>16} {'fanotify':>16}")
        for r in rows:
            cells = [f"{r[(l, o)][0]:>10.3f}% ({r[(l, o)][1]:>2.0f})" for l in ("idle", "churn")
                     for o in ("scan", "fanotify")]
            print(f"{r['procs']:>10} | {cells[0]:>16} {cells[1]:>16} | {cells[2]:>16} {cells[3]:>16}")
    finally:
        for p in {id(p): p for p in sleepers}.values():
            p.terminate()
            p.wait()
        subprocess.run(["umount", "-l", str(shm)])
        subprocess.run(["rm", "-rf", str(tmp)])


def preload():
    import resource
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    cycles = sys.argv[3] if len(sys.argv) > 3 else "20000"
    lib = str(harness.BUILD / "plugin" / "libshmkeeper-preload.so")
    other = sys.argv[4] if len(sys.argv) > 4 else ""  # another build's preload, for before/after rows
    tmp = Path(tempfile.mkdtemp(prefix="shmk-benchpre-"))
    tmp.chmod(0o755)
    ev = tmp / "events.sock"

    def workload(env):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([str(harness.SHMGROW), "bench", cycles], env=dict(os.environ, **env), check=True,
                       capture_output=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

    results = {}
    try:
        # (label, agent mode, the workload's event socket: "" = no datagrams, only fanotify's events)
        # observer None: no agent at all, the preload alone (its socket absent)
        rows = [("scan", "scan", ev, lib), ("fanotify", "fanotify", ev, lib),
                ("fanotify, no datagrams", "fanotify", tmp / "none.sock", lib),
                ("no agent (preload only)", None, tmp / "none.sock", lib)]
        if other:
            rows[2:2] = [("scan, other preload", "scan", ev, other), ("fanotify, other preload", "fanotify", ev, other)]
        for label, observer, sock, preload_lib in rows:
            agent = start_bench_agent(tmp, ["/dev/shm"], observer, event_socket=ev) if observer else None
            try:
                ratios, agent_share, scans = [], [], []
                for _ in range(rounds):
                    plain = workload({})
                    if agent:
                        time.sleep(1.2)  # the agent's reaction to the plain run's own events, not charged below
                    w0, c0 = (walks(agent), agent_cpu(agent.proc.pid)) if agent else (0, 0)
                    with_agent = workload({"LD_PRELOAD": preload_lib, "SHMKEEPER_EVENT_SOCKET": str(sock)})
                    if agent:
                        time.sleep(1.2)  # the agent's reaction to the burst (a scan at most a second later)
                    a = agent_cpu(agent.proc.pid) - c0 if agent else 0
                    ratios.append((with_agent + a) / plain)
                    agent_share.append(a / plain)
                    scans.append(walks(agent) - w0 if agent else 0)
                results[label] = (statistics.median(ratios), statistics.median(agent_share),
                                  statistics.median(scans))
            finally:
                if agent:
                    agent.stop()
        print(f"shm cycle x {cycles} with the preload and the agent listening, median of {rounds} rounds:")
        print(f"{'agent mode':<26}{'(workload+agent)/plain':>24}{'agent/plain':>14}{'walks':>8}")
        for label, (r, a, w) in results.items():
            print(f"{label:<26}{r:>24.3f}{a:>14.3f}{w:>8.0f}")
    finally:
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "scaling":
        scaling()
    elif len(sys.argv) > 1 and sys.argv[1] == "preload":
        preload()
    else:
        main()
