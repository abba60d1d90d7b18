#!/usr/bin/env python3
"""Benchmark (not a test, issue 23): shmkeeperd on a node with many idle containers.

A private dockerd (plain runc, its own network namespace) runs N busybox
containers (default 100), each with Docker's default private IPC mode, so each
has its own /dev/shm tmpfs and IPC namespace; nothing in them touches shared
memory. The agent watches them through that dockerd's runc root and socket, at
the default scanInterval (10s), in fanotify mode; the scan mode (today's
agent) beside it. Reported, per agent, in one run and interleaved: its CPU
(% of one core over SECONDS after a settling period, in ns from its threads'
schedstat, nothing asked of it
meanwhile), then the median duration of its next 3 periodic scans
(shmkeeper_scan_duration_seconds sampled after each scan), and the /proc
walks it made.

With SHMKEEPERD_BASELINE=<path to another shmkeeperd> (e.g. one built from
main) that binary is measured too, in fanotify mode, on the same containers:
the before/after columns of docs/benchmarks.md come from one run. Then the
fanotify agents again with one closed scratch file in one container's
/dev/shm (a file nobody holds: its mount references are looked for).
Run as root. Usage: bench_idle_pods.py [N] [SECONDS]
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
import harness  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 60
IMG = "shmk-busybox:idle"


def cpu_seconds(pid):
    """The agent's CPU in ns (each live thread's schedstat run time; the
    agent's threads live as long as it does), not in 10 ms ticks: 0.1 % of a
    core is 6 ticks in 60 s."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            pass  # a thread that ended between the listing and the read
    return total / 1e9


def start_agent(tmp, engine, label, binary, observer):
    base = Path(tempfile.mkdtemp(prefix=f"agent-{observer}-", dir=tmp))
    saved = harness.AGENTD
    harness.AGENTD = binary
    try:
        return harness.AgentProcess(base, f"""
agent:
  socket: {base}/agent.sock
  eventSocket: ""
  metricsAddress: "127.0.0.1:0"
  scanInterval: 10s
  observer: {observer}
  runtimeRoots: [{engine.exec_root}/runtime-runc/moby]
  dockerSocket: {engine.sock}
""").start()
    finally:
        harness.AGENTD = saved


def measure(agent, seconds):
    """CPU share over `seconds`, with nothing asked of the agent meanwhile
    (a /metrics scrape renders every pod's series: scraping each second
    would be most of an idle agent's CPU), then the durations of the next
    3 scans (shmkeeper_scan_duration_seconds polled each second) and the
    walks over both windows."""
    def scans():
        m = agent.metrics()
        return m.get("shmkeeper_scans_total", 0), m.get("shmkeeper_scan_duration_seconds", 0)

    walks = lambda: sum(v for k, v in agent.metrics().items() if k.startswith("shmkeeper_proc_walks_total"))  # noqa
    w0 = walks()
    c0, t0 = cpu_seconds(agent.proc.pid), time.time()
    time.sleep(seconds)
    cpu = 100 * (cpu_seconds(agent.proc.pid) - c0) / (time.time() - t0)
    n0, _ = scans()
    durations = []
    deadline = time.time() + 45
    while len(durations) < 3 and time.time() < deadline:
        time.sleep(1)
        n, d = scans()
        if n != n0:
            n0 = n
            durations.append(d)
    return cpu, durations, walks() - w0


def main():
    harness.require(os.geteuid() == 0, "needs root")
    tmp = Path(tempfile.mkdtemp(prefix="shmk-benchidle-"))
    engine = harness.PrivateDocker(tmp / "docker")
    rows = {}
    try:
        engine.start()
        engine.import_busybox(IMG, harness.make_busybox_rootfs(tmp / "rootfs"))
        t = time.time()
        for i in range(N):
            engine.docker("run", "-d", "--name", f"idle{i}", "--network", "none", IMG, "sleep", "1000000")
        print(f"{N} containers started in {time.time() - t:.0f}s", flush=True)
        procs = sum(1 for d in os.listdir("/proc") if d.isdigit())
        ids = engine.docker("ps", "-q").stdout.split()
        pids = engine.docker("inspect", "-f", "{{.State.Pid}}", *ids).stdout.split()
        mounts = len({os.stat(f"/proc/{pid}/root/dev/shm").st_dev for pid in pids})  # distinct /dev/shm tmpfs
        agents = [("scan", harness.AGENTD, "scan"), ("fanotify", harness.AGENTD, "fanotify")]
        if os.environ.get("SHMKEEPERD_BASELINE"):
            agents.insert(0, ("fanotify, baseline", Path(os.environ["SHMKEEPERD_BASELINE"]), "fanotify"))
        for label, binary, observer in agents:
            agent = start_agent(tmp, engine, label, binary, observer)
            try:
                pods = len(agent.json("pods").get("pods", []))
                assert pods >= N, f"{label}: the agent sees {pods} pods, not {N}"
                time.sleep(12)  # past the start-up walk and the first periodic scan
                rows[label] = measure(agent, SECONDS)
            finally:
                agent.stop()
            print(f"{label} done", flush=True)
        # One container gets a closed scratch file: a file nobody holds.
        engine.docker("exec", "idle0", "sh", "-c", "echo scratch > /dev/shm/scratch")
        for label, binary, observer in agents:
            if observer != "fanotify":
                continue
            label += ", 1 scratch file"
            agent = start_agent(tmp, engine, label, binary, observer)
            try:
                time.sleep(12)
                rows[label] = measure(agent, SECONDS)
            finally:
                agent.stop()
            print(f"{label} done", flush=True)
        print(f"{N} idle containers (each its own /dev/shm tmpfs: {mounts} tmpfs mounts), {procs} processes on the "
              f"node, scanInterval 10s, {SECONDS:.0f}s per agent")
        print(f"{'agent':<40}{'CPU % of a core':>16}{'scan median ms':>16}{'scans':>7}{'walks':>7}")
        for label, (cpu, durations, walks) in rows.items():
            med = 1000 * statistics.median(durations) if durations else float("nan")
            print(f"{label:<40}{cpu:>16.3f}{med:>16.1f}{len(durations):>7}{walks:>7.0f}")
        print(f"load average {open('/proc/loadavg').read().split()[:3]}")
    finally:
        engine.stop()
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
