"""podman 4.3 (Debian) with real runc and crun, configured from the test
harness with a private storage root, runroot, tmpdir, hooks dir and
containers.conf: shmkeeper-hook installed by `shmkeeper install podman`, the
wrapper in front of crun, and the agent naming podman containers and pods."""
import json
import shutil
from pathlib import Path

import pytest

from harness import (BUILD, CLI, SHMGROW, AgentProcess, PrivatePodman, df_kib, glibc_rootfs, kib, require, run,
                     shm_mounts_under, wait_for)

MiB = 1 << 20
HOOK = BUILD / "plugin" / "shmkeeper-hook"
PODMAN_DEFAULT_KIB = 64000  # containers.conf shm_size "65536k" = 65,536,000 bytes
POLICY = 256 * MiB
IMAGE = "localhost/shmk-busybox:test"
PROBE = ["df", "-k", "/dev/shm"]


def hook_config(path, log, default="256Mi"):
    policy = f"  default: {default}\n" if default else ""
    path.write_text(f"shm:\n{policy}  max: 1Gi\nlog:\n  path: {log}\n")


@pytest.fixture(scope="module", params=["runc", "crun"])
def engine(request, tmp_path_factory, bins, rootfs, root_and_runc):
    """A private podman whose default runtime is runc or crun, with the hook installed."""
    for tool in ["podman", request.param, "catatonit", "unshare", "nsenter"]:
        require(shutil.which(tool) is not None, f"{tool} is not installed (apt-get install podman crun catatonit)")
    base = tmp_path_factory.mktemp("podman-" + request.param)
    pm = PrivatePodman(base, runtime=request.param)
    pm.config, pm.log = base / "shmkeeper.yaml", base / "hook.log"
    hook_config(pm.config, pm.log)
    run([CLI, "install", "podman", "--hooks-dir", pm.hooks, "--hook-path", HOOK, "--hook-config", pm.config])
    pm.import_rootfs(IMAGE, rootfs)
    try:
        yield pm
    finally:
        pm.stop()


