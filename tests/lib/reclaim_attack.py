"""Shared pieces of the reclaim attack tests and benchmark: a private tmpfs,
a private shmkeeperd watching it, the `holders` adversary program
(tests/helpers/holders.c), /metrics, and the checks on a directory.

Every process and mount lives under the caller's temporary directory; the
agent discovers no container runtime (runtimeRoots: [], no Docker socket), so
it can only ever see and reclaim files on the tmpfs the test mounted.
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from harness import AGENTD, BUILD, CLI, AgentProcess, read_line, run, wait_for

HOLDERS = BUILD / "tests" / "holders"
QUARANTINE = ".shmkeeper-reclaim."
TORCH = re.compile(r"^torch_(\d+)_")


class Tmpfs:
    """A tmpfs mounted at `path` (created) until stop()."""

    def __init__(self, path: Path, size="512m"):
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=1777", "shmk-attack", path])

    def stop(self):
        subprocess.run(["umount", "-l", str(self.path)], check=False)


def world_reachable_dir(prefix="shmk-ev-") -> Path:
    """A fresh directory under /tmp that any user can traverse (pytest's own
    temporary directories are 0700): where an event socket that unprivileged
    senders must reach lives. The caller removes it."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    d.chmod(0o755)
    return d


def agent_config(base: Path, dirs, reclaim="report", scan="1s", grace="1s", event_socket=None, runtime_roots=(),
                 docker_socket="", state_dir=None, max_files=None):
    """A shmkeeperd config that watches only `dirs` and the given runtime
    roots / Docker socket (none by default), with an event socket and a state
    directory (private by default) and an ephemeral metrics port;
    `max_files`: agent.maxFilesPerPod (None: the default)."""
    ev = event_socket or f"{base}/events/events.sock"
    limit = f"\n  maxFilesPerPod: {max_files}" if max_files else ""
    return f"""
agent:
  socket: {base}/agent.sock{limit}
  stateDir: {state_dir or f"{base}/state"}
  eventSocket: {ev}
  metricsAddress: 127.0.0.1:0
  scanInterval: {scan}
  runtimeRoots: [{", ".join(str(r) for r in runtime_roots)}]
  dockerSocket: "{docker_socket}"
  hostShmDirs: [{", ".join(str(d) for d in dirs)}]
leaks:
  grace: {grace}
  reclaim: {reclaim}
"""


def start_agent(base: Path, config_text: str, binary: Path = AGENTD, timeout=None) -> AgentProcess:
    """AgentProcess(...).start(timeout=timeout): waits until it serves."""
    base.mkdir(parents=True, exist_ok=True)
    return AgentProcess(base, config_text, binary).start(timeout=timeout)


def metrics_port(agent: AgentProcess) -> int:
    """The metrics port of the agent's latest start, from its "serving" log line."""
    port = None
    for line in agent.log.read_text().splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if doc.get("msg") == "serving":
            port = doc.get("metrics_port")
    assert port and port > 0, "no metrics port in the agent log:\n" + agent.log.read_text()[-2000:]
    return port


def scrape(agent: AgentProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port(agent)}/metrics", timeout=10) as r:
        return r.read().decode()


def metric_values(text: str, name: str):
    """{labels-string: value} of every sample of `name` ("" for no labels)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if m and m.group(1) == name:
            out[m.group(2) or ""] = float(m.group(3))
    return out


def metric_sum(text: str, name: str) -> float:
    return sum(metric_values(text, name).values())


def make_leaks(shm: Path, n: int, tag: str, size=4096):
    """n files torch_<deadpid>_<tag><i> (a creator that is really dead);
    returns (deadpid, [paths])."""
    out = run([HOLDERS, "leak", "-p", shm, "-n", n, "-x", tag, "-z", size]).stdout
    dead = int(re.search(r"deadpid=(\d+)", out).group(1))
    return dead, [shm / f"torch_{dead}_{tag}{i}" for i in range(n)]


class Holder:
    """One `holders` process; its stdout goes to a file that is polled."""

    def __init__(self, base: Path, name: str, mode: str, *args):
        self.name = name
        self.out = base / f"holder-{name}.out"
        self.proc = subprocess.Popen([str(HOLDERS), mode, *[str(a) for a in args]], stdout=open(self.out, "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)

    def text(self):
        return self.out.read_text()

    def wait_ready(self, timeout=30):
        wait_for(lambda: "ready pid=" in self.text() or self.proc.poll() is not None, timeout=timeout,
                 what=f"holder {self.name} ready")
        assert "ready pid=" in self.text(), f"holder {self.name} failed:\n{self.text()}"

    def result(self, timeout=60):
        """The parsed result line ({} if the holder never printed one)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
        line = next((l for l in self.text().splitlines() if l.startswith("result ")), "")
        res = dict(kv.split("=", 1) for kv in line.split()[1:])
        res["rc"] = self.proc.returncode
        res["log"] = "\n".join(l for l in self.text().splitlines() if not l.startswith("ready"))[-1500:]
        return res

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait()


