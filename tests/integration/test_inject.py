"""What shmkeeper-runtime injects, seen from inside containers of the real
runc: the sharing runtime (ENOSPC instead of SIGBUS) in glibc images only,
its opt-outs, a hostile rootfs, and CUDA IPC device nodes made with mknod."""
import json
import os
import re
import resource
import shutil
import subprocess

import pytest

from harness import BUILD, RUNTIME, SHMGROW, glibc_rootfs, oci_bundle, run, runc_dirs, with_private_var_log

MiB = 1 << 20
PRELOAD = BUILD / "plugin" / "libshmkeeper-preload.so"


@pytest.fixture
def env(tmp_path, bins, root_and_runc):
    assert SHMGROW.exists() and PRELOAD.exists(), "shmgrow and the preload library must be built"

    e = runc_dirs(tmp_path, "runtime.log")
    e.events = tmp_path / "events" / "events.sock"
    e.events.parent.mkdir()
    e.config.write_text(f"shm:\n  default: 256Mi\nlog:\n  path: {e.log}\n"
                        f"agent:\n  eventSocket: {e.events}\n")
    return e


def bundle(env, rootfs, name, args, annotations=None, env_vars=()):
    return oci_bundle(env.tmp / name, rootfs, args, None, env_vars, annotations or {})


def wrapped(env, b, cid):
    return run([RUNTIME, "--config", env.config, "--root", env.state, "run", "--bundle", b, cid],
               check=False, timeout=60)


def last_decision(env):
    return [json.loads(line) for line in env.log.read_text().splitlines() if '"shm decision"' in line][-1]


@pytest.fixture
def glibc(tmp_path):
    return glibc_rootfs(tmp_path / "glibc-rootfs")


def test_full_shm_is_enospc_with_the_preload_and_sigbus_without(env, glibc):
    small = ["SHMKEEPER_SHM_SIZE=32m"]
    p = wrapped(env, bundle(env, glibc, "a", ["shmgrow", "create", "seg", "64"], env_vars=small), "c-enospc")
    assert p.returncode == 28, (p.returncode, p.stdout, p.stderr)
    assert "ftruncate: errno 28" in p.stdout
    assert "shmkeeper: cannot fit 64.0 MiB for /dev/shm/seg: /dev/shm has 32.0 MiB free of 32.0 MiB" in p.stderr
    assert "shmkeeper.io/shm-size" in p.stderr and "SHMKEEPER_SHM_SIZE" in p.stderr
    assert last_decision(env)["preload"] == "preload"
    p = wrapped(env, bundle(env, glibc, "b", ["shmgrow", "create", "seg", "64"],
                            env_vars=small + ["SHMKEEPER_INJECT=0"]), "c-sigbus")
    assert p.returncode in (135, -7), (p.returncode, p.stderr)  # 128 + SIGBUS
    assert last_decision(env)["preload"] == "skip: SHMKEEPER_INJECT=0"


def test_a_segment_that_fits_is_untouched(env, glibc):
    p = wrapped(env, bundle(env, glibc, "a", ["shmgrow", "create", "seg", "16"]), "c-fits")
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


RESERVE_PROBE = ["sh", "-c", "echo reserve=${SHMKEEPER_PRELOAD_RESERVE:-unset}; shmgrow sparse seg 16"]


