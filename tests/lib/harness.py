"""Test harness: real binaries, real runc, a private dockerd. No mocks.

Everything a test starts lives under its own temporary directory (sockets,
data roots, pid files) and is stopped at the end, so the machine's own
engines are never touched.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("SHMKEEPER_BUILD_DIR", REPO / "build")).resolve()
RUNTIME = BUILD / "plugin" / "shmkeeper-runtime"
CLI = BUILD / "plugin" / "shmkeeper"
AGENTD = BUILD / "plugin" / "shmkeeperd"
SHMTOOL = BUILD / "tests" / "shmtool"
SHMGROW = BUILD / "tests" / "shmgrow"  # dynamic (glibc) probe


def _sanitized(build: Path) -> bool:
    """Whether `build` was configured with sanitizers (SHMKEEPER_SANITIZE non-empty: build-asan/)."""
    cache = build / "CMakeCache.txt"
    return cache.exists() and any(line.startswith("SHMKEEPER_SANITIZE:") and line.split("=", 1)[1].strip()
                                  for line in cache.read_text().splitlines())


SANITIZED = _sanitized(BUILD)
# Deadlines on work the binaries do (an agent's start-up scan, a large reply) are bounds on a hang, not speed
# checks: BUILD's binaries under ASan+UBSan at -O0 (build-asan/, the integration stage) do the same work several
# times slower (measured: `leaks -o json` of 20,000 files costs the sanitized CLI 24 s of CPU, the release one
# 2.7 s), and CI runs beside other load on 2 cores. Such a deadline is scaled(seconds); work much heavier than
# an agent's start on a few files states its own bound.
SLOWDOWN = 3 if SANITIZED else 1


def scaled(seconds: float) -> float:
    """`seconds` (a deadline sized for the release build) times SLOWDOWN."""
    return seconds * SLOWDOWN


# The bound on one step over ~20,000 files (an agent's start-up scan of them, a `leaks -o json` listing them,
# the agent's reading of a full fanotify queue): under ASan at -O0 beside a CPU hog on both cores one such step
# took over 120 s of wall time.
BULK_S = 600 if SANITIZED else 120


BUSYBOX_APPLETS = ["sh", "df", "cat", "grep", "sleep", "stat", "ls", "mount", "dd", "head",
                   "echo", "true", "env", "id", "wc", "awk", "sed"]


def require(cond, reason):
    """Skips when `cond` is false, unless SHMKEEPER_NO_SKIP=1 (CI), where a
    missing prerequisite is a failure rather than a silent skip."""
    if cond:
        return
    import pytest
    if os.environ.get("SHMKEEPER_NO_SKIP") == "1":
        pytest.fail("prerequisite missing in a run that forbids skips: " + reason)
    pytest.skip(reason)


def run(cmd, check=True, timeout=300, **kw):
    """Runs argv (never through a shell) and returns CompletedProcess."""
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{cmd} exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def host_ram_bytes():
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def make_busybox_rootfs(root: Path):
    """A minimal rootfs: busybox-static and its applets."""
    for d in ["bin", "dev", "proc", "sys", "etc", "tmp", "lib", "lib64", "usr", "run"]:
        (root / d).mkdir(parents=True, exist_ok=True)
    shutil.copy2(shutil.which("busybox") or "/bin/busybox", root / "bin" / "busybox")
    for a in BUSYBOX_APPLETS:
        link = root / "bin" / a
        if not link.exists():
            link.symlink_to("busybox")
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/sh\n")
    return root


def glibc_rootfs(root: Path):
    """busybox plus glibc's loader and libc, and the dynamic shmgrow probe:
    an image in which shmkeeper-runtime injects the sharing runtime."""
    make_busybox_rootfs(root)
    for lib in ["/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libc.so.6"]:
        dest = root / lib.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(lib), dest)
    shutil.copy2(SHMGROW, root / "bin" / "shmgrow")
    return root


def runc_dirs(tmp: Path, log_name: str):
    """The paths a real-runc test uses under its tmp dir: state root, log and
    shmkeeper config (written by the test)."""
    from types import SimpleNamespace
    return SimpleNamespace(tmp=tmp, state=tmp / "runc-root", log=tmp / log_name, config=tmp / "shmkeeper.yaml")


def with_private_var_log(argv, var_log: Path):
    """`argv` in a private mount namespace whose /var/log is `var_log` (a bind): what the wrapper writes to
    its default log path (/var/log/shmkeeper/runtime.log: a config that does not parse or names no log) is
    the test's, at var_log/shmkeeper/runtime.log, never the host's."""
    var_log.mkdir(parents=True, exist_ok=True)
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount --bind "$0" /var/log && exec "$@"',
            str(var_log), *[str(a) for a in argv]]


def oci_bundle(path: Path, rootfs, args, edit=None, env_vars=(), annotations=None):
    """A runc bundle at `path` from `runc spec`: `args` in the read-only
    `rootfs`, no terminal, `env_vars` appended, `annotations` set; `edit(spec)`
    last."""
    path.mkdir()
    run(["runc", "spec", "--bundle", path])
    spec = json.loads((path / "config.json").read_text())
    spec["root"] = {"path": str(rootfs), "readonly": True}
    spec["process"]["terminal"] = False
    spec["process"]["args"] = list(args)
    spec["process"]["env"] += list(env_vars)
    if annotations is not None:
        spec["annotations"] = annotations
    if edit:
        edit(spec)
    (path / "config.json").write_text(json.dumps(spec, indent=1))
    return path


def df_kib(output: str, mount="/dev/shm"):
    """1K-blocks of `mount` from busybox `df -k` output."""
    for line in output.splitlines():
        parts = line.split()
        if len(parts) >= 6 and parts[-1] == mount:
            return int(parts[1])
    raise AssertionError(f"no {mount} line in df output:\n{output}")


def kib(nbytes):
    return nbytes // 1024


def shm_mounts_under(prefix: str):
    """Host mounts whose mount point is below `prefix` (leftover checks)."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mp = line.split()[4]
            if mp.startswith(prefix):
                out.append(mp)
    return out


