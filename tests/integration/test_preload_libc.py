"""libshmkeeper-preload.so is indistinguishable from libc except for ENOSPC
instead of SIGBUS: the same program run with and without LD_PRELOAD on this host's
glibc and kernel gives the same results, for the cases the interposition
touches (open/openat/creat/shm_open with O_CREAT under /dev/shm and around
it), stays a pthread cancellation point, keeps fs.protected_regular and
EISDIR, and keeps at most one descriptor of its own (the event socket, once
an agent listened: high, CLOEXEC, checked before each use)."""
import json
import os
import socket
import subprocess
import sys
import uuid

import pytest

from harness import BUILD, SHMGROW, read_line, require

PRELOAD = BUILD / "plugin" / "libshmkeeper-preload.so"

# Runs each case in a fresh directory under /dev/shm and prints one JSON line
# per case: the errno name, or the type of what the descriptor opened.
CASES = r"""
import errno, json, os, stat, sys, _posixshmem
base = sys.argv[1]
def kind(fd):
    m = os.fstat(fd).st_mode
    return "dir" if stat.S_ISDIR(m) else "reg" if stat.S_ISREG(m) else "lnk" if stat.S_ISLNK(m) else "other"
def attempt(fn):
    try:
        fd = fn()
    except OSError as e:
        return errno.errorcode[e.errno]
    try:
        return kind(fd)
    finally:
        os.close(fd)
C, X, D, RW = os.O_CREAT, os.O_EXCL, os.O_DIRECTORY, os.O_RDWR
cases = {
    "creat on a dir": lambda d: os.open(d + "/dir", C | os.O_RDONLY),
    "creat excl on a dir": lambda d: os.open(d + "/dir", C | X | os.O_RDONLY),
    "creat rw on a dir": lambda d: os.open(d + "/dir", C | RW),
    "creat on a file": lambda d: os.open(d + "/file", C | RW),
    "creat excl on a file": lambda d: os.open(d + "/file", C | X | RW),
    "creat a new file": lambda d: os.open(d + "/new", C | RW, 0o600),
    "creat nofollow on a symlink": lambda d: os.open(d + "/link", C | RW | os.O_NOFOLLOW),
    "creat through a dangling symlink": lambda d: os.open(d + "/dangling", C | RW),
    "creat excl on a dangling symlink": lambda d: os.open(d + "/dangling", C | X | RW),
    "creat directory flag, new": lambda d: os.open(d + "/newdir", C | D | os.O_RDONLY),
    "creat in a missing dir": lambda d: os.open(d + "/missing/x", C | RW),
    "creat a trailing slash": lambda d: os.open(d + "/new2/", C | RW),
    "tmpfile": lambda d: os.open(d, os.O_TMPFILE | RW, 0o600),
    "tmpfile excl": lambda d: os.open(d, os.O_TMPFILE | X | RW, 0o600),
    "path creat": lambda d: os.open(d + "/file", os.O_PATH | C),
    "path nofollow symlink": lambda d: os.open(d + "/link", os.O_PATH | os.O_NOFOLLOW),
    "openat creat relative": lambda d: os.open("file", C | RW, dir_fd=os.open(d, os.O_PATH)),
    "creat readonly file": lambda d: os.open(d + "/ro", C | RW),
    "shm_open a dir": lambda d: _posixshmem.shm_open(d[len("/dev/shm/"):], C | RW, 0o600),
    "shm_open slash inside": lambda d: _posixshmem.shm_open("a/b", C | RW, 0o600),
    "shm_open empty": lambda d: _posixshmem.shm_open("/", C | RW, 0o600),
    "shm_open excl existing": lambda d: _posixshmem.shm_open(d[len("/dev/shm/"):] + "x", C | X | RW, 0o600),
}
out = {}
for name, fn in cases.items():
    d = f"{base}/{len(out)}"
    os.mkdir(d)
    os.mkdir(d + "/dir")
    open(d + "/file", "w").close()
    os.symlink("file", d + "/link")
    os.symlink("target", d + "/dangling")
    open(d + "/ro", "w").close()
    os.chmod(d + "/ro", 0o400)
    if name == "shm_open excl existing":
        open(d + "x", "w").close()
    out[name] = attempt(lambda: fn(d))
    if name == "shm_open excl existing":
        os.unlink(d + "x")
    out[name + ": names"] = sorted(os.listdir(d))
print(json.dumps(out, indent=0))
"""


