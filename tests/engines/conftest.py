"""Fixtures of the `engines` stage: one private namespace rooted in the cached
Debian sid root (tests/engines/sidroot.py) per session, and in it sid's
dockerd, containerd and podman, each configured by the static CLI
(`shmkeeper-static install ...`) run inside that root, as a user of that
release would."""
import os
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import sidroot  # noqa: E402
from harness import BUILD, require  # noqa: E402

STATIC_CLI = BUILD / "plugin" / "shmkeeper-static"
RUNTIME = BUILD / "plugin" / "shmkeeper-runtime"
HOOK = BUILD / "plugin" / "shmkeeper-hook"
IMAGE = "localhost/shmk-busybox:engines"
MiB = 1 << 20
POLICY_DEFAULT = 256 * MiB


@pytest.fixture(scope="session")
def sid_root():
    require(os.geteuid() == 0, "needs root (namespaces, mounts)")
    for b in [STATIC_CLI, RUNTIME, HOOK]:
        require(b.exists(), f"{b} is not built (tests/run.sh build)")
    try:
        return sidroot.sid_root()
    except RuntimeError as e:
        require(False, str(e))


@pytest.fixture(scope="session")
def ns(sid_root, rootfs):
    """The namespace the session's engines run in; its base holds every engine's files."""
    base = sidroot.short_base("engines")
    space = sidroot.SidNamespace(base, root=sid_root, binds=[BUILD, rootfs]).start()
    space.policy = base / "shmkeeper.yaml"
    space.policy.write_text(f"shm:\n  default: 256Mi\n  max: 4Gi\nlog:\n  path: {base}/runtime.log\n")
    space.runtime_log = base / "runtime.log"
    try:
        yield space
    finally:
        space.stop()
        import shutil
        shutil.rmtree(base, ignore_errors=True)


def shmkeeper(ns, *args, check=True):
    """The static CLI inside the sid root."""
    return ns.run([STATIC_CLI, *args], check=check)


@pytest.fixture(scope="session")
def dockerd(ns, rootfs):
    """sid's dockerd with shmkeeper-runtime installed as its default runtime by
    `shmkeeper install docker` inside the root (daemon.json edit + reload + live check)."""
    engine = sidroot.SidDocker(ns, ns.base / "docker").start()
    try:
        shmkeeper(ns, "install", "docker", "--config", engine.daemon_json, "--set-as-default",
                  "--runtime-path", RUNTIME, "--runtime-config", ns.policy)
        engine.import_rootfs(IMAGE, rootfs)
        yield engine
    finally:
        engine.stop()