@pytest.mark.parametrize("policy,annotations,env_vars,want,logged", [
    (False, {}, [], "unset", None),
    (False, {"shmkeeper.io/preload-reserve": "true"}, [], "1", "annotation:shmkeeper.io/preload-reserve"),
    (False, {}, ["SHMKEEPER_PRELOAD_RESERVE=1"], "1", "env:SHMKEEPER_PRELOAD_RESERVE"),
    (True, {}, [], "1", "policy"),
    (True, {"shmkeeper.io/preload-reserve": "false"}, [], "0", None),
    (False, {"shmkeeper.io/preload-reserve": "false"}, ["SHMKEEPER_PRELOAD_RESERVE=1"], "0", None),
    (True, {"shmkeeper.io/preload-reserve": "ture"}, [], "1",
     'policy; ignored annotation shmkeeper.io/preload-reserve="ture" (true or false)'),
], ids=["default", "annotation", "env", "policy", "annotation-over-policy", "annotation-over-env", "bad-annotation"])
def test_reservation_is_opt_in_and_reaches_the_preload(env, glibc, policy, annotations, env_vars, want, logged):
    if policy:
        env.config.write_text(env.config.read_text() + "preload:\n  reserve: true\n")
    p = wrapped(env, bundle(env, glibc, "a", RESERVE_PROBE, annotations=annotations, env_vars=env_vars), "c-reserve")
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    lines = p.stdout.split("\n")
    assert lines[0] == f"reserve={want}" and lines[1] == "ok", p.stdout
    used_kib = int(lines[2].split()[1])
    # 16 MiB touched on two pages: 8 KiB of /dev/shm without the reservation, all of it with
    assert used_kib == (16 * 1024 if want == "1" else 8), p.stdout
    d = last_decision(env)
    assert d["preload"] == "preload" and d["preloadReserve"] == (logged or ""), d


def test_preload_is_appended_to_the_containers_own(env, glibc):
    p = wrapped(env, bundle(env, glibc, "a", ["shmgrow", "env"], env_vars=["LD_PRELOAD=/lib/x.so"]), "c-env")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "/lib/x.so:/run/shmkeeper/libshmkeeper-preload.so"


def test_static_image_and_the_annotation_opt_out_get_nothing(env, rootfs, glibc):
    p = wrapped(env, bundle(env, rootfs, "s", ["sh", "-c", "echo ${LD_PRELOAD:-none}"]), "c-static")
    assert p.returncode == 0 and p.stdout.strip() == "none", p.stderr
    assert last_decision(env)["preload"] == "skip: the image has no glibc dynamic loader (static or musl)"
    p = wrapped(env, bundle(env, glibc, "o", ["shmgrow", "env"], {"shmkeeper.io/inject": "false"}), "c-optout")
    assert p.returncode == 0 and p.stdout.strip() == "none", p.stderr
    assert last_decision(env)["preload"] == "skip: annotation shmkeeper.io/inject is false"


LINKS = ["run", "run/shmkeeper", "run/shmkeeper/libshmkeeper-preload.so", "run/shmkeeper/events"]


@pytest.mark.parametrize("link", LINKS)
@pytest.mark.parametrize("aim", ["dir", "passwd"])
def test_a_symlink_at_any_component_of_the_mount_points_is_refused(env, glibc, link, aim):
    outside = env.tmp / "outside"
    outside.mkdir()
    target = glibc / link
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # absolute: on the host it would escape the rootfs; /etc/passwd: the
    # image's own file, which a followed last component would have covered
    target.symlink_to(outside if aim == "dir" else "/etc/passwd")
    passwd = (glibc / "etc" / "passwd").read_text()
    p = wrapped(env, bundle(env, glibc, "l", ["sh", "-c", "shmgrow env; cat /etc/passwd"]), "c-link")
    assert p.returncode == 0, p.stderr
    assert p.stdout == "none\n" + passwd, p.stdout
    assert last_decision(env)["preload"].startswith("skip: refused: /"), last_decision(env)
    assert list(outside.iterdir()) == []  # nothing was created outside the rootfs
    assert (glibc / "etc" / "passwd").read_text() == passwd


def test_a_create_retried_on_the_same_bundle_injects_once(env, glibc):
    b = bundle(env, glibc, "twice", ["sh", "-c", "shmgrow env; grep -c shmkeeper /proc/self/mountinfo"])
    p = wrapped(env, b, "c-once")
    assert p.returncode == 0 and p.stdout.split() == ["/run/shmkeeper/libshmkeeper-preload.so", "2"], p.stdout
    p = wrapped(env, b, "c-twice")  # the bundle's config.json carries the first injection now
    assert p.returncode == 0 and p.stdout.split() == ["/run/shmkeeper/libshmkeeper-preload.so", "2"], p.stdout
    assert last_decision(env)["preload"] == "skip: already injected"