def run_py(code, *args, preload=True, env=None, user=None):
    e = dict(os.environ, **(env or {}))
    e.pop("LD_PRELOAD", None)
    if preload:
        e["LD_PRELOAD"] = str(PRELOAD)
    return subprocess.run(["/usr/bin/python3", "-c", code, *map(str, args)], env=e, capture_output=True,
                          text=True, timeout=60, user=user)


@pytest.fixture
def shm_dir():
    require(PRELOAD.exists() and SHMGROW.exists(), "the preload library and shmgrow must be built")
    d = f"/dev/shm/shmk-libc-{uuid.uuid4().hex[:8]}"
    os.mkdir(d)
    yield d
    subprocess.run(["rm", "-rf", d, d + "x"], check=False)


def test_open_semantics_are_libcs(shm_dir):
    results = []
    for preload in (False, True):
        base = f"{shm_dir}/{int(preload)}"
        os.mkdir(base)
        p = run_py(CASES, base, preload=preload)
        assert p.returncode == 0 and not p.stderr, p.stderr
        results.append(json.loads(p.stdout))
    plain, with_preload = results
    assert with_preload == plain
    assert plain["creat on a dir"] == "EISDIR"  # the case the old O_EXCL retry turned into a dir fd


def protected_regular(value):
    with open("/proc/sys/fs/protected_regular") as f:
        old = f.read().strip()
    with open("/proc/sys/fs/protected_regular", "w") as f:
        f.write(str(value))
    return old


def test_protected_regular_is_kept(shm_dir):
    # A world-writable sticky directory (like /dev/shm itself) and a file of
    # another user in it: O_CREAT on it is EACCES under fs.protected_regular=1,
    # even for root, with or without O_EXCL-free retries.
    os.chmod(shm_dir, 0o1777)
    victim = f"{shm_dir}/theirs"
    with open(victim, "w") as f:
        f.write("data")
    os.chown(victim, 4242, 4242)
    code = "import os, sys\ntry:\n os.open(sys.argv[1], os.O_CREAT | os.O_RDWR); print('opened')\n" \
           "except OSError as e: print(e.strerror)"
    old = protected_regular(1)
    try:
        plain = run_py(code, victim, preload=False).stdout.strip()
        preloaded = run_py(code, victim).stdout.strip()
    finally:
        protected_regular(old)
    assert plain == "Permission denied", plain
    assert preloaded == plain


@pytest.mark.parametrize("how", ["open", "openat"])
def test_open_stays_a_cancellation_point(tmp_path, how):
    require(PRELOAD.exists() and SHMGROW.exists(), "the preload library and shmgrow must be built")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for env in ({}, {"LD_PRELOAD": str(PRELOAD)}):
        p = subprocess.run([SHMGROW, "cancel", how, fifo], env=dict(os.environ, **env), capture_output=True,
                           text=True, timeout=30)
        assert p.returncode == 0 and p.stdout.strip() == "canceled", (env, p.stdout, p.stderr)


FDS = r"""
import os, stat, sys, _posixshmem
def fds():
    return sorted(int(x) for x in os.listdir("/proc/self/fd"))
before = fds()
m = os.memfd_create("seg")
s = _posixshmem.shm_open(sys.argv[1], os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
t = os.open("/dev/shm" + sys.argv[1] + "-2", os.O_CREAT | os.O_RDWR, 0o600)
after = fds()
ours = [fd for fd in after if fd not in before and fd > t + 1]  # t + 1: listdir's own
os.close(m); os.close(s); os.close(t)
_posixshmem.shm_unlink(sys.argv[1]); os.unlink("/dev/shm" + sys.argv[1] + "-2")
# adjacent: no descriptor of the library's own sits between the program's; its one socket is high and CLOEXEC
k = ours[0] if len(ours) == 1 else -1
print(len(after) - len(before), [s - m, t - s] == [1, 1], len(ours), k >= 64,
      k >= 0 and stat.S_ISSOCK(os.fstat(k).st_mode) and not os.get_inheritable(k), fds() == before + ours, s, t)
"""


def bound_socket(path, timeout=5):
    agent = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    agent.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    agent.bind(str(path))
    agent.settimeout(timeout)
    return agent