def shm_kib(pm, *args):
    p = pm.podman("run", "--rm", *args, IMAGE, *PROBE, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    return df_kib(p.stdout)


def test_plain_container_and_pod_get_the_node_policy(engine):
    assert shm_kib(engine) == kib(POLICY)
    engine.podman("pod", "create", "--name", "plain-pod")
    try:
        assert shm_kib(engine, "--pod", "plain-pod") == kib(POLICY)
    finally:
        engine.podman("pod", "rm", "-f", "plain-pod")


@pytest.mark.parametrize("args,expected", [
    (["--annotation", "shmkeeper.io/shm-size=300m"], 300 * MiB),
    (["--annotation", "shm-size.crio.io=200Mi"], 200 * MiB),
    (["--env", "SHMKEEPER_SHM_SIZE=150m"], 150 * MiB),
    (["--shm-size", "100m"], 100 * MiB),
    (["--shm-size", "64m"], 64 * MiB),  # a user's size equal to Docker's default is still the user's
], ids=["annotation", "crio-annotation", "env", "shm-size", "shm-size-64m"])
def test_what_the_user_asked_for(engine, args, expected):
    assert shm_kib(engine, *args) == kib(expected)


def test_pod_create_shm_size_and_members(engine):
    engine.podman("pod", "create", "--name", "sized-pod", "--shm-size", "120m")
    try:
        # The member's own annotation does not resize the pod's tmpfs: the infra container owns it.
        assert shm_kib(engine, "--pod", "sized-pod", "--annotation", "shmkeeper.io/shm-size=2Gi") == kib(120 * MiB)
    finally:
        engine.podman("pod", "rm", "-f", "sized-pod")


def test_memory_limit_with_policy_auto(engine):
    hook_config(engine.config, engine.log, default=None)
    try:
        assert shm_kib(engine, "-m", "300m") == kib(300 * MiB)
    finally:
        hook_config(engine.config, engine.log)


@pytest.mark.parametrize("args,reason", [
    (["--annotation", "shmkeeper.io/shm-size=lots"], 'annotation shmkeeper.io/shm-size: invalid size "lots"'),
    (["--env", "SHMKEEPER_SHM_SIZE=2Gi"], 'shm size env SHMKEEPER_SHM_SIZE="2Gi" (2GiB) is over the node\'s shm.max 1GiB'),
], ids=["unparseable", "over-max"])
def test_a_refusal_is_printed_by_podman_and_leaves_nothing(engine, args, reason):
    p = engine.shell('"$@"; rc=$?; grep -c "userdata/shm" /proc/self/mountinfo; exit $rc',
                     "run", "--rm", *args, IMAGE, *PROBE)
    assert p.returncode != 0
    assert "shmkeeper-hook: " + reason in p.stderr.replace('\\"', '"'), p.stderr
    assert p.stdout.strip().splitlines()[-1] == "0", p.stdout  # no shm tmpfs left in podman's mount namespace
    assert engine.podman("ps", "-a", "-q").stdout.strip() == ""
    assert shm_mounts_under(str(engine.base)) == []


def test_ipc_host_none_and_another_container(engine):
    host = engine.podman("run", "--rm", "--ipc=host", IMAGE, *PROBE).stdout
    assert df_kib(host) != kib(POLICY)
    none = engine.podman("run", "--rm", "--ipc=none", IMAGE, "sh", "-c", "df -k | grep -c /dev/shm || true").stdout
    assert none.strip() == "0"
    engine.podman("run", "-d", "--name", "ipc-owner", "--ipc=shareable", "--shm-size", "90m", IMAGE, "sleep", "60")
    try:
        # The joining container's own annotation cannot resize the owner's tmpfs.
        assert shm_kib(engine, "--ipc=container:ipc-owner", "--annotation", "shmkeeper.io/shm-size=1Gi") == kib(90 * MiB)
    finally:
        engine.podman("rm", "-f", "-t", "0", "ipc-owner")
    skips = [json.loads(line) for line in engine.log.read_text().splitlines() if '"skip"' in line]
    assert any("host IPC namespace" in r.get("reason", "") for r in skips)


def test_agent_names_podman_containers_and_pods(engine, tmp_path):
    script = "dd if=/dev/zero of=/dev/shm/{name} bs=1M count={mib} 2>/dev/null && exec sleep 120"
    engine.podman("run", "-d", "--name", "sk-writer", IMAGE, "sh", "-c", script.format(name="w", mib=50))
    engine.podman("pod", "create", "--name", "sk-pod", "--shm-size", "200m")
    engine.podman("run", "-d", "--pod", "sk-pod", "--name", "sk-a", IMAGE, "sh", "-c", script.format(name="a", mib=30))
    engine.podman("run", "-d", "--pod", "sk-pod", "--name", "sk-b", IMAGE, "sh", "-c", script.format(name="b", mib=10))
    agent = AgentProcess(tmp_path, f"""
agent:
  socket: {tmp_path}/agent.sock
  eventSocket: {tmp_path}/events.sock
  metricsAddress: 127.0.0.1:0
  scanInterval: 1s
  runtimeRoots: [/run/{engine.runtime}]
  dockerSocket: ""
""").start()
    try:
        def rows():
            pods = agent.json("pods").get("pods", [])
            by_name = {p["name"]: p for p in pods}
            return by_name if {"sk-writer", "sk-pod"} <= by_name.keys() and \
                by_name["sk-pod"]["shm"].get("usedBytes", "0") == str(40 * MiB) else None
        pods = wait_for(rows, timeout=20, what="sk-writer and sk-pod with 40 MiB")
        writer, pod = pods["sk-writer"], pods["sk-pod"]
        assert writer["kind"] == "POD_KIND_CONTAINER" and int(writer["shm"]["usedBytes"]) == 50 * MiB
        assert int(writer["shm"]["requestedBytes"]) == POLICY and writer["shm"]["requestedSource"] == "policy"
        assert pod["kind"] == "POD_KIND_PODMAN" and len(pod["containers"]) == 3
        assert {c.get("name") for c in pod["containers"]} >= {"sk-a", "sk-b"}
        assert int(pod["shm"]["sizeBytes"]) == 200 * MiB
        assert int(pod["shm"]["requestedBytes"]) == 200 * MiB and pod["shm"]["requestedSource"] == "engine"
        table = agent.cli("pods").stdout
        assert sum(line.split()[1] == "sk-pod" for line in table.splitlines()[1:]) == 1, table
        # The root holds runc's <id>/state.json or crun's <id>/status: no start-up warning that it holds none.
        assert "holds no container state" not in agent.log.read_text(), agent.log.read_text()[-2000:]
    finally:
        agent.stop()
        engine.podman("pod", "rm", "-f", "sk-pod")
        engine.podman("rm", "-f", "-t", "0", "sk-writer")


def test_uninstall_removes_what_install_created(engine, tmp_path):
    hooks = tmp_path / "new" / "oci" / "hooks.d"
    before = sorted(p.name for p in tmp_path.iterdir())
    run([CLI, "install", "podman", "--hooks-dir", hooks, "--hook-path", HOOK, "--hook-config", engine.config])
    assert (hooks / "shmkeeper.json").exists()
    run([CLI, "uninstall", "podman", "--hooks-dir", hooks])
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    # A directory that was there before install stays after uninstall.
    (tmp_path / "kept").mkdir()
    run([CLI, "install", "podman", "--hooks-dir", tmp_path / "kept", "--hook-path", HOOK])
    run([CLI, "uninstall", "podman", "--hooks-dir", tmp_path / "kept"])
    assert (tmp_path / "kept").is_dir() and list((tmp_path / "kept").iterdir()) == []


def test_uninstall_restores_the_engine_default(engine):
    run([CLI, "uninstall", "podman", "--hooks-dir", engine.hooks])
    try:
        assert shm_kib(engine) == PODMAN_DEFAULT_KIB
    finally:
        run([CLI, "install", "podman", "--hooks-dir", engine.hooks, "--hook-path", HOOK, "--hook-config",
             engine.config])


@pytest.fixture(scope="module")
def wrapped_crun(tmp_path_factory, bins, root_and_runc):
    """podman whose runtime is shmkeeper-runtime in front of crun; its config
    reaches the wrapper only as --runtime-flag, so podman's cleanup (which
    does not carry it) must still reach crun."""
    for tool in ["podman", "crun", "catatonit"]:
        require(shutil.which(tool) is not None, f"{tool} is not installed")
    require(SHMGROW.exists(), "shmgrow is not built")
    base = tmp_path_factory.mktemp("podman-wrapper")
    pm = PrivatePodman(base, runtime="shmkeeper", wrapped="crun")
    pm.config, pm.log = base / "runtime.yaml", base / "runtime.log"
    pm.config.write_text(f"runtime:\n  path: {shutil.which('crun')}\nshm:\n  default: 256Mi\nlog:\n  path: {pm.log}\n")
    pm.import_rootfs("localhost/shmk-glibc:test", glibc_rootfs(base / "glibc-rootfs"))
    try:
        yield pm
    finally:
        pm.stop()


def wrapped_run(pm, *args):
    return pm.podman("--runtime-flag", f"config={pm.config}", "run", "--rm", *args, check=False)


def test_wrapper_in_front_of_crun_sizes_and_injects_the_preload(wrapped_crun):
    pm = wrapped_crun
    p = wrapped_run(pm, "localhost/shmk-glibc:test", "shmgrow", "env")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "/run/shmkeeper/libshmkeeper-preload.so"
    p = wrapped_run(pm, "--env", "SHMKEEPER_SHM_SIZE=32m", "localhost/shmk-glibc:test", "shmgrow", "create", "seg", "64")
    assert p.returncode == 28, (p.returncode, p.stdout, p.stderr)
    assert "shmkeeper: cannot fit 64.0 MiB for /dev/shm/seg" in p.stderr
    p = wrapped_run(pm, "localhost/shmk-glibc:test", "df", "-k", "/dev/shm")
    assert df_kib(p.stdout) == kib(POLICY)
    decisions = [json.loads(line) for line in pm.log.read_text().splitlines() if '"shm decision"' in line]
    assert decisions[-1]["source"] == "policy" and decisions[-1]["preload"] == "preload"
    assert pm.podman("ps", "-a", "-q").stdout.strip() == ""


def test_calls_without_the_runtime_flag_reach_crun(wrapped_crun):
    """podman's cleanup and a later `podman rm` call the wrapper without
    --runtime-flag (so without its config): kill and delete must still reach
    crun, which holds the container, not runc."""
    pm = wrapped_crun
    cid = pm.podman("--runtime-flag", f"config={pm.config}", "run", "-d", "localhost/shmk-glibc:test",
                    "sleep", "60").stdout.strip()
    assert (Path("/run/crun") / cid / "status").exists()
    p = pm.podman("rm", "-f", "-t", "0", cid, check=False)
    assert p.returncode == 0, p.stderr
    assert not (Path("/run/crun") / cid).exists()
    assert pm.podman("ps", "-a", "-q").stdout.strip() == ""


def test_wrapper_refusal_is_printed_by_podman(wrapped_crun):
    p = wrapped_run(wrapped_crun, "--annotation", "shmkeeper.io/shm-size=lots", "localhost/shmk-glibc:test", "true")
    assert p.returncode != 0
    assert 'annotation shmkeeper.io/shm-size: invalid size "lots"' in p.stderr.replace('\\"', '"'), p.stderr
    assert wrapped_crun.podman("ps", "-a", "-q").stdout.strip() == ""
