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
WORKLOADS = HERE.parent / "e2e" / "workloads"
sys.path.insert(0, str(HERE))
import sidroot  # noqa: E402
from engines_env import HOOK, IMAGE, RUNTIME, STATIC_CLI, cri, hook_config, shmkeeper  # noqa: E402
from harness import BUILD, CRI_TOOL, PAUSE_IMAGE, require, write_image_archive  # noqa: E402


# trixie's engines (Docker 26.1, containerd 1.7, with NRI) run in CI (CI=true) and on
# demand elsewhere (SHMKEEPER_ENGINES_TRIXIE=1; =0 leaves them out, CI included):
# their root is a second debootstrap (tests/engines/root.sh --suite trixie), cached
# like sid's; with it cached they add about 60 s (docs/engines.md).
TRIXIE = os.environ.get("SHMKEEPER_ENGINES_TRIXIE", "1" if os.environ.get("CI") == "true" else "0") == "1"


def pytest_collection_modifyitems(config, items):
    """Without TRIXIE the trixie tests are not collected (deselected, said in
    pytest's summary), not skipped: a run that forbids skips but was told
    SHMKEEPER_ENGINES_TRIXIE=0 runs the sid engines only."""
    if TRIXIE:
        return
    trixie = [i for i in items if any(f.startswith("trixie_") for f in getattr(i, "fixturenames", ()))]
    if trixie:
        config.hook.pytest_deselected(items=trixie)
        items[:] = [i for i in items if i not in trixie]


def engine_root(suite):
    require(os.geteuid() == 0, "needs root (namespaces, mounts)")
    for b in [STATIC_CLI, RUNTIME, HOOK]:
        require(b.exists(), f"{b} is not built (tests/run.sh build)")
    try:
        return sidroot.sid_root(suite)
    except RuntimeError as e:
        require(False, str(e))


@pytest.fixture(scope="session")
def sid_root():
    return engine_root("sid")


@pytest.fixture(scope="session")
def trixie_root():
    require(TRIXIE, "trixie's engines (Docker 26.1, containerd 1.7) run in CI or with SHMKEEPER_ENGINES_TRIXIE=1")
    return engine_root("trixie")


def namespace(name, root, rootfs):
    """A namespace rooted in `root`; its base holds every engine's files."""
    base = sidroot.short_base(name)
    # the host's /usr and /etc, read-only: the real workloads (test_workloads28.py) run the host's programs
    space = sidroot.SidNamespace(base, root=root, binds=[BUILD, rootfs, WORKLOADS],
                                 host_binds=[("/usr", "/host/usr"), ("/etc", "/host/etc")]).start()
    space.policy = base / "shmkeeper.yaml"
    space.policy.write_text(f"log:\n  path: {base}/runtime.log\n")  # shm.default auto, shm.max host RAM
    space.runtime_log = base / "runtime.log"
    try:
        yield space
    finally:
        space.stop()
        import shutil
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def ns(sid_root, rootfs):
    """The namespace the session's sid engines run in."""
    yield from namespace("engines", sid_root, rootfs)


@pytest.fixture(scope="session")
def trixie_ns(trixie_root, rootfs):
    yield from namespace("trixie", trixie_root, rootfs)


def docker_in(ns, rootfs):
    """The root's dockerd with shmkeeper-runtime installed as its default runtime by
    `shmkeeper install docker` inside the root (daemon.json edit + reload + live check)."""
    engine = sidroot.SidDocker(ns, ns.base / "docker").start()
    try:
        shmkeeper(ns, "install", "docker", "--config", engine.daemon_json, "--set-as-default",
                  "--runtime-path", RUNTIME, "--runtime-config", ns.policy)
        engine.import_rootfs(IMAGE, rootfs)
        yield engine
    finally:
        engine.stop()


@pytest.fixture(scope="session")
def dockerd(ns, rootfs):
    """sid's dockerd (Docker 28)."""
    yield from docker_in(ns, rootfs)


@pytest.fixture(scope="session")
def trixie_dockerd(trixie_ns, rootfs):
    """trixie's dockerd (Docker 26.1)."""
    yield from docker_in(trixie_ns, rootfs)


@pytest.fixture(params=["docker28"] + (["docker26"] if TRIXIE else []))
def any_dockerd(request):
    """Docker 28 (sid), and Docker 26.1 (trixie: in CI, or with SHMKEEPER_ENGINES_TRIXIE=1)."""
    return request.getfixturevalue("dockerd" if request.param == "docker28" else "trixie_dockerd")


@pytest.fixture(scope="session")
def podman(ns, rootfs):
    pm = sidroot.SidPodman(ns, ns.base / "podman")
    pm.config, pm.log = pm.base / "hook.yaml", pm.base / "hook.log"
    hook_config(pm)
    shmkeeper(ns, "install", "podman", "--hooks-dir", pm.hooks, "--hook-path", HOOK, "--hook-config", pm.config)
    pm.import_rootfs(IMAGE, rootfs)
    try:
        yield pm
    finally:
        pm.stop()


@pytest.fixture(scope="session")
def pause_archive(ns, rootfs):
    require(CRI_TOOL.exists(), f"cri-tool not built at {CRI_TOOL}")
    return write_image_archive(rootfs, PAUSE_IMAGE, ["/bin/sleep", "2147483647"], ns.base / "pause.tar")


def start(ns, name, pause_archive, install, version=3):
    policy = ns.base / f"{name}.yaml"
    policy.write_text(f"shm:\n  default: 256Mi\nlog:\n  path: {ns.base}/{name}-runtime.log\n")
    engine = sidroot.SidContainerd(ns, ns.base / name, PAUSE_IMAGE, env={"SHMKEEPER_CONFIG": str(policy)},
                                   version=version)
    engine.write_config()
    if install:
        p = shmkeeper(ns, "install", "containerd", "--config", engine.config, "--set-as-default",
                      "--runtime-path", RUNTIME)
        assert "no running containerd uses it" in p.stdout, p.stdout
    engine.start()
    engine.ctr("images", "import", pause_archive)
    return engine


@pytest.fixture(scope="session")
def containerd(ns, pause_archive):
    engine = start(ns, "ctd", pause_archive, install=True)
    try:
        yield engine
    finally:
        engine.stop(cri=lambda *a: cri(engine, *a, check=False))


@pytest.fixture(scope="session")
def trixie_pause_archive(trixie_ns, rootfs):
    require(CRI_TOOL.exists(), f"cri-tool not built at {CRI_TOOL}")
    return write_image_archive(rootfs, PAUSE_IMAGE, ["/bin/sleep", "2147483647"], trixie_ns.base / "pause.tar")


@pytest.fixture(scope="session")
def trixie_containerd(trixie_ns, trixie_pause_archive):
    """trixie's containerd 1.7, config version 2, shmkeeper installed by the static CLI."""
    engine = start(trixie_ns, "ctd", trixie_pause_archive, install=True, version=2)
    try:
        yield engine
    finally:
        engine.stop(cri=lambda *a: cri(engine, *a, check=False))


@pytest.fixture(params=["containerd21"] + (["containerd17"] if TRIXIE else []))
def any_containerd(request):
    """containerd 2.1 (sid), and 1.7 (trixie: in CI, or with SHMKEEPER_ENGINES_TRIXIE=1)."""
    return request.getfixturevalue("containerd" if request.param == "containerd21" else "trixie_containerd")
