"""shmkeeper-runtime in front of the real runc, on temporary bundles with a
busybox rootfs; the container itself reports what /dev/shm is."""
import contextlib
import json
from pathlib import Path

import pytest

from harness import df_kib, kib, oci_bundle, run, runc_dirs, shm_mounts_under, with_private_var_log

MiB = 1 << 20
GiB = 1 << 30
PROBE = "df -k /dev/shm; grep ' /dev/shm ' /proc/mounts"


@pytest.fixture
def env(tmp_path, bins, rootfs, root_and_runc):
    e = runc_dirs(tmp_path, "runtime.log")
    e.config.write_text(f"shm:\n  default: 256Mi\n  max: 2Gi\nlog:\n  path: {e.log}\n")
    e.rootfs = rootfs
    return e


def make_bundle(env, name, edit=None, args=None):
    return oci_bundle(env.tmp / name, env.rootfs, args or ["sh", "-c", PROBE], edit)


def wrapper_run(env, bundle, cid, *extra, check=False, var_log=None):
    """The wrapper's `run`; with `var_log`, in a private mount namespace whose /var/log is that directory
    (harness.with_private_var_log: a config that names no log writes the default path, the test's)."""
    cmd = [str(pytest.importorskip("harness").RUNTIME), "--config", env.config, "--root", env.state,
           *extra, "run", "--bundle", bundle, cid]
    p = run(with_private_var_log(cmd, var_log) if var_log else cmd, check=check, timeout=60)
    return p


def default_log_lines(var_log):
    """The decision lines the wrapper wrote to its default log path, inside with_private_var_log."""
    path = var_log / "shmkeeper" / "runtime.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def runc_list(env):
    p = run(["runc", "--root", env.state, "list", "-q"], check=False)
    return p.stdout.split()


def test_no_request_gets_policy_default(env):
    p = wrapper_run(env, make_bundle(env, "b"), "c-default")
    assert p.returncode == 0, p.stderr
    assert df_kib(p.stdout) == kib(256 * MiB)
    assert "nosuid,nodev,noexec" in p.stdout
    rec = [json.loads(line) for line in env.log.read_text().splitlines()][-1]
    assert rec["container"] == "c-default"
    assert rec["source"] == "policy" and rec["action"] == "resize"
    assert rec["old_bytes"] == 64 * MiB and rec["new_bytes"] == 256 * MiB


def test_env_request(env):
    def edit(s):
        s["process"]["env"].append("SHMKEEPER_SHM_SIZE=96m")
    p = wrapper_run(env, make_bundle(env, "b", edit), "c-env")
    assert p.returncode == 0, p.stderr
    assert df_kib(p.stdout) == kib(96 * MiB)


def test_annotation_beats_env(env):
    def edit(s):
        s["process"]["env"].append("SHMKEEPER_SHM_SIZE=96m")
        s["annotations"] = {"shmkeeper.io/shm-size": "1Gi"}
    p = wrapper_run(env, make_bundle(env, "b", edit), "c-ann")
    assert p.returncode == 0, p.stderr
    assert df_kib(p.stdout) == kib(GiB)


@pytest.mark.parametrize("value,expect", [
    ("lots", 'annotation shmkeeper.io/shm-size: invalid size "lots"'),
    ("2Gix", 'invalid size "2Gix": unknown unit "Gix"'),
    ("-1", 'invalid size "-1": negative'),
    ("3Gi", "over the node's shm.max 2GiB (shm.overMax: reject)"),
])
def test_bad_request_fails_cleanly(env, value, expect):
    def edit(s):
        s["annotations"] = {"shmkeeper.io/shm-size": value}
    bundle = make_bundle(env, "b", edit)
    before = (bundle / "config.json").read_bytes()
    engine_log = env.tmp / "engine-log.json"
    p = wrapper_run(env, bundle, "c-bad", "--log", engine_log, "--log-format", "json")
    assert p.returncode != 0
    assert expect in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    # runc never ran: no container, no leftover mounts, spec untouched.
    assert runc_list(env) == []
    assert shm_mounts_under(str(env.tmp)) == []
    assert (bundle / "config.json").read_bytes() == before
    # What containerd's shim shows the user: the last error in --log.
    last = json.loads(engine_log.read_text().splitlines()[-1])
    assert last["level"] == "error" and expect in last["msg"]


def test_over_max_clamped(env):
    env.config.write_text(f"shm:\n  max: 128Mi\n  overMax: clamp\nlog:\n  path: {env.log}\n")

    def edit(s):
        s["annotations"] = {"shmkeeper.io/shm-size": "1Gi"}
    p = wrapper_run(env, make_bundle(env, "b", edit), "c-clamp")
    assert p.returncode == 0, p.stderr
    assert df_kib(p.stdout) == kib(128 * MiB)