class HostTmpfs:
    """A tmpfs this test mounts (and alone unmounts) at `path`: a host shm
    directory for an agent's `hostShmDirs`, whose usage a test changes by
    writing and removing files."""

    def __init__(self, path: Path, size_bytes: int):
        self.path, self.size = path, size_bytes
        path.mkdir(parents=True, exist_ok=True)
        run(["mount", "-t", "tmpfs", "-o", f"size={size_bytes},mode=1777", "shmk-test", path])

    def fill(self, name, nbytes):
        """Writes a file of `nbytes` (allocated: tmpfs has no holes for written data)."""
        with open(self.path / name, "wb") as f:
            f.write(b"\xa5" * nbytes)

    def remove(self, name):
        (self.path / name).unlink()

    def umount(self):
        run(["umount", self.path], check=False)


def free_port():
    """A TCP port on 127.0.0.1 that is free now (for daemons that need a fixed one)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivatePrometheus:
    """Debian's prometheus with its own config, rules, data dir and port on 127.0.0.1."""

    def __init__(self, base: Path, config: dict, rules: dict):
        import yaml
        self.base, self.port = base, free_port()
        base.mkdir(parents=True, exist_ok=True)
        (base / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
        (base / "prometheus.yaml").write_text(yaml.safe_dump(dict(config, rule_files=[str(base / "rules.yaml")])))
        self.log = base / "prometheus.log"
        self.proc = None

    def start(self):
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={self.base / 'prometheus.yaml'}",
             f"--storage.tsdb.path={self.base / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=open(self.log, "a"), stderr=subprocess.STDOUT, start_new_session=True)
        wait_for(lambda: self.proc.poll() is not None or self._ready(), timeout=60, what="prometheus ready")
        if self.proc.poll() is not None:
            raise AssertionError("prometheus exited:\n" + self.log.read_text()[-3000:])
        return self

    def _ready(self):
        import urllib.request
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def api(self, path, **params):
        """GET /api/v1/<path>; returns its data (fails on an error status)."""
        import urllib.parse
        import urllib.request
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.loads(r.read())
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr):
        return self.api("query", query=expr)["result"]

    def alerts(self, name, state="firing"):
        return [a for a in self.api("alerts")["alerts"] if a["labels"]["alertname"] == name and a["state"] == state]

    def stop(self):
        stop_process(self.proc, timeout=30)
        self.proc = None


