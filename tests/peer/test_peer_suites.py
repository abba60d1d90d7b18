"""Peer suites as a compatibility gate: test suites nobody here wrote, run in a
real Debian bookworm image (debootstrap, docker import into the private
dockerd with shmkeeper as its default runtime) once with the preload injected
and once with SHMKEEPER_INJECT=0. Any test whose result (passed, skipped,
failed, error) differs fails the gate; a difference is rerun once in both
modes first, so a timing-flaky test cannot fail it alone.

The selection keeps both runs together under ~8 minutes on a 2-core machine:
CPython's test_os, test_posix, test_io, test_fileio, test_mmap, test_fcntl,
test_tempfile, test_subprocess, test_threading and test_signal whole, and the
shared-memory tests of test_multiprocessing_forkserver (the whole module alone
takes several minutes); numpy's test_memmap and lib/test_io without the tests
numpy marks slow (test_large_zip and test_big_arrays write gigabytes: 107 of
their 113 seconds). About 2,200 test cases per mode, ~2 minutes each on an
idle 2-core machine (4.5 under a load of 11).

Run by tests/run.sh's "peer suites" stage; the rootfs tarball is cached by
tests/peer/debian_rootfs.sh outside the repository."""
import os
import socket
import subprocess
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness import require

HERE = Path(__file__).resolve().parent
CPYTHON = ["test_os", "test_posix", "test_io", "test_fileio", "test_mmap", "test_fcntl", "test_tempfile",
           "test_subprocess", "test_threading", "test_signal"]
SHARED_MEMORY = ("test_multiprocessing_forkserver", ["*SharedMemory*", "*shared_memory*"])
NUMPY = ["numpy.core.tests.test_memmap", "numpy.lib.tests.test_io"]
MODES = {"preload": [], "no-inject": ["-e", "SHMKEEPER_INJECT=0"]}


def regrtest(name, modules, match=()):
    """CPython's regression tests `modules` (only the cases matching a pattern
    of `match`, if any), JUnit XML to /out/<name>.xml."""
    m = " ".join(f"-m '{x}'" for x in match)
    return f"python3 -m test -j2 --timeout 300 {m} --junit-xml /out/{name}.xml {' '.join(modules)} > /out/{name}.log 2>&1"


def full_script():
    """The shell run in the container: each suite writes JUnit XML to /out;
    their exit codes do not matter (the results are compared)."""
    return " ; ".join([
        "cd /tmp",
        "python3 -c \"print(open('/proc/self/maps').read().count('libshmkeeper-preload'))\" > /out/maps",
        regrtest("cpython", CPYTHON),
        regrtest("mp", [SHARED_MEMORY[0]], SHARED_MEMORY[1]),
        "python3 -m pytest -q -p no:cacheprovider -m 'not slow' --pyargs " + " ".join(NUMPY) +
        " --junitxml /out/numpy.xml > /out/numpy.log 2>&1",
        "true",
    ])


def outcomes(out: Path):
    """{test id: passed|skipped|failed|error} from every JUnit file in `out`."""
    result = {}
    for xml in sorted(out.glob("*.xml")):
        for case in ET.parse(xml).getroot().iter("testcase"):
            tid = f"{xml.stem}:{case.get('classname') or ''}.{case.get('name') or ''}"
            kinds = {child.tag for child in case}
            result[tid] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                           else "skipped" if "skipped" in kinds else "passed")
    return result


@pytest.fixture(scope="module")
def debian_image(docker_engine):
    built = subprocess.run([HERE / "debian_rootfs.sh"], capture_output=True, text=True, timeout=1200)
    require(built.returncode == 0, "no Debian rootfs (debootstrap needs the Debian mirror): " + built.stderr[-500:])
    tarball = built.stdout.strip().splitlines()[-1]
    tag = "shmk-peer:" + Path(tarball).stem.split("-")[-1]
    if docker_engine.docker("image", "inspect", tag, check=False).returncode != 0:
        docker_engine.docker("import", tarball, tag, timeout=600)
    return tag


class Listener:
    """A stand-in for the agent on the engine's event socket, so the preload's
    event path runs during the suites (the socket it keeps, high and CLOEXEC, the
    datagrams it sends): counts what arrives."""

    def __init__(self, path: Path):
        if path.exists():
            path.unlink()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        os.chmod(path, 0o666)
        self.sock.settimeout(0.2)
        self.received = 0
        self.stopped = False
        self.thread = threading.Thread(target=self.drain, daemon=True)
        self.thread.start()

    def drain(self):
        while not self.stopped:
            try:
                self.sock.recv(65536)
                self.received += 1
            except socket.timeout:
                pass

    def close(self):
        self.stopped = True
        self.thread.join()
        self.sock.close()


@pytest.fixture
def listener(docker_engine):
    lst = Listener(Path(docker_engine.event_socket))
    yield lst
    lst.close()


def run_suites(docker_engine, image, out: Path, mode, script):
    out.mkdir(parents=True)
    p = docker_engine.docker("run", "--rm", "-v", f"{out}:/out", *MODES[mode], image, "sh", "-c", script,
                             check=False, timeout=900)
    assert p.returncode == 0, (mode, p.stdout[-2000:], p.stderr[-2000:])
    return outcomes(out)


def rerun_script(tests):
    """CPython's (and test_multiprocessing's) tests among `tests` once more:
    ids are "<file>:.test.<module>.<Class>.<method>"."""
    ids = [t.split(":", 1)[1].lstrip(".").split(".") for t in tests if not t.startswith("numpy:")]
    modules = sorted({i[1] for i in ids if len(i) > 2})
    names = sorted({i[-1] for i in ids if len(i) > 2})
    return "cd /tmp ; " + regrtest("again", modules, names) + " ; true" if modules else "true"


def test_cpython_and_numpy_give_the_same_results_with_and_without_the_preload(docker_engine, debian_image,
                                                                               listener, tmp_path):
    results, events = {}, {}
    for mode in MODES:
        before = listener.received
        results[mode] = run_suites(docker_engine, debian_image, tmp_path / mode, mode, full_script())
        events[mode] = listener.received - before
    assert events["preload"] >= 10 and events["no-inject"] == 0, events  # the event path ran, in one mode only
    assert (tmp_path / "preload" / "maps").read_text().strip() != "0", "the preload was not in the processes"
    assert (tmp_path / "no-inject" / "maps").read_text().strip() == "0"
    with_preload, without = results["preload"], results["no-inject"]
    for suite, least in [("cpython", 1500), ("mp", 10), ("numpy", 200)]:
        ran = sum(1 for t in without if t.startswith(suite + ":"))
        assert ran >= least, f"only {ran} {suite} tests ran: see {tmp_path}/no-inject/{suite}.log"
    assert with_preload.keys() == without.keys(), sorted(with_preload.keys() ^ without.keys())[:50]
    differ = sorted(t for t in without if with_preload[t] != without[t])
    if differ:  # once more in both modes, only those: a timing-flaky test cannot fail the gate alone
        again = {mode: run_suites(docker_engine, debian_image, tmp_path / f"{mode}-again", mode,
                                  rerun_script(differ)) for mode in MODES}

        def settled(t):
            suffix = t.split(":", 1)[1]
            a, b = (next((v for k, v in again[m].items() if k.endswith(suffix)), None) for m in MODES)
            return a is not None and a == b
        still = [t for t in differ if not settled(t)]
        assert not still, {t: (with_preload[t], without[t]) for t in still}
    counts = {k: sum(1 for v in without.values() if v == k) for k in ("passed", "skipped", "failed", "error")}
    print(f"{len(without)} tests, the same results with and without the preload: {counts}; events: {events}")