def receive(agent):
    """One datagram: (payload as JSON, the sender's pid from SCM_CREDENTIALS)."""
    data, anc, _, _ = agent.recvmsg(4096, socket.CMSG_SPACE(12))
    pid = next(int.from_bytes(d[:4], sys.byteorder) for lvl, typ, d in anc
               if lvl == socket.SOL_SOCKET and typ == socket.SCM_CREDENTIALS)
    return json.loads(data), pid


def test_the_kept_socket_stays_out_of_the_programs_way(tmp_path):
    """With an agent listening the library keeps one socket: at a high number (the program's own descriptors
    stay adjacent, lowest first), CLOEXEC; unlinks and memfd_create send nothing; each record names the
    descriptor the file was created at."""
    require(PRELOAD.exists(), "the preload library must be built")
    agent = bound_socket(tmp_path / "events.sock")
    name = f"/shmk-fds-{uuid.uuid4().hex[:8]}"
    try:
        p = run_py(FDS, name, env={"SHMKEEPER_EVENT_SOCKET": str(tmp_path / "events.sock")})
        assert p.returncode == 0, p.stderr
        out = p.stdout.split()
        assert out[:6] == ["4", "True", "1", "True", "True", "True"], p.stdout  # the program's three, our one
        got = [receive(agent)[0] for _ in range(2)]
        agent.settimeout(0.5)
        with pytest.raises(socket.timeout):
            agent.recv(4096)  # no unlink, no memfd notice
    finally:
        agent.close()
    assert got == [{"type": "create", "path": "/dev/shm" + name, "fd": int(out[6])},
                   {"type": "create", "path": f"/dev/shm{name}-2", "fd": int(out[7])}], got


KEPT = r"""
import os, sys, time, _posixshmem
base, sock = sys.argv[1], sys.argv[2]
def create(tag):
    fd = os.open(f"{base}-{tag}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.close(fd)
def ours():
    return [int(x) for x in os.listdir("/proc/self/fd") if int(x) >= 64]
create("first")
kept = ours()
# a program that closes every descriptor it did not open
os.closerange(3, 65536)
create("after-closerange")
kept2 = ours()
# one that puts a file of its own at our number: never written to, never closed by the library
victim = os.open(sock + ".victim", os.O_CREAT | os.O_RDWR, 0o600)  # not under /dev/shm: no record
os.dup2(victim, kept2[0])
create("after-dup2")
size = os.fstat(kept2[0]).st_size
same = os.path.samestat(os.fstat(kept2[0]), os.fstat(victim))
# fork: the child's records come from the child
pid = os.fork()
if pid == 0:
    create("child")
    os._exit(0)
os.waitpid(pid, 0)
print(len(kept), len(kept2), size, same, pid, flush=True)
# the agent restarts: a new socket at the same path
sys.stdin.readline()
create("after-restart")
"""