class PrivateDocker:
    """A dockerd of our own: own socket, data root, exec root, pid file, config
    file and network namespace; no bridge, no iptables."""

    def __init__(self, base: Path, env=None, exec_root: Path = None, hosts_in_config=False):
        self.base = base
        self.hosts_in_config = hosts_in_config  # the API socket in daemon.json's "hosts", not -H
        self.exec_root = exec_root or base / "exec"
        self.sock = base / "docker.sock"
        self.daemon_json = base / "daemon.json"
        self.host = f"unix://{self.sock}"
        self.env = dict(os.environ, **(env or {}))
        self.proc = None
        self.log = base / "dockerd.log"

    def start(self):
        self.base.mkdir(parents=True, exist_ok=True)
        if not self.daemon_json.exists():
            self.daemon_json.write_text(json.dumps({"hosts": [self.host]}) + "\n" if self.hosts_in_config else "{}\n")
        # Own network namespace: a dockerd with --bridge=none deletes the host's
        # docker0 bridge at start, which would break the machine's own engine.
        cmd = ["unshare", "--net", "--", "dockerd", "--config-file", str(self.daemon_json), "--data-root", str(self.base / "data"),
               "--exec-root", str(self.exec_root), "--pidfile", str(self.base / "dockerd.pid"),
               *([] if self.hosts_in_config else ["-H", self.host]), "--bridge=none", "--iptables=false", "--ip6tables=false",
               "--userland-proxy=false"]
        self.proc = subprocess.Popen(cmd, stdout=open(self.log, "w"), stderr=subprocess.STDOUT,
                                     env=self.env, start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("dockerd exited:\n" + self.log.read_text()[-3000:])
            if self.docker("info", check=False).returncode == 0:
                return self
            time.sleep(0.3)
        raise AssertionError("dockerd did not come up:\n" + self.log.read_text()[-3000:])

    def docker(self, *args, check=True, timeout=300):
        return run(["docker", "-H", self.host, *args], check=check, timeout=timeout)

    def info(self):
        return json.loads(self.docker("info", "--format", "{{json .}}").stdout)

    def wait_default_runtime(self, name, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.info().get("DefaultRuntime") == name:
                return
            time.sleep(0.2)
        raise AssertionError(f"dockerd default runtime never became {name}")

    def import_busybox(self, tag, rootfs: Path):
        if self.docker("image", "inspect", tag, check=False).returncode == 0:
            return tag
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        p = subprocess.run(["docker", "-H", self.host, "import", "--change", 'CMD ["sh"]', "-", tag],
                           stdin=tar.stdout, capture_output=True, text=True, timeout=120)
        tar.wait()
        assert p.returncode == 0, p.stderr
        return tag

    def stop(self):
        if not self.proc:
            return
        ids = self.docker("ps", "-aq", check=False).stdout.split()
        if ids:
            self.docker("rm", "-f", *ids, check=False)
        terminate(self.proc, self.base)  # dockerd leaves mounts behind only when it crashes
        self.proc = None


class AgentProcess:
    """shmkeeperd started on a private socket with the given config text."""

    def __init__(self, base: Path, config_text: str, binary: Path = AGENTD):
        self.binary = binary
        self.base = base
        self.sock = base / "agent.sock"
        self.config = base / "agent.yaml"
        self.config.write_text(config_text + f"\nagent:\n  socket: {self.sock}\n" if "agent:" not in config_text
                               else config_text)
        self.proc = None
        self.log = base / "agent.log"

    def start(self, *args, timeout=None):
        """Starts shmkeeperd with `args` added (e.g. --read-only) and waits until it serves: the agent creates
        its socket only after its start-up scan (a walk of /proc and a listing and probe of every watched
        tmpfs), so what start waits for is that scan. `timeout`: seconds, default scaled(20) (a few files);
        a test that starts an agent on thousands of files passes a bound sized for them."""
        timeout = scaled(20) if timeout is None else timeout
        # A private state directory (the one-agent-per-node lock) unless the config names one.
        state = [] if "stateDir" in self.config.read_text() else ["--state-dir", str(self.base / "state")]
        self.proc = subprocess.Popen([str(self.binary), "--config", str(self.config), *state, *args],
                                     stdout=open(self.log, "a"), stderr=subprocess.STDOUT, start_new_session=True)
        started = time.time()
        while time.time() < started + timeout:
            if self.proc.poll() is not None:
                raise AssertionError("shmkeeperd exited:\n" + self.log.read_text()[-3000:])
            if self.sock.exists() and self.cli("status", check=False).returncode == 0:
                return self
            time.sleep(0.1)
        raise AssertionError(f"shmkeeperd did not serve within {timeout:.0f} s (its start-up scan runs before it "
                             "serves):\n" + self.log.read_text()[-3000:])

    def cli(self, *args, check=True):
        return run([CLI, *args, "--agent", self.sock], check=check, timeout=60)

    def metrics_port(self):
        """The HTTP port the agent logged at start (for metricsAddress host:0)."""
        for line in self.log.read_text().splitlines():
            if line.startswith("{") and json.loads(line).get("msg") == "serving":
                return json.loads(line)["metrics_port"]
        raise AssertionError("the agent logged no metrics port:\n" + self.log.read_text()[-3000:])

    def metrics_text(self):
        """/metrics as served."""
        import urllib.request
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port()}/metrics", timeout=10) as r:
            return r.read().decode()

    def metrics(self):
        """/metrics as {series text before the value: value}."""
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in self.metrics_text().splitlines() if line and not line.startswith("#")}

    def json(self, *args):
        return json.loads(self.cli(*args, "-o", "json").stdout)

    def wait_scans(self, n, timeout=30):
        """wait_scans on this agent's socket."""
        wait_scans(self.sock, n, timeout)

    def wait_watching(self, n=1, timeout=20):
        """Waits until `n` Watch streams are subscribed (the agent's gauge
        shmkeeper_watch_streams; needs agent.metricsAddress): an event the
        agent publishes from then on reaches them."""
        wait_for(lambda: self.metrics().get("shmkeeper_watch_streams", 0) >= n, timeout=timeout, interval=0.05,
                 what=f"{n} subscribed watch stream(s)")

    def stop(self):
        stop_process(self.proc, timeout=10)
        self.proc = None

    @classmethod
    def watching(cls, base: Path, dirs, metrics_address="", scan_interval_s=1):
        """An agent that watches only the host tmpfs directories `dirs` (no engines, no event socket)."""
        return cls(base, f"""
agent:
  socket: {base}/agent.sock
  eventSocket: ""
  metricsAddress: "{metrics_address}"
  scanInterval: {scan_interval_s}s
  runtimeRoots: [{base}/no-runtime-root]
  dockerSocket: ""
  hostShmDirs: [{", ".join(str(d) for d in dirs)}]
""")