class ReclaimLoop:
    """`shmkeeper reclaim --yes` in a tight loop on a thread until stop()."""

    def __init__(self, agent: AgentProcess):
        self.agent, self.calls, self.freed, self.errors = agent, 0, 0, []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            p = self.agent.cli("reclaim", "--yes", "-o", "json", check=False)
            self.calls += 1
            if p.returncode != 0:
                self.errors.append(p.stderr.strip()[-300:])
                time.sleep(0.05)
                continue
            self.freed += len(json.loads(p.stdout or "{}").get("reclaimed", []))

    def stop(self):
        """Returns once no reclaim is in flight (the one running when called ends first)."""
        self._stop.set()
        self._t.join(timeout=120)
        assert not self._t.is_alive(), "a reclaim call still runs 120 s after the loop was stopped"


def pid_alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def inodes(paths):
    """{path: inode} of the paths that exist."""
    out = {}
    for p in paths:
        try:
            out[p] = os.lstat(p).st_ino
        except FileNotFoundError:
            pass
    return out


def walk_names(shm: Path):
    """(directory, name) of every entry below `shm`, symlinks not followed."""
    for d, dirs, files in os.walk(shm):
        for n in dirs + files:
            yield Path(d), n


def quarantined(shm: Path):
    return sorted(str(d / n) for d, n in walk_names(shm) if n.startswith(QUARANTINE))


def true_leaks_left(shm: Path):
    """torch_<pid>_* files below `shm` whose creator pid is dead now (a pid
    reused since the file was made is alive: that file is no longer a true
    leak)."""
    left = []
    for d, n in walk_names(shm):
        m = TORCH.match(n)
        if m and not pid_alive(int(m.group(1))):
            left.append(str(d / n))
    return sorted(left)


def leaks_by_path(agent: AgentProcess):
    return {l.get("path"): l for l in agent.json("leaks").get("leaks", [])}


def wait_reclaimable(sock, paths, timeout=20):
    """Waits until the agent at `sock` lists each of `paths` as a reclaimable
    leak (past grace): the agent's verdict, not a guess of how long it takes.
    A `leaks` that fails counts as not yet (the caller checks it on its own)."""
    want = {str(p) for p in paths}

    def listed():
        p = run([CLI, "leaks", "-o", "json", "--agent", sock], check=False)
        if p.returncode != 0 or not p.stdout.strip():
            return False
        return want <= {l.get("path") for l in json.loads(p.stdout).get("leaks", []) if l.get("reclaimable")}
    wait_for(listed, timeout=timeout, what=f"{sorted(want)} listed as reclaimable leaks")


# A user of `path` every PERIOD seconds for SECONDS (argv) or until SIGTERM: open, write and read 64 bytes,
# close; prints "ready" after its first use, uses= and enoent= (opens that found no file) at the end. Run as
# `python3 -c INTERMITTENT_USER path period seconds` (IntermittentUser): a test ends it with SIGTERM only
# after its last reclaim, since once it stops, `path` is rightly a leak after the grace.
INTERMITTENT_USER = r"""
import os, signal, sys, time
path, period, seconds = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
enoent = uses = 0
end = time.time() + seconds
while time.time() < end and not stop:
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        enoent += 1
    else:
        os.pwrite(fd, b"x" * 64, 0)
        os.pread(fd, 64, 0)
        time.sleep(0.005)
        os.close(fd)
        uses += 1
    if uses + enoent == 1:
        print("ready", flush=True)
    time.sleep(period)
print(f"uses={uses} enoent={enoent}", flush=True)
"""


class IntermittentUser:
    """INTERMITTENT_USER on `path` every `period` s, bounded by `bound` s (never waited for: the test ends it
    with finish()). Started once its first use is done."""

    def __init__(self, path: Path, period=0.3, bound=600):
        self.proc = subprocess.Popen([sys.executable, "-c", INTERMITTENT_USER, str(path), str(period), str(bound)],
                                     stdout=subprocess.PIPE, text=True)
        assert read_line(self.proc, 60, "the user's first use").strip() == "ready", "the user did not start"

    def running(self) -> bool:
        return self.proc.poll() is None

    def finish(self) -> str:
        """Ends it (SIGTERM) and returns its "uses=N enoent=M" line."""
        self.proc.terminate()
        try:
            return self.proc.communicate(timeout=30)[0]
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise

    def kill(self):
        """Ends it at once if it still runs (a test's cleanup)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate(timeout=30)
