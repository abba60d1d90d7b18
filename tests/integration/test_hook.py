"""shmkeeper-hook as an OCI hook of the real runc (no wrapper in front): the
bundles have the shapes CRI-O and podman give containers (/dev/shm bound from
an engine-made host tmpfs), and the container reports what it sees."""
import json
import os
import socket
import subprocess
import tomllib

import pytest

from harness import BUILD, CLI, df_kib, kib, oci_bundle, run, runc_dirs

MiB = 1 << 20
GiB = 1 << 30
HOOK = BUILD / "plugin" / "shmkeeper-hook"
PROBE = "df -k /dev/shm"


@pytest.fixture
def env(tmp_path, bins, rootfs, root_and_runc):
    e = runc_dirs(tmp_path, "hook.log")
    e.rootfs = rootfs
    e.events = tmp_path / "events.sock"
    e.config.write_text(f"shm:\n  default: 256Mi\nlog:\n  path: {e.log}\nagent:\n  eventSocket: {e.events}\n")
    e.mounts = []
    yield e
    for m in e.mounts:
        subprocess.run(["umount", "-l", str(m)], check=False)


def engine_tmpfs(env, path):
    """The tmpfs an engine makes for a container's /dev/shm (64 MiB)."""
    path.mkdir(parents=True)
    run(["mount", "-t", "tmpfs", "-o", "size=64m,nosuid,nodev,noexec,mode=1777", "shm", path])
    env.mounts.append(path)
    return path


def bundle(env, name, shm, annotations=None, env_vars=(), args=None):
    """A container whose /dev/shm binds `shm`, with the hook at createRuntime and poststop."""
    def edit(spec):
        spec["mounts"] = [m for m in spec["mounts"] if m["destination"] != "/dev/shm"]
        spec["mounts"].append({"destination": "/dev/shm", "type": "bind", "source": str(shm),
                               "options": ["rbind", "nosuid", "noexec", "nodev"]})
        hook = {"path": str(HOOK), "args": ["shmkeeper-hook", "--config", str(env.config)], "timeout": 10}
        spec["hooks"] = {"createRuntime": [hook], "poststop": [hook]}
    return oci_bundle(env.tmp / name, env.rootfs, args or ["sh", "-c", PROBE], edit, env_vars, annotations or {})


def runc_run(env, b, cid):
    return run(["runc", "--root", env.state, "run", "--bundle", b, cid], check=False, timeout=60)


def crio_sandbox(shm, **extra):
    return {"io.kubernetes.cri-o.ContainerType": "sandbox", "io.kubernetes.cri-o.ShmPath": str(shm), **extra}


@pytest.mark.parametrize("annotations,expected", [
    ({"shmkeeper.io/shm-size": "1Gi"}, GiB),
    ({"shm-size.crio.io": "512Mi"}, 512 * MiB),
    ({}, 256 * MiB),
], ids=["shmkeeper-annotation", "crio-annotation", "policy-default"])
def test_hook_sizes_a_crio_sandbox_shm(env, annotations, expected):
    shm = engine_tmpfs(env, env.tmp / "crio" / "shm")
    b = bundle(env, "sb", shm, crio_sandbox(shm, **annotations))
    p = runc_run(env, b, "sandbox-1")
    assert p.returncode == 0, p.stderr
    assert df_kib(p.stdout) == kib(expected)
    assert json.loads((b / "shmkeeper-shm.json").read_text())["by"] == "hook"
    st = os.statvfs(shm)
    assert st.f_blocks * st.f_frsize == expected
    opts = [line.split()[3] for line in open("/proc/self/mounts") if line.split()[1] == str(shm)][0]
    assert {"nosuid", "nodev", "noexec"} <= set(opts.split(","))


def test_hook_sizes_a_podman_container_from_env(env):
    shm = engine_tmpfs(env, env.tmp / "overlay-containers" / "pod-ctr" / "userdata" / "shm")
    p = runc_run(env, bundle(env, "b", shm, env_vars=["SHMKEEPER_SHM_SIZE=96m"]), "pod-ctr")
    assert p.returncode == 0, p.stderr
    assert df_kib(p.stdout) == kib(96 * MiB)