def test_records_survive_closed_and_replaced_descriptors_fork_and_an_agent_restart(tmp_path, shm_dir):
    """The kept socket against programs: closerange (a new socket), dup2 over its number (the program's file
    is neither written nor closed; a new socket), fork (the child's record carries the child's pid), and an
    agent that restarts (the library connects again)."""
    path = tmp_path / "events.sock"
    agent = bound_socket(path)
    env = dict(os.environ, LD_PRELOAD=str(PRELOAD), SHMKEEPER_EVENT_SOCKET=str(path))
    p = subprocess.Popen(["/usr/bin/python3", "-c", KEPT, f"{shm_dir}/f", str(path)], env=env, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = read_line(p, 60, "the program's first line").split()
        assert line[:4] == ["1", "1", "0", "True"], (line, p.stderr.read() if p.poll() is not None else "")
        child = int(line[4])
        got = [receive(agent) for _ in range(4)]
        assert [(g["path"], pid) for g, pid in got] == [
            (f"{shm_dir}/f-first", p.pid), (f"{shm_dir}/f-after-closerange", p.pid),
            (f"{shm_dir}/f-after-dup2", p.pid), (f"{shm_dir}/f-child", child)], got
        agent.close()
        os.unlink(path)
        agent = bound_socket(path)  # the restarted agent
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.wait(timeout=30) == 0, p.stderr.read()
        assert receive(agent)[0]["path"] == f"{shm_dir}/f-after-restart"
    finally:
        agent.close()
        if p.poll() is None:
            p.kill()


def test_opening_an_existing_file_is_not_a_creation(tmp_path, shm_dir):
    sock_path = tmp_path / "events.sock"
    agent = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    agent.bind(str(sock_path))
    agent.settimeout(0.5)
    existing = f"{shm_dir}/sized"
    with open(existing, "w") as f:
        f.write("x")
    empty = f"{shm_dir}/empty"
    open(empty, "w").close()
    code = "import os, sys\nos.close(os.open(sys.argv[1], os.O_CREAT | os.O_RDWR))\n" \
           "os.close(os.open(sys.argv[3], os.O_CREAT | os.O_PATH))\n" \
           "os.close(os.open(sys.argv[2], os.O_CREAT | os.O_RDWR))"
    try:  # a sized file, an empty one through O_PATH (which ignores O_CREAT), a fresh one: one record
        p = run_py(code, existing, f"{shm_dir}/fresh", empty, env={"SHMKEEPER_EVENT_SOCKET": str(sock_path)})
        assert p.returncode == 0, p.stderr
        got = [json.loads(agent.recv(4096))]
        with pytest.raises(socket.timeout):
            got.append(agent.recv(4096))
    finally:
        agent.close()
    assert [{k: v for k, v in g.items() if k != "fd"} for g in got] == [{"type": "create", "path": f"{shm_dir}/fresh"}]
    assert isinstance(got[0]["fd"], int) and got[0]["fd"] >= 3, got


# ftruncate's cases, run in a private mount namespace whose /dev/shm is a
# 16 MiB tmpfs: one JSON object, the errno name (or "ok") of each call, the
# file's size and allocated KiB after it, and /dev/shm's used KiB.
FTRUNCATE = r"""
import ctypes, errno, json, os, resource, signal
libc = ctypes.CDLL(None, use_errno=True)
libc.ftruncate.argtypes = libc.ftruncate64.argtypes = [ctypes.c_int, ctypes.c_long]
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
MiB = 1 << 20
def used():
    v = os.statvfs("/dev/shm")
    return (v.f_blocks - v.f_bfree) * v.f_frsize // 1024
def call(fd, length, fn=libc.ftruncate):
    ctypes.set_errno(4242)  # a success must leave errno as it was
    r = fn(fd, length)
    e = ctypes.get_errno()
    return "ok" if r == 0 and e == 4242 else f"ok, errno {e}" if r == 0 else errno.errorcode.get(e, str(e))
def state(fd):
    st = os.fstat(fd)
    return [st.st_size, st.st_blocks // 2]
out = {}
def case(name, path, flags, *lengths, fn=libc.ftruncate, size=0):
    if path.startswith("/dev/shm/") and size:
        with open(path, "wb") as f:
            f.truncate(size)
    fd = os.open(path, flags, 0o600)
    out[name] = [call(fd, n, fn) for n in lengths] + state(fd) + [used()]
    os.close(fd)
    if os.path.exists(path) and not path.endswith("/keep"):
        os.unlink(path)
RW = os.O_CREAT | os.O_RDWR
case("grow within the free space", "/dev/shm/a", RW, 12 * MiB)
case("grow, then grow again past it", "/dev/shm/b", RW, 12 * MiB, 30 * MiB)
case("grow in steps that each fit", "/dev/shm/c", RW, 12 * MiB, 24 * MiB)
case("shrink", "/dev/shm/d", RW, 12 * MiB, 4 * MiB, 0)
case("ftruncate64", "/dev/shm/e", RW, 12 * MiB, fn=libc.ftruncate64)
case("negative", "/dev/shm/f", RW, -1)
case("read-only descriptor, past the free space", "/dev/shm/g", os.O_RDONLY, 64 * MiB, size=1)
case("O_PATH descriptor, past the free space", "/dev/shm/h", os.O_PATH, 64 * MiB, size=1)
resource.setrlimit(resource.RLIMIT_FSIZE, (32 * MiB, resource.RLIM_INFINITY))
case("past RLIMIT_FSIZE and the free space", "/dev/shm/i", RW, 40 * MiB)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
case("a file not on /dev/shm", "/tmp/shmk-ftruncate-" + str(os.getpid()), RW, 64 * MiB)
m = os.memfd_create("x")
out["memfd past /dev/shm's free space"] = [call(m, 64 * MiB)] + state(m)
os.close(m)
fd = os.open("/dev/shm/j", RW, 0o600)
try:
    os.posix_fallocate(fd, 0, 64 * MiB)
    out["posix_fallocate past the free space"] = ["ok"] + state(fd) + [used()]
except OSError as e:
    out["posix_fallocate past the free space"] = [errno.errorcode[e.errno]] + state(fd) + [used()]
os.close(fd)
os.unlink("/dev/shm/j")
case("past the free space", "/dev/shm/k", RW, 20 * MiB)
print(json.dumps(out))
"""


def run_in_small_shm(code, env):
    """`code` in a private mount namespace whose /dev/shm is a fresh 16 MiB tmpfs."""
    e = dict(os.environ, **env)
    e.pop("LD_PRELOAD", None)
    e.update(env)
    script = "mount -t tmpfs -o size=16m shmk-test /dev/shm && exec /usr/bin/python3 -c \"$0\""
    return subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", script, code], env=e,
                          capture_output=True, text=True, timeout=60)


