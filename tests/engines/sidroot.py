"""The newer engines, each started privately from a cached Debian sid root.

`SidNamespace` is one private mount + pid + network namespace whose root is an
overlay over the cached root (tests/engines/root.sh: the lower layer is never
written), entered with pivot_root (a chroot breaks `runc exec`). In it: a new
/proc, the host's /sys (cgroup v1 hybrid: /sys/fs/cgroup/unified unmounted, so
crun accepts the layout) and /dev, /run and /tmp private, and the host paths a
test names bound at THE SAME PATHS (its base directory, the build's
binaries, image rootfs): a socket, config file or data root has one path on
both sides, so host tools (cri-tool, the agent) and the engines agree.

Daemons and commands run inside through nsenter; the namespace's init is
catatonit. Teardown stops the daemons, kills the init (the pid namespace and
every process in it go with it, and the mounts with the mount namespace) and
then asserts that no process and no mount of it is left.

The Debian 12 CLI and agent do not start in a sid root (sonames); the static
binaries do: commands inside use build/plugin/shmkeeper-static (as
`shmkeeper`), shmkeeper-runtime and shmkeeper-hook. The agent runs with the
host's files in the namespace's pid namespace (`SidNamespace.agent_argv`: its
own mount namespace with a /proc of that pid namespace), which is what a node
agent on that host sees: the pids in the engines' state files are the pid
namespace's.

Usage (see tests/engines/conftest.py):
    ns = SidNamespace(base, binds=[BUILD]).start()
    dockerd = SidDocker(ns, base / "docker").start()
    dockerd.docker("run", "--rm", image, "df", "-k", "/dev/shm")
    ...
    ns.stop()          # stops the daemons started through it first
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
from harness import read_line, wait_for  # noqa: E402

HERE = Path(__file__).resolve().parent
ROOT_SH = HERE / "root.sh"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# The namespace's init: runs as pid 1 of the new pid namespace, in the new
# mount namespace (private propagation), before the pivot with the host's
# tools. $1 root, $2 overlay dir, then pairs SOURCE DEST to bind (DEST != SOURCE: read-only).
INIT = r"""
set -eu
root=$1 ov=$2; shift 2
mkdir -p "$ov/upper" "$ov/work" "$ov/merged" "$ov/run"
mount -t overlay overlay -o "lowerdir=$root,upperdir=$ov/upper,workdir=$ov/work" "$ov/merged"
new=$ov/merged
mount -t proc proc "$new/proc"
mount --rbind /sys "$new/sys"
if mountpoint -q "$new/sys/fs/cgroup/unified"; then umount "$new/sys/fs/cgroup/unified"; fi
mount --rbind /dev "$new/dev"
mount --bind "$ov/run" "$new/run"
mount -t tmpfs -o mode=1777 tmpfs "$new/tmp"
while [ $# -gt 0 ]; do
  src=$1 dst=$2; shift 2
  mkdir -p "$new$dst"
  mount --bind "$src" "$new$dst"
  if [ "$src" != "$dst" ]; then mount -o remount,bind,ro "$new$dst"; fi
done
cd "$new"
mkdir -p .oldroot
pivot_root . .oldroot
cd /
umount -l /.oldroot
rmdir /.oldroot
ip link set lo up
echo ready
exec catatonit -P
"""


def sid_root(suite="sid"):
    """The cached root's path (built when absent: minutes), or raises with root.sh's message.
    `suite`: sid, or trixie (Docker 26.1, containerd 1.7)."""
    p = subprocess.run([str(ROOT_SH), "--suite", suite], capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        raise RuntimeError(f"tests/engines/root.sh failed: {p.stderr.strip()[-2000:]}")
    return Path(p.stdout.strip().splitlines()[-1])


def root_versions(root: Path):
    """{package: version} of the engines in the root (its stamp)."""
    out = {}
    for line in (root / ".shmkeeper-root").read_text().splitlines():
        if "=" in line and not line.startswith(("key=", "suite=", "packages=")):
            pkg, ver = line.split("=", 1)
            out[pkg] = ver
    return out


def short_base(name):
    """A short directory under /tmp for one namespace (unix sockets below it stay under 108 bytes)."""
    return Path(tempfile.mkdtemp(prefix=f"shmk-{name}-", dir="/tmp"))


def _mounts_under(prefix):
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4] for line in f if line.split()[4].startswith(prefix)]


class SidNamespace:
    """One private namespace rooted in the sid root. Not thread-safe."""

    def __init__(self, base: Path, root: Path = None, binds=(), host_binds=()):
        """`binds`: host paths bound at their own path; `host_binds`: (host path,
        path inside) pairs bound read-only (e.g. the host's /usr at /host/usr)."""
        self.base = Path(base)
        self.root = Path(root) if root else sid_root()
        self.binds = [(p, p) for p in [self.base, *[Path(b).resolve() for b in binds]]]
        self.binds += [(Path(src).resolve(), Path(dst)) for src, dst in host_binds]
        self.ov = self.base / ".ns"
        self.run_dir = self.ov / "run"  # the namespace's /run, seen from the host
        self.holder = None
        self.pid = None  # the init's pid as the host sees it
        self.daemons = []  # Daemon objects started through popen(), stopped first at stop()

    def start(self):
        self.base.mkdir(parents=True, exist_ok=True)
        # --kill-child and the parent-death signal: a test run that is killed takes the namespace
        # (its init, so every process in it, and its mounts) with it.
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--pid", "--net", "--fork", "--kill-child", "--propagation", "private",
             "sh", "-c", INIT, "init", str(self.root), str(self.ov), *[str(x) for pair in self.binds for x in pair]],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
            preexec_fn=_die_with_parent)
        try:
            line = read_line(self.holder, 120, "the sid namespace ready").strip()
        except AssertionError:
            self.holder.kill()
            raise
        if line != "ready":
            self.holder.kill()
            raise AssertionError(f"the sid namespace did not start: {line} {self.holder.stderr.read()[-2000:]}")
        children = Path(f"/proc/{self.holder.pid}/task/{self.holder.pid}/children").read_text().split()
        self.pid = int(children[0])
        return self

    def argv(self, cmd, pid_ns=True):
        """argv that runs `cmd` (looked up in the root's PATH) inside the namespace."""
        return ["nsenter", "-t", str(self.pid), "-m", "-n", *(["-p"] if pid_ns else []), "-r", "-w", "--",
                *[str(c) for c in cmd]]

    def env(self, extra=None):
        return {"PATH": PATH, "HOME": "/root", "LANG": "C.UTF-8", **(extra or {})}

    def run(self, cmd, check=True, timeout=300, env=None, cwd=None, **kw):
        """Runs `cmd` inside (in directory `cwd`, a path bound at its own path); CompletedProcess with text output."""
        if cwd is not None:
            cmd = ["sh", "-c", 'cd "$1" && shift && exec "$@"', "sh", cwd, *cmd]
        p = subprocess.run(self.argv(cmd), capture_output=True, text=True, timeout=timeout, env=self.env(env), **kw)
        if check and p.returncode != 0:
            raise AssertionError(f"{cmd} exited {p.returncode} in the sid root\n"
                                 f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        return p

    def popen(self, cmd, log: Path, env=None):
        """Starts a daemon inside (its output to `log`); stop() stops it."""
        return self._start(self.argv(cmd), log, self.env(env))

    def popen_host(self, cmd, log: Path, env=None):
        """Starts a host binary (agent_argv) as a daemon; stop() stops it."""
        return self._start(self.agent_argv(cmd), log, env)

    def _start(self, argv, log, env):
        with open(log, "a") as out:
            proc = Daemon(subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True))
        self.daemons.append(proc)
        return proc

    def agent_argv(self, cmd):
        """argv that runs a host binary (the Debian 12 agent) in the namespace's pid
        and network namespaces, with the host's files and a /proc of that pid namespace."""
        return ["nsenter", "-t", str(self.pid), "-p", "-n", "--", "unshare", "--mount", "--propagation", "private",
                "sh", "-c", 'mount -t proc proc /proc && exec "$@"', "agent", *[str(c) for c in cmd]]

    def processes(self):
        """Host pids of the processes in the namespace's pid namespace (the init included)."""
        if self.pid is None:
            return []
        try:
            mine = os.readlink(f"/proc/{self.pid}/ns/pid")
        except FileNotFoundError:
            return []
        out = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    if os.readlink(f"/proc/{d}/ns/pid") == mine:
                        out.append(int(d))
                except OSError:
                    pass
        return out

    def stop(self):
        """Stops the daemons (SIGTERM, 30 s, SIGKILL), then the whole namespace;
        raises when a process or a mount of it outlives it."""
        for proc in reversed(self.daemons):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.daemons = []
        if self.holder is None:
            return
        ns_pid_link = None
        try:
            ns_pid_link = os.readlink(f"/proc/{self.pid}/ns/pid")
        except OSError:
            pass
        if self.holder.poll() is None:
            os.kill(self.pid, signal.SIGKILL)  # pid 1 of the namespace: the kernel kills the rest
            self.holder.wait(timeout=30)
        self.holder = None
        left = []

        def emptied():
            left[:] = [d for d in os.listdir("/proc") if d.isdigit() and _ns_of(d) == ns_pid_link]
            return not left
        try:
            wait_for(emptied, timeout=30, interval=0.1, what="the sid namespace's processes to go")
        except AssertionError:
            pass  # reported below, with its mounts
        mounts = _mounts_under(str(self.base))
        if left or mounts:
            raise AssertionError(f"the sid namespace left processes {left} and mounts {mounts}")


