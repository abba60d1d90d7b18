"""podman 5 (sid) with crun 1.28 and with runc 1.3, shmkeeper-hook installed
by the static CLI inside the sid root (`shmkeeper install podman`): what
/dev/shm is inside the container for each way of asking, and a refusal that
leaves no container and no shm mount."""
import pytest

from engines_env import HOOK, IMAGE, MiB, hook_config, shmkeeper
from harness import df_kib, kib

POLICY = 256 * MiB
PROBE = ["df", "-k", "/dev/shm"]
PODMAN_DEFAULT_KIB = 64000  # podman's own shm_size "65536k"


@pytest.fixture(params=["crun", "runc"])
def runtime(request):
    return request.param


def shm(pm, runtime, *args):
    p = pm.podman("--runtime", runtime, "run", "--rm", *args, IMAGE, *PROBE, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    return df_kib(p.stdout)


def test_the_engines_are_podman_5_crun_1_28_and_runc_1_3(podman, runtime):
    assert podman.podman("version", "--format", "{{.Client.Version}}").stdout.startswith("5.")
    info = podman.podman("--runtime", runtime, "info", "--format",
                         "{{.Host.OCIRuntime.Name}} {{.Host.OCIRuntime.Version}}")
    name, version = info.stdout.split(" ", 1)
    assert name == runtime
    assert ("crun version 1.28" if runtime == "crun" else "runc version 1.3.") in version, version


@pytest.mark.parametrize("args,expected", [
    ([], POLICY),
    (["--annotation", "shmkeeper.io/shm-size=300m"], 300 * MiB),
    (["--env", "SHMKEEPER_SHM_SIZE=150m"], 150 * MiB),
    (["--shm-size", "100m"], 100 * MiB),
], ids=["policy", "annotation", "env", "shm-size"])
def test_what_the_user_asked_for(podman, runtime, args, expected):
    assert shm(podman, runtime, *args) == kib(expected)


def test_memory_limit_with_policy_auto(podman, runtime):
    hook_config(podman, default=None)
    try:
        assert shm(podman, runtime, "-m", "300m") == kib(300 * MiB)
    finally:
        hook_config(podman)


def test_a_refusal_is_one_line_and_leaves_nothing(podman, runtime, ns):
    p = podman.podman("--runtime", runtime, "run", "--rm", "--annotation", "shmkeeper.io/shm-size=lots", IMAGE,
                      *PROBE, check=False)
    assert p.returncode != 0
    lines = [line for line in p.stderr.splitlines() if "shmkeeper-hook: " in line]
    assert len(lines) == 1 and "invalid size" in lines[0] and "lots" in lines[0], p.stderr
    print(f"podman 5 + {runtime} refusal:", lines[0])
    assert podman.podman("ps", "-a", "-q").stdout.strip() == ""
    left = ns.run(["grep", "-c", "userdata/shm", "/proc/self/mountinfo"], check=False).stdout.strip()
    assert left == "0", left  # no shm tmpfs left in the namespace


def test_uninstall_restores_the_engine_default(podman, ns):
    shmkeeper(ns, "uninstall", "podman", "--hooks-dir", podman.hooks)
    try:
        assert not (podman.hooks / "shmkeeper.json").exists()
        assert shm(podman, "crun") == PODMAN_DEFAULT_KIB
    finally:
        shmkeeper(ns, "install", "podman", "--hooks-dir", podman.hooks, "--hook-path", HOOK, "--hook-config",
                  podman.config)
    assert shm(podman, "crun") == kib(POLICY)


def test_the_wrapper_in_front_of_each_runtime(podman, runtime):
    """podman --runtime shmkeeper-runtime (hooks off), its config naming crun
    1.28 or runc 1.3 as the real runtime: the wrapper sizes, and podman's
    cleanup (which calls the wrapper without the config) still reaches that
    runtime: nothing is left."""
    from engines_env import RUNTIME
    cfg = podman.base / f"wrapper-{runtime}.yaml"
    log = podman.base / f"wrapper-{runtime}.log"
    cfg.write_text(f"runtime:\n  path: /usr/bin/{runtime}\nshm:\n  default: 256Mi\nlog:\n  path: {log}\n")
    no_hooks = podman.base / "no-hooks"
    no_hooks.mkdir(exist_ok=True)
    wrapped = ["--hooks-dir", no_hooks, "--runtime", RUNTIME, "--runtime-flag", f"config={cfg}"]
    p = podman.podman(*wrapped, "run", "--rm", "-e", "SHMKEEPER_SHM_SIZE=150m", IMAGE, *PROBE, check=False)
    assert p.returncode == 0, p.stderr
    assert df_kib(p.stdout) == kib(150 * MiB)
    assert '"source":"env:SHMKEEPER_SHM_SIZE"' in log.read_text().splitlines()[-1]
    p = podman.podman(*wrapped, "run", "--rm", "--annotation", "shmkeeper.io/shm-size=lots", IMAGE, *PROBE,
                      check=False)
    assert p.returncode != 0 and 'invalid size' in p.stderr, p.stderr
    assert podman.podman("ps", "-a", "-q").stdout.strip() == ""