def test_ftruncate_is_libcs_but_for_a_growth_past_the_free_space():
    require(PRELOAD.exists(), "the preload library must be built")
    plain = run_in_small_shm(FTRUNCATE, {})
    preload = run_in_small_shm(FTRUNCATE, {"LD_PRELOAD": str(PRELOAD)})
    assert plain.returncode == 0 and not plain.stderr, plain.stderr
    assert preload.returncode == 0, preload.stderr
    plain, preload = json.loads(plain.stdout), json.loads(preload.stdout)
    # libc: a growth allocates nothing, whatever its size (the sparse file that a later touch may SIGBUS)
    assert plain["grow within the free space"] == ["ok", 12 << 20, 0, 0]
    assert plain["past the free space"] == ["ok", 20 << 20, 0, 0]
    # The one divergence: a growth by more than /dev/shm has free is ENOSPC, the file untouched.
    assert preload.pop("past the free space") == ["ENOSPC", 0, 0, 0]
    assert preload.pop("grow, then grow again past it") == ["ok", "ENOSPC", 12 << 20, 0, 0]
    assert plain["grow, then grow again past it"] == ["ok", "ok", 30 << 20, 0, 0]
    del plain["past the free space"], plain["grow, then grow again past it"]
    # Everything else is libc's: errno kept on success, no page allocated by a growth that fits, shrinking,
    # EINVAL for a read-only descriptor and EBADF for O_PATH (not our ENOSPC), EFBIG past RLIMIT_FSIZE,
    # files elsewhere and memfds untouched, posix_fallocate's own ENOSPC.
    assert preload == plain
    assert plain["read-only descriptor, past the free space"][0] == "EINVAL"
    assert plain["O_PATH descriptor, past the free space"][0] == "EBADF"
    assert plain["past RLIMIT_FSIZE and the free space"][0] == "EFBIG"
    assert plain["posix_fallocate past the free space"][0] == "ENOSPC"
    # the growth is what is checked: a sparse file may end up larger than the tmpfs in steps that each fit
    assert plain["grow in steps that each fit"] == ["ok", "ok", 24 << 20, 0, 0]


def test_the_opt_in_reservation_backs_every_page():
    require(PRELOAD.exists(), "the preload library must be built")
    code = "import os\nfd = os.open('/dev/shm/r', os.O_CREAT | os.O_RDWR)\nos.ftruncate(fd, 12 << 20)\n" \
           "st = os.fstat(fd)\nprint(st.st_size, st.st_blocks * 512)\n" \
           "try:\n os.ftruncate(os.open('/dev/shm/s', os.O_CREAT | os.O_RDWR), 8 << 20)\n" \
           "except OSError as e: print(e.errno, os.stat('/dev/shm/s').st_size)"
    for value in ("1", "true", "yes"):
        p = run_in_small_shm(code, {"LD_PRELOAD": str(PRELOAD), "SHMKEEPER_PRELOAD_RESERVE": value})
        assert p.returncode == 0, p.stderr
        # 12 MiB reserved (allocated and charged at ftruncate); 8 more do not fit in the 4 left: ENOSPC, size 0
        assert p.stdout.split() == [str(12 << 20), str(12 << 20), "28", "0"], (value, p.stdout)
        assert "shmkeeper: cannot reserve 8.0 MiB for /dev/shm/s: /dev/shm has 4.0 MiB free of 16.0 MiB" in p.stderr
    for value in ("0", "false", "", "2"):  # anything else: no commit (a sparse growth that fits)
        p = run_in_small_shm(code, {"LD_PRELOAD": str(PRELOAD), "SHMKEEPER_PRELOAD_RESERVE": value})
        assert p.returncode == 0 and p.stdout.split() == [str(12 << 20), "0"], (value, p.stdout, p.stderr)


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))