def wait_up(proc, log, name, timeout, ready):
    """Waits (harness.wait_for: a deadline) until `ready()`; fails at once,
    with the log's tail, when the daemon exits first."""
    def up():
        if proc.poll() is not None:
            raise AssertionError(f"{name} exited:\n" + log.read_text()[-3000:])
        return ready()
    try:
        wait_for(up, timeout=timeout, interval=0.3, what=f"{name} to answer")
    except AssertionError as e:
        if "timed out" in str(e):
            raise AssertionError(f"{name} did not come up:\n" + log.read_text()[-3000:]) from None
        raise


class Daemon:
    """A daemon started through nsenter: nsenter forks it into the pid
    namespace and waits, but does not pass signals on, so a signal goes to
    the daemon itself (nsenter's child) and nsenter exits with it."""

    def __init__(self, proc):
        self.proc = proc
        self.pid = None  # the daemon's host pid (None when nsenter exited first or had no child in 10 s)

        def child():
            try:
                kids = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
            except FileNotFoundError:
                kids = []
            return int(kids[0]) if kids else proc.poll() is not None
        try:
            found = wait_for(child, timeout=10, interval=0.01, what="the daemon under nsenter")
            self.pid = found if found is not True else None
        except AssertionError:
            pass

    def poll(self):
        return self.proc.poll()

    def send_signal(self, sig):
        if self.pid is not None and self.proc.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def wait(self, timeout=None):
        return self.proc.wait(timeout=timeout)


