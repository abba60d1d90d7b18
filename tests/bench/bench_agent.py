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
made. Agent CPU in ns (a cpuacct cgroup of its own). SHMK_BENCH_MODES=fanotify
runs the observer's columns only; SHMKEEPERD_BASELINE=<another shmkeeperd>
adds its observer column.

  bench_agent.py preload [ROUNDS] [CYCLES] [OTHER_PRELOAD]   (issue 23)
The preload's shm_open/ftruncate/mmap/munmap/shm_unlink cycle (shmgrow bench)
with the agent listening (event socket, the workload's /dev/shm watched):
(workload CPU + agent CPU) / the plain program's CPU, beside the observer
with no datagrams (the preload finds no socket) and no agent at all (the
preload alone); ROUNDS (default 9) interleaved rounds, each variant on a
tmpfs of its own, the median of per-round ratios (CPU in ns: the agent's
from a cpuacct cgroup). SHMKEEPERD_BASELINE=<another shmkeeperd> adds its
observer row (before/after in one run); OTHER_PRELOAD (another build's
libshmkeeper-preload.so) a row with it; SHMK_BENCH_SCAN=1 the scan mode.
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
    # SHMK_BENCH_MODES=fanotify: the observer's columns only; SHMKEEPERD_BASELINE: another build's observer beside
    columns = os.environ.get("SHMK_BENCH_MODES", "scan,fanotify").split(",")
    binaries = {c: harness.AGENTD for c in columns}
    if os.environ.get("SHMKEEPERD_BASELINE"):
        columns.insert(0, "fanotify,baseline")
        binaries["fanotify,baseline"] = Path(os.environ["SHMKEEPERD_BASELINE"])
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
                for observer in columns:
                    saved = harness.AGENTD
                    harness.AGENTD = binaries[observer]
                    try:
                        agent = start_bench_agent(tmp, [shm], observer.split(",")[0])
                    finally:
                        harness.AGENTD = saved
                    churn = None
                    acc = CpuAccount(agent.proc.pid, f"scaling-{n}-{load}-{columns.index(observer)}")
                    try:
                        time.sleep(1)
                        churn = Churn(shm) if load == "churn" else None
                        w0, c0, t0 = walks(agent), acc.ns(), time.time()
                        time.sleep(seconds)
                        cpu = 100 * (acc.ns() - c0) / 1e9 / (time.time() - t0)
                        row[(load, observer)] = (cpu, walks(agent) - w0)
                    finally:
                        if churn:
                            churn.stop()
                        agent.stop()
                        acc.close()
            rows.append(row)
            print(f"{n} idle processes done ({procs} on the node)", flush=True)
        print(f"agent CPU, % of one core over {seconds:.0f}s (walks of /proc in that time), scanInterval 10s")
        print(f"{'processes':>10} | " + " ".join(f"{l + ': ' + c:>24}" for l in ("idle", "churn 5/s") for c in columns))
        for r in rows:
            cells = [f"{r[(l, o)][0]:>10.3f}% ({r[(l, o)][1]:>2.0f})" for l in ("idle", "churn") for o in columns]
            print(f"{r['procs']:>10} | " + " ".join(f"{c:>24}" for c in cells))
    finally:
        for p in {id(p): p for p in sleepers}.values():
            p.terminate()
            p.wait()
        subprocess.run(["umount", "-l", str(shm)])
        subprocess.run(["rm", "-rf", str(tmp)])


class CpuAccount:
    """A process's CPU time in ns, every thread (exited ones too): a cpuacct
    cgroup of its own (v1) when there is one, else the sum of
    /proc/<pid>/task/*/schedstat (threads alive now)."""

    ROOT = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self, pid, name):
        self.pid, self.cg = pid, None
        if (self.ROOT / "cpuacct.usage").exists():
            self.cg = self.ROOT / f"shmk-bench-{os.getpid()}-{name}"
            self.cg.mkdir()
            (self.cg / "cgroup.procs").write_text(str(pid))

    def ns(self):
        if self.cg:
            return int((self.cg / "cpuacct.usage").read_text())
        total = 0
        for t in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                total += int((t / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                pass
        return total

    def threads(self):
        """ns per thread name (threads alive now)."""
        out = {}
        for t in Path(f"/proc/{self.pid}/task").iterdir():
            try:
                name = (t / "comm").read_text().strip()
                out[name] = out.get(name, 0) + int((t / "schedstat").read_text().split()[0])
            except (FileNotFoundError, ProcessLookupError):
                pass
        return out

    def close(self):
        if self.cg:
            for pid in (self.cg / "cgroup.procs").read_text().split():
                (self.ROOT / "cgroup.procs").write_text(pid)
            self.cg.rmdir()


def observed(agent):
    """The observer's counters: events, probes, holder walks, scans (0 without an agent)."""
    if not agent:
        return (0, 0, 0, 0)
    m = agent.metrics()
    return tuple(m.get(k, 0) for k in ("shmkeeper_observer_events_total", "shmkeeper_observer_probes_total",
                                        "shmkeeper_observer_holder_walks_total", "shmkeeper_scans_total"))


def in_private_shm(path):
    """preexec_fn: the workload in a mount namespace of its own where
    /dev/shm is `path` (a tmpfs only its variant's agent watches)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    ms_rec, ms_private, ms_bind = 0x4000, 0x40000, 0x1000

    def setup():
        if libc.unshare(0x00020000) != 0:  # CLONE_NEWNS
            os._exit(97)
        if libc.mount(b"none", b"/", None, ms_rec | ms_private, None) != 0:
            os._exit(98)
        if libc.mount(str(path).encode(), b"/dev/shm", None, ms_bind, None) != 0:
            os._exit(99)
    return setup


def preload():
    """(workload CPU + agent CPU) / the plain program's CPU, side by side.

    Every variant has a private tmpfs bound on the workload's /dev/shm (its
    own mount namespace), watched by its agent alone, so agents run at once
    and rounds interleave (plain, preload alone, each agent, ... in turn,
    the order rotated each round) without an agent's marks taxing another
    variant's workload. CPU in ns: the workload's from rusage (the
    scheduler's runtime), each agent's from a cpuacct cgroup of its own
    (every thread, exited ones included), from just before its workload to
    1.2 s after (its reaction to the burst). Per round the ratio to that
    round's plain run; the median over rounds, and its range."""
    import resource
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    cycles = sys.argv[3] if len(sys.argv) > 3 else "20000"
    lib = str(harness.BUILD / "plugin" / "libshmkeeper-preload.so")
    other = sys.argv[4] if len(sys.argv) > 4 else ""  # another build's preload, for before/after rows
    baseline = os.environ.get("SHMKEEPERD_BASELINE", "")  # another build's shmkeeperd (e.g. main's)
    tmp = Path(tempfile.mkdtemp(prefix="shmk-benchpre-"))
    tmp.chmod(0o755)

    # (label, agent binary (None: no agent), observer mode, preload (None: none), datagrams)
    variants = [("plain (no preload, no agent)", None, None, None, False),
                ("preload alone (no agent)", None, None, lib, False)]
    if baseline:
        variants.append(("fanotify, baseline agent", Path(baseline), "fanotify", lib, True))
    variants += [("fanotify", harness.AGENTD, "fanotify", lib, True),
                 ("fanotify, no datagrams", harness.AGENTD, "fanotify", lib, False)]
    if other:
        variants.append(("fanotify, other preload", harness.AGENTD, "fanotify", other, True))
    if os.environ.get("SHMK_BENCH_SCAN"):
        variants.append(("scan mode", harness.AGENTD, "scan", lib, True))

    def workload(env, shm):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([str(harness.SHMGROW), "bench", cycles], env=env, check=True, capture_output=True,
                       preexec_fn=in_private_shm(shm))
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

    mounted, agents, accounts = [], {}, {}
    try:
        for i, (label, binary, observer, preload_lib, datagrams) in enumerate(variants):
            shm = tmp / f"shm{i}"
            shm.mkdir()
            shm.chmod(0o1777)
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m,mode=1777", f"benchpre{i}", str(shm)],
                           check=True)
            mounted.append(shm)
            if binary:
                saved = harness.AGENTD
                harness.AGENTD = binary
                try:
                    agents[label] = start_bench_agent(tmp, [shm], observer, event_socket=tmp / f"ev{i}.sock")
                finally:
                    harness.AGENTD = saved
                accounts[label] = CpuAccount(agents[label].proc.pid, str(i))
        time.sleep(2)  # past the agents' start-up
        parts = {label: [] for label, *_ in variants}  # per round: (workload, agent, walks)
        counts = {label: [] for label, *_ in variants}  # per round: the observer's counters (see observed)
        threads = {label: [] for label, *_ in variants}  # per round: agent CPU by thread name
        for r in range(rounds):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for i, (label, binary, observer, preload_lib, datagrams) in enumerate(order):
                idx = variants.index(order[i])
                env = dict(os.environ)
                env.pop("LD_PRELOAD", None)
                if preload_lib:
                    env["LD_PRELOAD"] = preload_lib
                    env["SHMKEEPER_EVENT_SOCKET"] = str(tmp / f"ev{idx}.sock") if datagrams else str(tmp / "none.sock")
                agent = agents.get(label)
                m0 = observed(agent)
                w0, c0 = (walks(agent), accounts[label].ns()) if agent else (0, 0)
                t0 = accounts[label].threads() if agent else {}
                cpu = workload(env, mounted[idx])
                if agent:
                    time.sleep(1.2)  # the agent's reaction to the burst (a scan at most a second later)
                a = (accounts[label].ns() - c0) / 1e9 if agent else 0.0
                t1 = accounts[label].threads() if agent else {}
                split = {k: (v - t0.get(k, 0)) / 1e9 for k, v in t1.items() if k.startswith("shmk-")}
                split["other threads"] = a - sum(split.values())
                threads[label].append(split)
                m1 = observed(agent)
                parts[label].append((cpu, a, walks(agent) - w0 if agent else 0))
                counts[label].append(tuple(b - a for a, b in zip(m0, m1)))
            print(f"round {r + 1}/{rounds} done", file=sys.stderr, flush=True)
        plain = [w for w, _, _ in parts[variants[0][0]]]
        print(f"shm cycle x {cycles}, {rounds} interleaved rounds, each variant on its own tmpfs; per round over "
              f"that round's plain run, median [min-max]; plain median {statistics.median(plain) * 1e3:.1f} ms CPU")
        print(f"{'variant':<32}{'(workload+agent)/plain':>30}{'workload/plain':>16}{'agent/plain':>13}{'walks':>7}")
        for label, *_ in variants:
            ratios = [(w + a) / p for (w, a, _), p in zip(parts[label], plain)]
            wl = statistics.median(w / p for (w, _, _), p in zip(parts[label], plain))
            ag = statistics.median(a / p for (_, a, _), p in zip(parts[label], plain))
            wk = statistics.median(k for _, _, k in parts[label])
            span = f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"
            print(f"{label:<32}{span:>30}{wl:>16.3f}{ag:>13.3f}{wk:>7.0f}")
        print("the agent's CPU by thread over plain (median per round):")
        for label, *_ in variants:
            if threads[label]:
                names = sorted({k for t in threads[label] for k in t})
                cells = [f"{k} {statistics.median(t.get(k, 0) / p for t, p in zip(threads[label], plain)):.3f}"
                         for k in names]
                print(f"  {label:<30}" + ", ".join(cells))
        print("the agent's work per round (median): fanotify events read, lease probes, holder walks, scans")
        for label, *_ in variants:
            if counts[label] and any(any(c) for c in counts[label]):
                med = [statistics.median(c[i] for c in counts[label]) for i in range(4)]
                print(f"  {label:<30}" + "".join(f"{v:>10.0f}" for v in med))
    finally:
        for agent in agents.values():
            agent.stop()
        for acc in accounts.values():
            acc.close()
        for shm in mounted:
            subprocess.run(["umount", "-l", str(shm)])
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "scaling":
        scaling()
    elif len(sys.argv) > 1 and sys.argv[1] == "preload":
        preload()
    else:
        main()
