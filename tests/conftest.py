import os
import shutil
import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "lib"))
import harness  # noqa: E402

# The backstop against a hang the tests' own deadlines missed: a test (its fixtures' setup and teardown
# included) running longer than this fails with the traceback of where it was, and the run goes on.
# SIGALRM in the main thread: a blocking call there (a read, a wait) is interrupted by the exception.
# SHMKEEPER_TEST_TIMEOUT seconds (0: off); the default covers the slowest legitimate setup (tests/engines
# builds its sid root in 9-12 minutes the first time).
TEST_TIMEOUT = int(os.environ.get("SHMKEEPER_TEST_TIMEOUT", "1800"))


class RanOverTimeout(Exception):
    pass


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if TEST_TIMEOUT <= 0:
        yield
        return

    def expired(signum, frame):
        raise RanOverTimeout(f"{item.nodeid} ran over SHMKEEPER_TEST_TIMEOUT={TEST_TIMEOUT} s")
    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(TEST_TIMEOUT)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.fixture(scope="session")
def bins():
    harness.require(harness.RUNTIME.exists() and harness.CLI.exists(),
                    f"shmkeeper binaries not built in {harness.BUILD}")
    return harness


@pytest.fixture(scope="session")
def rootfs(tmp_path_factory):
    harness.require(shutil.which("busybox") is not None, "busybox-static is not installed")
    return harness.make_busybox_rootfs(tmp_path_factory.mktemp("rootfs"))


@pytest.fixture(scope="session")
def root_and_runc():
    harness.require(os.geteuid() == 0, "needs root (mounts, runc)")
    harness.require(shutil.which("runc") is not None, "runc is not installed")


@pytest.fixture(scope="session")
def docker_engine(tmp_path_factory, bins, rootfs, root_and_runc):
    """A private dockerd with shmkeeper installed as its default runtime
    through the CLI (daemon.json edit + SIGHUP reload)."""
    harness.require(shutil.which("dockerd") is not None, "dockerd (docker.io) is not installed")
    base = tmp_path_factory.mktemp("docker")
    cfg = base / "shmkeeper.yaml"
    (base / "events").mkdir()
    cfg.write_text(f"log:\n  path: {base}/runtime.log\nagent:\n  eventSocket: {base}/events/events.sock\n")
    engine = harness.PrivateDocker(base).start()
    try:
        harness.run([harness.CLI, "install", "docker", "--config", engine.daemon_json, "--set-as-default",
                     "--runtime-path", harness.RUNTIME, "--runtime-config", cfg])
        engine.wait_default_runtime("shmkeeper")
        engine.import_busybox("shmk-busybox:test", rootfs)
        engine.runtime_log = base / "runtime.log"
        engine.event_socket = base / "events" / "events.sock"
        yield engine
    finally:
        engine.stop()