def _die_with_parent():
    import ctypes
    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


def _ns_of(pid):
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


class SidDocker:
    """dockerd (sid's docker.io) in `ns`: own config, data root, exec root and
    socket under `base`; bridge none, no iptables. `docker()` is sid's docker-cli."""

    def __init__(self, ns: SidNamespace, base: Path, env=None, hosts_in_config=False):
        self.ns, self.base, self.env = ns, Path(base), env or {}
        self.hosts_in_config = hosts_in_config  # the API socket in daemon.json's "hosts", not -H
        self.daemon_json = self.base / "daemon.json"
        self.sock = self.base / "docker.sock"
        self.host = f"unix://{self.sock}"
        self.exec_root = self.base / "exec"
        self.log = self.base / "dockerd.log"
        self.proc = None

    def start(self, timeout=90):
        self.base.mkdir(parents=True, exist_ok=True)
        if not self.daemon_json.exists():
            config = {"bridge": "none", "iptables": False, "ip6tables": False}
            if self.hosts_in_config:
                config["hosts"] = [self.host]
            self.daemon_json.write_text(json.dumps(config) + "\n")
        self.proc = self.ns.popen(["dockerd", "--config-file", self.daemon_json, "--data-root", self.base / "data",
                                   "--exec-root", self.exec_root, "--pidfile", self.base / "dockerd.pid",
                                   *([] if self.hosts_in_config else ["-H", self.host]), "--userland-proxy=false"],
                                  self.log, env=self.env)
        wait_up(self.proc, self.log, "dockerd", timeout,
                 lambda: self.sock.exists() and self.docker("version", check=False).returncode == 0)
        return self

    def docker(self, *args, check=True, timeout=300, **kw):
        return self.ns.run(["docker", "-H", self.host, *args], check=check, timeout=timeout, **kw)

    def info(self):
        return json.loads(self.docker("info", "--format", "{{json .}}").stdout)

    def import_rootfs(self, tag, rootfs: Path):
        tar = subprocess.run(["tar", "-C", str(rootfs), "-c", "."], capture_output=True, check=True).stdout
        p = subprocess.run(self.ns.argv(["docker", "-H", self.host, "import", "--change", 'CMD ["sh"]', "-", tag]),
                           input=tar, capture_output=True, timeout=120, env=self.ns.env())
        assert p.returncode == 0, p.stderr
        return tag

    def stop(self):
        if self.proc and self.proc.poll() is None:
            ids = self.docker("ps", "-aq", check=False).stdout.split()
            if ids:
                self.docker("rm", "-f", *ids, check=False)
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.proc = None