def test_invalid_annotation_fails_create_and_changes_nothing(env):
    shm = engine_tmpfs(env, env.tmp / "crio" / "shm")
    b = bundle(env, "sb", shm, crio_sandbox(shm, **{"shmkeeper.io/shm-size": "lots"}))
    p = runc_run(env, b, "bad-1")
    assert p.returncode != 0
    assert 'shmkeeper-hook: annotation shmkeeper.io/shm-size: invalid size \\"lots\\"' in p.stderr  # runc quotes it
    st = os.statvfs(shm)
    assert st.f_blocks * st.f_frsize == 64 * MiB
    assert run(["runc", "--root", env.state, "list", "-q"], check=False).stdout.split() == []


def test_workload_container_of_a_pod_is_left_to_its_sandbox(env):
    shm = engine_tmpfs(env, env.tmp / "crio" / "shm")
    ann = {"io.kubernetes.cri-o.ContainerType": "container", "shmkeeper.io/shm-size": "1Gi"}
    p = runc_run(env, bundle(env, "w", shm, ann), "work-1")
    assert p.returncode == 0, p.stderr
    assert df_kib(p.stdout) == kib(64 * MiB)
    rec = json.loads(env.log.read_text().splitlines()[-1])
    assert rec["action"] == "skip" and "sized when the pod sandbox was created" in rec["reason"]


def test_poststop_tells_the_agent_and_never_blocks(env):
    shm = engine_tmpfs(env, env.tmp / "crio" / "shm")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(env.events))
    sock.settimeout(5)
    try:
        p = runc_run(env, bundle(env, "sb", shm, crio_sandbox(shm)), "stop-1")
        assert p.returncode == 0, p.stderr
        assert json.loads(sock.recv(4096)) == {"type": "stopped", "id": "stop-1"}
        # Nobody reads the socket now: its queue fills, and hooks still return at once.
        for i in range(300):
            sock_full = subprocess.run([str(HOOK), "--config", str(env.config), "poststop"],
                                       input=json.dumps({"id": f"c{i}", "bundle": "/nonexistent"}),
                                       capture_output=True, text=True, timeout=5)
            assert sock_full.returncode == 0
    finally:
        sock.close()
    env.events.unlink()
    p = runc_run(env, bundle(env, "sb2", shm, crio_sandbox(shm)), "stop-2")  # no agent at all
    assert p.returncode == 0, p.stderr


def test_bad_state_on_stdin_is_one_clear_line(env):
    for state in ["", "[]", '{"id": "x"}', "{" * 10]:
        p = subprocess.run([str(HOOK), "--config", str(env.config)], input=state, capture_output=True, text=True,
                           timeout=5)
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, (state, p.stderr)
        assert p.stderr.startswith("shmkeeper-hook: container state on stdin")


def test_install_crio_and_podman_write_owned_files_and_remove_them(tmp_path):
    hooks, conf = tmp_path / "hooks.d", tmp_path / "crio.conf.d"
    args = ["--hooks-dir", hooks, "--crio-conf-dir", conf]
    run([CLI, "install", "crio", *args, "--hook-path", HOOK, "--runtime-path", "/usr/sbin/runc", "--set-as-default"])
    hook = json.loads((hooks / "shmkeeper.json").read_text())
    assert hook["version"] == "1.0.0" and hook["hook"]["path"] == str(HOOK)
    assert hook["stages"] == ["createRuntime", "poststop"] and hook["when"] == {"always": True}
    dropin = tomllib.loads((conf / "99-shmkeeper.conf").read_text())["crio"]["runtime"]
    assert dropin["default_runtime"] == "shmkeeper"
    assert dropin["runtimes"]["shmkeeper"]["runtime_path"] == "/usr/sbin/runc"
    assert "io.kubernetes.cri-o.ShmSize" in dropin["runtimes"]["shmkeeper"]["allowed_annotations"]
    assert dropin["hooks_dir"] == [str(hooks)]
    run([CLI, "uninstall", "crio", *args])
    assert not hooks.exists() and not conf.exists()  # install created both directories
    hooks.mkdir()
    (hooks / "shmkeeper.json").write_text('{"hook": {"path": "/opt/other-hook"}}')
    p = run([CLI, "install", "podman", "--hooks-dir", hooks, "--hook-path", HOOK], check=False)
    assert p.returncode == 2 and "was not written by shmkeeper" in p.stderr
    assert (hooks / "shmkeeper.json").read_text() == '{"hook": {"path": "/opt/other-hook"}}'