def stop_process(proc, timeout):
    """SIGTERM, then SIGKILL after `timeout` seconds; None or an exited process is fine."""
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def terminate(proc, base: Path):
    """SIGTERM, then SIGKILL to the process group after 30 s; then lazily
    unmounts whatever an engine left mounted below `base`."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for mp in sorted(shm_mounts_under(str(base)), reverse=True):
        subprocess.run(["umount", "-l", mp], check=False)


def agent_scans(sock):
    """Scans the agent at `sock` has completed (`status`: node.scans)."""
    return int(json.loads(run([CLI, "status", "-o", "json", "--agent", sock], timeout=60).stdout)["node"]["scans"])


def wait_scans(sock, n, timeout=30):
    """Waits until the agent at `sock` has completed `n` scans more than now:
    what it reports after them is its verdict on the state at this call (with
    the tests' 1 s scan interval and 1 s grace, three scans put every file
    unheld since this call past grace). Waits on the agent, not on time."""
    target = agent_scans(sock) + n
    wait_for(lambda: agent_scans(sock) >= target, timeout=timeout, interval=0.1, what=f"{n} more scans")


def read_line(proc, timeout, what="a line"):
    """The next line `proc` writes on its stdout pipe (text or bytes, as opened), within `timeout` seconds:
    a child that never writes fails the test instead of hanging it. "" at EOF (the child closed its stdout)."""
    # readline on a thread (not select on the pipe, which misses a line the stream has already buffered); one
    # that times out stays blocked until the child ends or the test kills it.
    got = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not got:
        raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what} from {proc.args!r}")
    return got[0]


def wait_for(fn, timeout=10, interval=0.2, what="condition"):
    """Polls fn() until it returns a truthy value; returns it."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


