"""The issue's reproduction: a PyTorch DataLoader dies with "Bus error" under
plain runc's 64 MiB /dev/shm and succeeds under shmkeeper with no flags.
Host /usr, /lib, /lib64 and /etc are bind-mounted read-only into the busybox
image so the container runs Debian's python3-torch."""
import subprocess
from pathlib import Path

import pytest

from harness import require

WORKLOADS = Path(__file__).parent / "workloads"


@pytest.fixture(scope="module")
def torch_available():
    p = subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True)
    require(p.returncode == 0, "python3-torch is not installed for /usr/bin/python3")


def dataloader(engine, *flags):
    mounts = []
    for d in ["/usr", "/lib", "/lib64", "/etc"]:
        if Path(d).exists():
            mounts += ["-v", f"{d}:{d}:ro"]
    return engine.docker("run", "--rm", *flags, *mounts, "-v", f"{WORKLOADS}:/w:ro",
                         "-e", "OMP_NUM_THREADS=1", "shmk-busybox:test",
                         "/usr/bin/python3", "/w/dataloader.py", check=False, timeout=600)


def test_bus_error_under_plain_runc(docker_engine, torch_available):
    p = dataloader(docker_engine, "--runtime", "runc")
    assert p.returncode != 0
    assert "Bus error" in p.stderr or "bus error" in p.stderr, p.stderr[-2000:]


def test_succeeds_under_shmkeeper_with_no_flags(docker_engine, torch_available):
    p = dataloader(docker_engine)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "DATALOADER OK 256 samples" in p.stdout