# In a network namespace of its own (net.unix.max_dgram_qlen is per namespace,
# raised there): a listener thread, and a program that creates 1,500 files in
# a tight loop, then forks a child that creates 300. Every 100 creates the
# program waits until its kept socket has nothing in flight (SIOCOUTQ), so
# the kernel drops none (a socket's send buffer holds ~270 datagrams) and the
# counts are the library's alone.
LIMIT_PROGRAM = r"""
import array, fcntl, os, stat, sys, termios, time
base = sys.argv[1]
def settle():
    for fd in (int(x) for x in os.listdir("/proc/self/fd")):
        if fd >= 64 and stat.S_ISSOCK(os.fstat(fd).st_mode):
            out = array.array("i", [1])
            while fcntl.ioctl(fd, termios.TIOCOUTQ, out) == 0 and out[0] > 0:
                time.sleep(0.001)
def create(tag, i):
    fd = os.open(f"{base}/{tag}{i}", os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    os.close(fd)
    os.unlink(f"{base}/{tag}{i}")
    if i % 100 == 99:
        settle()
t0 = time.monotonic()
for i in range(1500):
    create("p", i)
elapsed = time.monotonic() - t0
pid = os.fork()
if pid == 0:
    for i in range(300):
        create("c", i)
    os._exit(0)
os.waitpid(pid, 0)
print(elapsed, pid, flush=True)
"""
LIMIT = r"""
import os, socket, subprocess, sys, threading
base, sock, program = sys.argv[1], sys.argv[2], sys.argv[3]
with open("/proc/sys/net/unix/max_dgram_qlen", "w") as f:
    f.write("4096")
agent = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
agent.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
agent.bind(sock)
agent.settimeout(0.5)
got, done = {}, threading.Event()
def listen():
    while True:
        try:
            _, anc, _, _ = agent.recvmsg(4096, socket.CMSG_SPACE(12))
        except socket.timeout:
            if done.is_set():
                return
            continue
        pid = next(int.from_bytes(d[:4], sys.byteorder) for l, t, d in anc if t == socket.SCM_CREDENTIALS)
        got[pid] = got.get(pid, 0) + 1
listener = threading.Thread(target=listen)
listener.start()
p = subprocess.run([sys.executable, "-c", program, base], capture_output=True, text=True, timeout=60,
                   env=dict(os.environ, SHMKEEPER_EVENT_SOCKET=sock))
done.set()
listener.join()
assert p.returncode == 0, p.stderr
elapsed, child = p.stdout.split()
print(elapsed, got.get(int(child), 0), sum(v for k, v in got.items() if k != int(child)))
"""


def test_records_over_the_agents_rate_limit_are_not_sent(tmp_path, shm_dir):
    """The library keeps the agent's per-sender limit (sender_limiter.h: a burst of 1000, then 200 a second;
    here 250, a margin for the agent counting at receipt): a program creating 1,500 segments in a tight loop
    sends 1,000 records plus what its elapsed time refills, and no more; a child forked with its parent's
    burst spent still sends its own (all of its 300: the agent counts it apart). The kernel drops nothing
    (a network namespace with a long datagram queue), so the counts are the library's alone."""
    require(os.geteuid() == 0, "needs root (a network namespace)")
    p = subprocess.run(["unshare", "-n", "/usr/bin/python3", "-c", LIMIT, shm_dir, str(tmp_path / "events.sock"),
                        LIMIT_PROGRAM],
                       env=dict(os.environ, LD_PRELOAD=str(PRELOAD)), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    elapsed, child, parent = p.stdout.split()
    assert int(child) == 300, p.stdout  # its own burst: the inherited one was spent
    assert 1000 <= int(parent) <= 1000 + 250 * float(elapsed) + 1, p.stdout
    assert int(parent) < 1500, p.stdout  # the positive control: the loop did outrun the limit