class SidContainerd:
    """containerd 2.x (sid) in `ns` with its CRI plugin, config version 3: own
    root, state, sockets and runc root under `base`; restrict_oom_score_adj
    (this sandbox cannot lower oom_score_adj); the pause image `pause_image`,
    imported offline with ctr. `extra_config`: TOML appended to the config
    (e.g. [plugins."io.containerd.nri.v1.nri"] for NRI)."""

    def __init__(self, ns: SidNamespace, base: Path, pause_image, env=None, extra_config="", version=3):
        self.ns, self.base, self.pause_image, self.env = ns, Path(base), pause_image, env or {}
        self.extra_config = extra_config
        self.version = version  # config version: 3 (containerd 2.x) or 2 (containerd 1.7: trixie)
        self.config = self.base / "config.toml"
        self.sock = self.base / "c.sock"
        self.endpoint = f"unix://{self.sock}"
        self.runc_root = self.base / "runc"
        self.log = self.base / "containerd.log"
        self.proc = None

    def write_config(self):
        self.base.mkdir(parents=True, exist_ok=True)
        if self.version == 2:
            self.config.write_text(self._config_v2() + self.extra_config)
            return
        self.config.write_text(f"""version = 3
root = "{self.base}/root"
state = "{self.base}/state"
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{self.pause_image}"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        Root = "{self.runc_root}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.base}/opt"
""" + self.extra_config)

    def _config_v2(self):
        cri = '[plugins."io.containerd.grpc.v1.cri"'
        return f"""version = 2
root = "{self.base}/root"
state = "{self.base}/state"
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
{cri}]
  sandbox_image = "{self.pause_image}"
  restrict_oom_score_adj = true
  {cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    {cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      {cri}.containerd.runtimes.runc.options]
        Root = "{self.runc_root}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{self.base}/opt"
"""

    def start(self, timeout=90):
        if not self.config.exists():
            self.write_config()
        self.proc = self.ns.popen(["containerd", "--config", self.config], self.log, env=self.env)
        wait_up(self.proc, self.log, "containerd", timeout,
                 lambda: self.sock.exists() and self.ctr("version", check=False).returncode == 0)
        return self

    def ctr(self, *args, check=True, timeout=300):
        return self.ns.run(["ctr", "--address", self.sock, "-n", "k8s.io", *args], check=check, timeout=timeout)

    def stop(self, cri=None):
        """Removes every pod through `cri` (a callable running cri-tool args), then stops containerd."""
        if self.proc and self.proc.poll() is None:
            if cri:
                for p in json.loads(cri("pods").stdout or "{}").get("items", []):
                    cri("stopp", p["id"])
                    cri("rmp", p["id"])
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
        self.proc = None


class SidPodman:
    """podman (sid) in `ns`: storage root, runroot, tmpdir, hooks dir and
    containers.conf under `base`; network none, catatonit, default_ulimits
    within this machine's hard limits, cgroupfs. `runtime`: the default OCI
    runtime (runc, crun, or "shmkeeper" = the wrapper at `wrapper`)."""

    def __init__(self, ns: SidNamespace, base: Path, runtime="runc", wrapper=None, env=None):
        import resource
        self.ns, self.base, self.runtime = ns, Path(base), runtime
        self.hooks = self.base / "hooks.d"
        self.root, self.runroot, self.tmp = self.base / "storage", self.base / "run", self.base / "tmp"
        self.base.mkdir(parents=True, exist_ok=True)
        limits = []
        for name, res in [("nofile", resource.RLIMIT_NOFILE), ("nproc", resource.RLIMIT_NPROC)]:
            hard = resource.getrlimit(res)[1]
            n = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
            limits.append(f'"{name}={n}:{n}"')
        runtimes = f'shmkeeper = ["{wrapper}"]\n' if runtime == "shmkeeper" else ""
        self.conf = self.base / "containers.conf"
        self.conf.write_text(f"""[containers]
default_ulimits = [{", ".join(limits)}]
init_path = "/usr/bin/catatonit"
netns = "none"
[engine]
runtime = "{runtime}"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "{self.base}/events.log"
tmp_dir = "{self.tmp}"
static_dir = "{self.root}/libpod"
volume_path = "{self.root}/volumes"
hooks_dir = ["{self.hooks}"]
[engine.runtimes]
{runtimes}[network]
network_config_dir = "{self.base}/net"
""")
        (self.base / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\nrunroot = "{self.runroot}"\ngraphroot = "{self.root}"\n')
        (self.base / "registries.conf").write_text("unqualified-search-registries = []\n")
        self.env = {"CONTAINERS_CONF": str(self.conf), "CONTAINERS_STORAGE_CONF": str(self.base / "storage.conf"),
                    "CONTAINERS_REGISTRIES_CONF": str(self.base / "registries.conf"), **(env or {})}

    def podman(self, *args, check=True, timeout=120, **kw):
        return self.ns.run(["podman", "--root", self.root, "--runroot", self.runroot, "--tmpdir", self.tmp, *args],
                           check=check, timeout=timeout, env=self.env, **kw)

    def import_rootfs(self, ref, rootfs: Path):
        tar = self.base / "image.tar"
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tar), "."], check=True)
        self.podman("import", tar, ref)

    def stop(self):
        self.podman("pod", "rm", "-f", "-a", check=False)
        self.podman("rm", "-f", "-a", check=False)