# ---- the final mount layout: the container's own mounts at /run ------------

PROBE_RUN = "shmgrow env; echo events=$SHMKEEPER_EVENT_SOCKET; ls -A /run | tr '\\n' ' '; echo"


def mounting(*mounts):
    def edit(spec):
        spec["mounts"] += list(mounts)
    return edit


def bind(dest, source, *opts):
    return {"destination": dest, "type": "bind", "source": str(source), "options": ["rbind", *opts]}


@pytest.mark.parametrize("mode", ["rw", "ro"])
def test_a_run_volume_is_left_alone_and_the_preload_goes_elsewhere(env, glibc, mode):
    vol = env.tmp / "vol"
    vol.mkdir()
    (vol / "mine").write_text("x")
    b = oci_bundle(env.tmp / "v", glibc, ["sh", "-c", PROBE_RUN], mounting(bind("/run", vol, mode)),
                   ["SHMKEEPER_SHM_SIZE=32m"])
    p = wrapped(env, b, "c-vol-" + mode)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "/.shmkeeper/libshmkeeper-preload.so", p.stdout
    assert lines[1] == f"events=/.shmkeeper/events/{env.events.name}"
    assert lines[2].split() == ["mine"]  # the container sees its volume as it is
    assert sorted(x.name for x in vol.iterdir()) == ["mine"]  # nothing created in it on the host
    d = last_decision(env)["preload"]
    assert d.startswith("preload at /.shmkeeper (/run/shmkeeper is under the container's mount /run (bind from ")
    # and the preload works from there
    p = wrapped(env, oci_bundle(env.tmp / "v2", glibc, ["shmgrow", "create", "seg", "64"],
                                mounting(bind("/run", vol, mode)), ["SHMKEEPER_SHM_SIZE=32m"]), "c-vol2-" + mode)
    assert p.returncode == 28 and "shmkeeper: cannot fit" in p.stderr, (p.returncode, p.stderr)


def test_a_tmpfs_at_run_stays_empty(env, glibc):
    tmpfs = {"destination": "/run", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "size=1m"]}
    p = wrapped(env, oci_bundle(env.tmp / "t", glibc, ["sh", "-c", PROBE_RUN], mounting(tmpfs)), "c-tmpfs")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0] == "/.shmkeeper/libshmkeeper-preload.so" and lines[2] == "", p.stdout
    assert "under the container's mount /run (tmpfs from tmpfs)" in last_decision(env)["preload"]


def test_a_volume_reaching_run_through_the_images_symlink_counts(env, glibc):
    vol = env.tmp / "vol"
    vol.mkdir()
    (glibc / "var").mkdir()
    (glibc / "var" / "run").symlink_to("/run")  # as in Debian images
    p = wrapped(env, oci_bundle(env.tmp / "s", glibc, ["sh", "-c", PROBE_RUN], mounting(bind("/var/run", vol))),
                "c-varrun")
    assert p.returncode == 0, p.stderr
    assert p.stdout.splitlines()[0] == "/.shmkeeper/libshmkeeper-preload.so", p.stdout
    assert list(vol.iterdir()) == []
    assert "mount /var/run (at /run) (bind from " in last_decision(env)["preload"]


def test_when_every_place_is_a_mount_the_injection_is_skipped_naming_them(env, glibc):
    vol = env.tmp / "vol"
    vol.mkdir()
    b = oci_bundle(env.tmp / "a", glibc, ["shmgrow", "env"], mounting(bind("/run", vol, "ro"), bind("/", vol)))
    # "/" over everything: runc refuses such a spec itself, so only the decision is checked here
    p = wrapped(env, b, "c-all")
    d = last_decision(env)["preload"]
    assert d.startswith("skip: /run/shmkeeper is under the container's mount /run (bind from "), d
    assert "/.shmkeeper is under the container's mount / (bind from " in d
    assert d.endswith(": nothing is created inside a mount")
    assert not (vol / "shmkeeper").exists() and not (vol / ".shmkeeper").exists() and not (vol / "run").exists()