@contextlib.contextmanager
def engine_tmpfs(env, owner, options):
    """A host tmpfs where Docker keeps a --ipc=shareable container's shm:
    <root>/containers/<owner>/mounts/shm. Always unmounted afterwards."""
    shm = env.tmp / "containers" / owner / "mounts" / "shm"
    shm.mkdir(parents=True)
    run(["mount", "-t", "tmpfs", "-o", options, "shm", shm])
    try:
        yield shm
    finally:
        run(["umount", shm], check=False)


def bind_shm(shm, *env_vars):
    """A spec edit: /dev/shm becomes a bind mount of `shm`."""
    def edit(s):
        s["mounts"] = [m for m in s["mounts"] if m["destination"] != "/dev/shm"]
        s["mounts"].append({"destination": "/dev/shm", "type": "bind", "source": str(shm),
                            "options": ["rbind", "rprivate"]})
        s["process"]["env"].extend(env_vars)
    return edit


def test_host_tmpfs_bind_is_remounted(env):
    """The Docker --ipc=shareable shape: a host tmpfs the engine made for this
    container, bind-mounted at /dev/shm."""
    cid = "c-shareable"
    with engine_tmpfs(env, cid, "nosuid,nodev,noexec,mode=1777,size=64m") as shm:
        p = wrapper_run(env, make_bundle(env, "b", bind_shm(shm, "SHMKEEPER_SHM_SIZE=300m")), cid)
        assert p.returncode == 0, p.stderr
        assert df_kib(p.stdout) == kib(300 * MiB)
        line = [m for m in Path("/proc/self/mountinfo").read_text().splitlines() if f" {shm} " in m][0]
        for flag in ("nosuid", "nodev", "noexec"):
            assert flag in line
        assert shm.stat().st_mode & 0o7777 == 0o1777


def test_other_containers_shm_is_left_alone(env):
    with engine_tmpfs(env, "someone-else", "size=64m") as shm:
        p = wrapper_run(env, make_bundle(env, "b", bind_shm(shm)), "c-joiner")
        assert p.returncode == 0, p.stderr
        assert df_kib(p.stdout) == kib(64 * MiB)
        rec = json.loads(env.log.read_text().splitlines()[-1])
        assert rec["action"] == "skip" and "does not own" in rec["reason"]


def test_broken_config_passes_through_untouched(env):
    env.config.write_text("shm:\n  defualt: 1Gi\n")
    engine_log = env.tmp / "engine-log.json"
    var_log = env.tmp / "var-log"
    p = wrapper_run(env, make_bundle(env, "b"), "c-passthrough", "--log", engine_log, "--log-format", "json",
                    var_log=var_log)
    assert p.returncode == 0, p.stderr
    assert df_kib(p.stdout) == kib(64 * MiB)
    assert "unknown key 'shm.defualt'" in p.stderr and "passing the spec through untouched" in p.stderr
    assert f"{env.config}:2:3:" in p.stderr  # file:line:col of the typo
    # The engine's log (what `docker`/containerd show) says it as a warning; the container ran.
    (warning,) = [json.loads(l) for l in engine_log.read_text().splitlines() if "shm.defualt" in l]
    assert warning["level"] == "warning" and "passing the spec through untouched" in warning["msg"]
    # A config that does not parse names no log: the decision goes to the default path (here the test's).
    assert [(r["container"], r["action"]) for r in default_log_lines(var_log)] == [("c-passthrough", "passthrough")]


def test_missing_real_runtime_is_an_error(env):
    env.config.write_text(f"runtime:\n  path: /nonexistent/runc\nlog:\n  path: {env.log}\n")
    var_log = env.tmp / "var-log"
    p = wrapper_run(env, make_bundle(env, "b"), "c-nort", var_log=var_log)
    assert p.returncode != 0
    assert "/nonexistent/runc" in p.stderr
    (rec,) = [json.loads(line) for line in env.log.read_text().splitlines()]  # the log the config names
    assert rec["container"] == "c-nort" and rec["action"] == "refuse" and "/nonexistent/runc" in rec["error"], rec
    assert default_log_lines(var_log) == []


def test_other_subcommands_pass_through(env, bins):
    p = run([bins.RUNTIME, "--config", env.config, "--root", env.state, "list"], check=False)
    assert p.returncode == 0 and "ID" in p.stdout
    p = run([bins.RUNTIME, "--version"], check=False)
    assert p.stdout.splitlines()[0].startswith("shmkeeper-runtime ") and "version" not in p.stdout.splitlines()[0]
    assert "runc version" in p.stdout  # then the real runtime's own lines