def test_shmkeeper_config_naming_a_missing_file_is_a_warning(env):
    """The hook loads the policy as the runtime does (decide/node_config.cc):
    $SHMKEEPER_CONFIG naming a missing file is one warning line, the defaults
    are used and the container is not refused (test_inject.py: the runtime)."""
    shm = engine_tmpfs(env, env.tmp / "crio" / "shm")
    b = bundle(env, "sb", shm, crio_sandbox(shm))
    missing = env.tmp / "nope.yaml"
    p = subprocess.run([str(HOOK), "createRuntime"], input=json.dumps({"id": "cfg-1", "bundle": str(b)}),
                       capture_output=True, text=True, timeout=10,
                       env=dict(os.environ, SHMKEEPER_CONFIG=str(missing)))
    assert p.returncode == 0, p.stderr
    assert f"shmkeeper-hook: SHMKEEPER_CONFIG names {missing}, which does not exist: using the defaults" in p.stderr, \
        p.stderr


def test_cuda_ipc_in_the_hook_is_the_wrappers_decision_and_never_applied(env):
    """The hook takes the CUDA IPC decision from the same code as the wrapper (decide/cuda_ipc.cc) and
    logs it; it runs after the runtime read the spec, so it never adds a device (test_inject.py: the
    wrapper, which does)."""
    shm = engine_tmpfs(env, env.tmp / "crio" / "shm")
    dev = env.tmp / "dev"
    dev.mkdir()
    for name, minor in [("nvidia0", 0), ("nvidia1", 1), ("nvidiactl", 255)]:
        os.mknod(dev / name, 0o666 | 0o020000, os.makedev(195, minor))
    devices = env.tmp / "proc-devices"
    devices.write_text("Character devices:\n195 nvidia-frontend\n")

    def decide(name, annotations, env_vars=()):
        b = bundle(env, name, shm, {**crio_sandbox(shm), **annotations}, env_vars)
        spec = json.loads((b / "config.json").read_text())
        spec["linux"].setdefault("devices", []).append(
            {"path": "/dev/nvidia1", "type": "c", "major": 195, "minor": 1, "fileMode": 0o666})
        (b / "config.json").write_text(json.dumps(spec))
        before = (b / "config.json").read_text()
        p = subprocess.run([str(HOOK), "--config", str(env.config), "createRuntime"],
                           input=json.dumps({"id": name, "bundle": str(b)}), capture_output=True, text=True,
                           timeout=10)
        assert p.returncode == 0, p.stderr
        assert (b / "config.json").read_text() == before  # the hook never edits the spec
        return [json.loads(x) for x in env.log.read_text().splitlines() if '"shm decision"' in x][-1]

    ask = {"shmkeeper.io/cuda-ipc": "true"}
    assert decide("env", {}, ["SHMKEEPER_CUDA_IPC=1"])["cuda"] == "cuda-ipc: env ignored"
    assert decide("off", ask)["cuda"] == "cuda-ipc: off on this node"
    with open(env.config, "a") as f:
        f.write(f"cuda:\n  ipc: allocated\n  devDir: {dev}\n  procDevices: {devices}\n")
    d = decide("allowed", ask)
    assert d["cuda"] == "cuda-ipc: not applied by the hook", d
    assert any("only shmkeeper-runtime can add /dev/nvidiactl and RLIMIT_MEMLOCK" in n for n in d["notes"]), d