def test_a_read_only_rootfs_gets_the_preload(env, glibc):
    # root.readonly is what the bundles here use already; this one also mounts
    # the rootfs directory itself read-only on the host before the run, so
    # the mount points must exist already: made by a first run
    p = wrapped(env, bundle(env, glibc, "r1", ["shmgrow", "env"]), "c-ro1")
    assert p.returncode == 0 and p.stdout.strip() == "/run/shmkeeper/libshmkeeper-preload.so", p.stderr
    ro = env.tmp / "ro-rootfs"
    ro.mkdir()
    run(["mount", "--bind", "-o", "ro", glibc, ro])
    try:
        run(["mount", "-o", "remount,bind,ro", ro])
        p = wrapped(env, bundle(env, ro, "r2", ["shmgrow", "env"]), "c-ro2")
        assert p.returncode == 0 and p.stdout.strip() == "/run/shmkeeper/libshmkeeper-preload.so", p.stderr
    finally:
        run(["umount", ro])


def test_a_rootfs_that_cannot_take_the_mount_points_is_a_skip_not_a_failure(env, glibc):
    shutil.rmtree(glibc / "run")
    (glibc / "run").mkdir()
    ro = env.tmp / "ro-rootfs"
    ro.mkdir()
    run(["mount", "--bind", glibc, ro])
    try:
        run(["mount", "-o", "remount,bind,ro", ro])
        p = wrapped(env, bundle(env, ro, "r", ["shmgrow", "env"]), "c-rofs")
        assert p.returncode == 0 and p.stdout.strip() == "none", p.stderr
        assert last_decision(env)["preload"].startswith("skip: refused: create /run/shmkeeper"), last_decision(env)
    finally:
        run(["umount", ro])


# ---- the wrapper never crashes on a spec -------------------------------------

def edit_config(b, fn):
    spec = json.loads((b / "config.json").read_text())
    fn(spec)
    (b / "config.json").write_text(json.dumps(spec))


def test_a_deeply_nested_spec_passes_through_to_runc(env, rootfs):
    b = bundle(env, rootfs, "deep", ["true"])
    text = (b / "config.json").read_text()
    depth = 100_000
    (b / "config.json").write_text(text[:-1].rstrip().rstrip("}") + ',"x":' + "[" * depth + "]" * depth + "}")
    json_ok = (b / "config.json").read_text().count("[") >= depth
    p = wrapped(env, b, "c-deep")
    assert json_ok and p.returncode not in (139, -11), (p.returncode, p.stderr)
    assert "shmkeeper-runtime: passing the spec through untouched: " in p.stderr, p.stderr
    assert "nested deeper than 512 levels (left to the runtime to judge)" in p.stderr, p.stderr


def test_a_spec_over_16_mib_passes_through_and_the_container_runs(env, rootfs):
    b = bundle(env, rootfs, "huge", ["sh", "-c", "echo ran"], {"big": "x" * (17 << 20)})
    p = wrapped(env, b, "c-huge")
    assert p.returncode == 0 and p.stdout.strip() == "ran", (p.returncode, p.stderr)
    assert "shmkeeper-runtime: passing the spec through untouched: " in p.stderr, p.stderr
    assert "larger than 16777216 bytes (left to the runtime to judge)" in p.stderr, p.stderr


def test_shmkeeper_config_naming_a_missing_file_is_a_warning(env, glibc):
    missing = env.tmp / "nope.yaml"
    b = bundle(env, glibc, "cfg", ["shmgrow", "env"])
    var_log = env.tmp / "var-log"  # the defaults log to /var/log/shmkeeper/runtime.log: the test's, not the host's
    p = run(with_private_var_log([RUNTIME, "--root", env.state, "run", "--bundle", b, "c-cfg"], var_log),
            check=False, timeout=60, env=dict(os.environ, SHMKEEPER_CONFIG=str(missing)))
    assert p.returncode == 0, p.stderr
    assert f"SHMKEEPER_CONFIG names {missing}, which does not exist: using the defaults" in p.stderr, p.stderr
    assert '"container":"c-cfg"' in (var_log / "shmkeeper" / "runtime.log").read_text()