def read_until(proc, done, timeout, what):
    """Reads `proc`'s stdout pipe (os.read: never through its buffered file object) until `done(everything read
    so far, bytes)` is true, and returns what was read; an AssertionError at the deadline or when the stream
    ends first. A stream read with a deadline: a test waits on the output it expects, never a sleep, never a
    read that can hang."""
    import select
    fd = proc.stdout.fileno()
    got = b""
    deadline = time.monotonic() + timeout
    while not done(got):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out waiting for {what}; read so far: {got[-2000:]!r}")
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"{what}: the stream ended first; read: {got[-2000:]!r}")
            got += chunk
    return got


CRI_TOOL = BUILD / "tests" / "cri-tool"


def release_agentd() -> Path:
    """The shmkeeperd users run: BUILD's when BUILD is not sanitized, else the release tree's (build/, made by
    the CI's build stage before the sanitized stages). Memory and CPU bounds are measured on it: ASan's shadow
    memory and quarantine make a sanitized agent's RSS a function of the allocator, not of the agent."""
    agentd = (REPO / "build" / "plugin" / "shmkeeperd") if SANITIZED else AGENTD
    assert agentd.exists(), f"{agentd} is missing: bounds are measured on the release build (tests/run.sh build)"
    return agentd
PAUSE_IMAGE = "shmkeeper.test/pause:1"

sys.path.insert(0, str(REPO / "deploy" / "image"))
from image_archive import write_image_archive  # noqa: E402,F401  (the offline image builder users run too)