# ---- CUDA IPC: device nodes made with mknod, a fake /proc/devices -------------

@pytest.fixture
def gpu_host(env):
    dev = env.tmp / "dev"
    (dev / "nvidia-caps").mkdir(parents=True)
    for name, major, minor in [("nvidia0", 195, 0), ("nvidia1", 195, 1), ("nvidiactl", 195, 255),
                               ("nvidia-uvm", 511, 0), ("nvidia-uvm-tools", 511, 1),
                               ("nvidia-caps/nvidia-cap1", 510, 1), ("nvidia7", 12, 7)]:
        os.mknod(dev / name, 0o666 | 0o020000, os.makedev(major, minor))
    (dev / "nvidia9").symlink_to("/dev/null")  # not a device node: ignored
    devices = env.tmp / "proc-devices"
    devices.write_text("Character devices:\n  1 mem\n195 nvidia-frontend\n510 nvidia-caps\n511 nvidia-uvm\n\n"
                       "Block devices:\n  8 sd\n")
    with open(env.config, "a") as f:
        f.write(f"cuda:\n  devDir: {dev}\n  procDevices: {devices}\n")
    return dev


PROBE = ("for d in /dev/nvidia0 /dev/nvidia1 /dev/nvidiactl /dev/nvidia-uvm /dev/nvidia-uvm-tools "
         "/dev/nvidia-caps/nvidia-cap1 /dev/nvidia7 /dev/nvidia9; do "
         "[ -e $d ] && stat -c '%n %t:%T' $d; done; echo memlock=$(ulimit -l); "
         "cat /dev/nvidiactl 2>&1 | head -1")


def allow_cuda_ipc(env):
    """The node policy cuda.ipc: allocated (the cuda: block is the config's last, from gpu_host)."""
    with open(env.config, "a") as f:
        f.write("  ipc: allocated\n")


def with_gpu(minor):
    """linux.devices /dev/nvidia<minor> and its cgroup rule, as --gpus, the device plugin or CDI put them."""
    def edit(spec):
        spec["linux"].setdefault("devices", []).append(
            {"path": f"/dev/nvidia{minor}", "type": "c", "major": 195, "minor": minor, "fileMode": 0o666})
        spec["linux"]["resources"]["devices"].append(
            {"allow": True, "type": "c", "major": 195, "minor": minor, "access": "rwm"})
    return edit


def gpu_bundle(env, rootfs, name, annotations=None, env_vars=(), gpu=None):
    return oci_bundle(env.tmp / name, rootfs, ["sh", "-c", PROBE], with_gpu(gpu) if gpu is not None else None,
                      env_vars, annotations or {})


def seen_devices(p):
    return {line.split()[0]: line.split()[1] for line in p.stdout.splitlines() if line.startswith("/dev/")}


ASK = {"shmkeeper.io/cuda-ipc": "true"}


def test_cuda_ipc_adds_the_control_nodes_for_the_containers_own_gpu_and_memlock(env, rootfs, gpu_host):
    allow_cuda_ipc(env)
    p = wrapped(env, gpu_bundle(env, rootfs, "g", ASK, gpu=1), "c-gpu")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    # Its own GPU (from the spec), the control and UVM nodes with the majors of /proc/devices; never the
    # other GPU nvidia0, a MIG capability, nvidia7 (major 12) or the symlink.
    assert seen_devices(p) == {"/dev/nvidia1": "c3:1", "/dev/nvidiactl": "c3:ff", "/dev/nvidia-uvm": "1ff:0",
                               "/dev/nvidia-uvm-tools": "1ff:1"}
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    can_raise = subprocess.run(["/usr/bin/python3", "-c", "import resource as r; i=r.RLIM_INFINITY; "
                                "r.setrlimit(r.RLIMIT_MEMLOCK, (i, i))"], capture_output=True).returncode == 0
    # unlimited where the runtime may raise it (CAP_SYS_RESOURCE), else the node's hard limit
    assert f"memlock={'unlimited' if can_raise or hard == resource.RLIM_INFINITY else hard // 1024}" in lines
    # The device cgroup lets it through: with no driver behind the node the
    # open fails with ENXIO, not EPERM.
    assert "No such device or address" in p.stdout and "Operation not permitted" not in p.stdout
    d = last_decision(env)
    assert d["cuda"] == "cuda-ipc" and any("own PID namespace" in n for n in d["notes"])
    assert "for the container's GPUs /dev/nvidia1: added /dev/nvidiactl" in d["notes"][0], d["notes"]


def test_cuda_ipc_is_never_given_by_the_env_a_default_node_or_without_a_gpu(env, rootfs, gpu_host):
    # A default node (cuda.ipc: off): the image's env and the pod's annotation add nothing, and the
    # container still starts; the decision log says why.
    p = wrapped(env, gpu_bundle(env, rootfs, "e", env_vars=["SHMKEEPER_CUDA_IPC=1"]), "c-env")
    assert p.returncode == 0 and seen_devices(p) == {}, (p.stdout, p.stderr)
    d = last_decision(env)
    assert d["cuda"] == "cuda-ipc: env ignored" and "SHMKEEPER_CUDA_IPC in the container's env is ignored" \
        in d["notes"][0], d
    p = wrapped(env, gpu_bundle(env, rootfs, "a", ASK, gpu=1), "c-off")
    assert p.returncode == 0 and seen_devices(p) == {"/dev/nvidia1": "c3:1"}, (p.stdout, p.stderr)
    d = last_decision(env)
    assert d["cuda"] == "cuda-ipc: off on this node" and "cuda.ipc: off" in d["notes"][0], d
    # A node that allows it: no GPU in the spec, or the env alone, adds nothing.
    allow_cuda_ipc(env)
    p = wrapped(env, gpu_bundle(env, rootfs, "n", ASK), "c-nogpu")
    assert p.returncode == 0 and seen_devices(p) == {}, (p.stdout, p.stderr)
    assert last_decision(env)["cuda"] == "cuda-ipc: no GPU in the spec"
    p = wrapped(env, gpu_bundle(env, rootfs, "v", env_vars=["SHMKEEPER_CUDA_IPC=1"], gpu=0), "c-envgpu")
    assert p.returncode == 0 and seen_devices(p) == {"/dev/nvidia0": "c3:0"}, (p.stdout, p.stderr)
    assert last_decision(env)["cuda"] == "cuda-ipc: env ignored"


def test_no_cuda_request_or_no_devices_changes_nothing(env, rootfs, gpu_host):
    p = wrapped(env, bundle(env, rootfs, "n", ["sh", "-c", PROBE]), "c-nogpu")
    assert p.returncode == 0 and not [x for x in p.stdout.splitlines() if x.startswith("/dev/")], p.stdout
    allow_cuda_ipc(env)
    for f in gpu_host.rglob("*"):
        if not f.is_dir() and f.name != "nvidia1":
            f.unlink()
    p = wrapped(env, gpu_bundle(env, rootfs, "e", ASK, gpu=1), "c-empty")
    assert p.returncode == 0 and seen_devices(p) == {"/dev/nvidia1": "c3:1"}, p.stdout
    assert "no NVIDIA control or UVM device nodes" in last_decision(env)["notes"][0]


def test_preload_needs_nothing_newer_than_glibc_2_17():
    out = run(["objdump", "-T", PRELOAD]).stdout
    versions = {tuple(int(x) for x in v.split(".")) for v in re.findall(r"GLIBC_([0-9.]+)", out)}
    assert versions and max(versions) <= (2, 17), sorted(versions)
    # dlsym is weak (glibc < 2.34 has it only in libdl.so.2), and libc is the only needed library
    assert re.search(r"\bw +DF \*UND\*.*\) dlsym$", out, re.M), out
    needed = re.findall(r"NEEDED +(\S+)", run(["objdump", "-p", PRELOAD]).stdout)
    assert needed == ["libc.so.6"], needed