class PrivateContainerd:
    """A containerd of our own with its CRI plugin: own config, root, state,
    socket, runc root and network namespace. `restrict_oom_score_adj` because
    this sandbox cannot lower oom_score_adj; the pause image is imported from
    an archive built offline."""

    def __init__(self, base: Path, env=None):
        self.base = base
        self.config = base / "config.toml"
        self.sock = base / "containerd.sock"
        self.endpoint = f"unix://{self.sock}"
        self.runc_root = base / "runc"
        self.state = base / "state"
        self.env = dict(os.environ, **(env or {}))
        self.proc = None
        self.log = base / "containerd.log"

    def write_config(self):
        self.config.write_text(f"""version = 2
root = "{self.base}/root"
state = "{self.state}"
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{self.runc_root}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.base}/opt"
""")

    def start(self):
        self.base.mkdir(parents=True, exist_ok=True)
        if not self.config.exists():
            self.write_config()
        self.proc = subprocess.Popen(["unshare", "--net", "--", "containerd", "--config", str(self.config)],
                                     stdout=open(self.log, "a"), stderr=subprocess.STDOUT, env=self.env,
                                     start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("containerd exited:\n" + self.log.read_text()[-3000:])
            if self.sock.exists() and self.cri("version", check=False).returncode == 0:
                return self
            time.sleep(0.3)
        raise AssertionError("containerd did not come up:\n" + self.log.read_text()[-3000:])

    def ctr(self, *args, check=True):
        return run(["ctr", "--address", self.sock, "-n", "k8s.io", *args], check=check, timeout=300)

    def import_image(self, archive: Path):
        self.ctr("images", "import", archive)

    def cri(self, *args, check=True, timeout=180):
        return run([CRI_TOOL, "-r", self.endpoint, *args], check=check, timeout=timeout)

    def pods(self):
        return json.loads(self.cri("pods").stdout).get("items", [])

    def stop(self):
        if not self.proc:
            return
        for p in self.pods() if self.proc.poll() is None else []:
            self.cri("stopp", p["id"], check=False)
            self.cri("rmp", p["id"], check=False)
        terminate(self.proc, self.base)
        self.proc = None


class PrivatePodman:
    """podman (Debian's 4.3) with everything of its own under `base`: storage
    root, runroot, tmpdir, hooks dir, containers.conf (CONTAINERS_CONF), so the
    host's podman state is untouched. `runtime` is the default OCI runtime
    ("runc", "crun", or "shmkeeper" = the wrapper in front of `wrapped`).

    crun 1.8 refuses a hybrid cgroup v1/v2 host ("cgroups in hybrid mode not
    supported"): every podman call then runs (nsenter) in one private mount
    namespace, held by a sleeping process, whose /sys/fs/cgroup/unified is
    unmounted (the host's stays mounted); the containers, conmon and podman's
    cleanup inherit it, and mounts podman makes (shm tmpfs) stay in it."""

    def __init__(self, base: Path, runtime="runc", wrapped="runc", wrapper_config=None):
        import resource
        self.base = base
        self.runtime = runtime
        self.hooks = base / "hooks.d"
        self.root, self.runroot, self.tmp = base / "storage", base / "run", base / "tmp"
        self.needs_unshare = "crun" in (runtime, wrapped)
        limits = []
        for name, res in [("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)]:
            hard = resource.getrlimit(res)[1]
            n = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
            limits.append(f'"{name}={n}:{n}"')
        base.mkdir(parents=True, exist_ok=True)
        runtimes = f'shmkeeper = ["{RUNTIME}"]\n' if runtime == "shmkeeper" else ""
        (base / "containers.conf").write_text(f"""[containers]
default_ulimits = [{", ".join(limits)}]
init_path = "/usr/bin/catatonit"
netns = "none"
[engine]
runtime = "{runtime}"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{base}/events.log"
tmp_dir = "{self.tmp}"
static_dir = "{self.root}/libpod"
volume_path = "{self.root}/volumes"
hooks_dir = ["{self.hooks}"]
[engine.runtimes]
{runtimes}[network]
network_config_dir = "{base}/net"
""")
        (base / "storage.conf").write_text(
            f'[storage]\ndriver = "vfs"\nrunroot = "{self.runroot}"\ngraphroot = "{self.root}"\n')
        (base / "registries.conf").write_text("unqualified-search-registries = []\n")
        self.env = dict(os.environ, CONTAINERS_CONF=str(base / "containers.conf"),
                        CONTAINERS_STORAGE_CONF=str(base / "storage.conf"),
                        CONTAINERS_REGISTRIES_CONF=str(base / "registries.conf"))
        if wrapper_config:
            self.env["SHMKEEPER_CONFIG"] = str(wrapper_config)
        self.holder = None
        if self.needs_unshare:
            self.holder = subprocess.Popen(
                ["unshare", "-m", "--propagation", "private", "sh", "-c",
                 "if mountpoint -q /sys/fs/cgroup/unified; then umount /sys/fs/cgroup/unified || exit 99; fi; "
                 "echo ready; exec sleep infinity"], stdout=subprocess.PIPE, text=True, start_new_session=True)
            if read_line(self.holder, 60, "the mount namespace ready").strip() != "ready":
                raise AssertionError("could not make a mount namespace without the cgroup2 mount")

    def shell(self, script, *args, check=False, timeout=120):
        """Runs sh `script` in podman's mount namespace; in it, "$@" is this
        instance's podman followed by `args`."""
        cmd = ["podman", "--root", self.root, "--runroot", self.runroot, "--tmpdir", self.tmp]
        argv = ["sh", "-c", script, "sh", *cmd, *args]
        if self.holder:
            argv = ["nsenter", "-t", str(self.holder.pid), "-m", "--", *argv]
        return run(argv, check=check, timeout=timeout, env=self.env)

    def podman(self, *args, check=True, timeout=120):
        return self.shell('exec "$@"', *args, check=check, timeout=timeout)

    def import_rootfs(self, ref, rootfs: Path):
        tar = self.base / (ref.replace("/", "_").replace(":", "_") + ".tar")
        run(["tar", "-C", rootfs, "-cf", tar, "."])
        self.podman("import", tar, ref)

    def stop(self):
        self.podman("pod", "rm", "-f", "-a", check=False)
        self.podman("rm", "-f", "-a", check=False)
        for mp in sorted(shm_mounts_under(str(self.base)), reverse=True):
            subprocess.run(["umount", "-l", mp], check=False)
        if self.holder:  # the namespace, and whatever podman left mounted in it, goes with it
            self.holder.kill()
            self.holder.wait()
