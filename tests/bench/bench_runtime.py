#!/usr/bin/env python3
"""Benchmark (not a test): what shmkeeper-runtime costs. Run as root.

1. The wrapper's own time on `create`: shmkeeper-runtime (load the policy,
   read and plan the spec, write it atomically, log the decision, exec) in
   front of /bin/true, against /bin/true alone, on the same Docker-shaped
   bundle; with the bundle on tmpfs (engines keep bundles under /run, a tmpfs
   on hosts) and on disk (where the spec's fsync costs). A ten-line static C
   program that only execs is shown as the floor of any exec wrapper.
2. `docker run --rm` of a trivial container under runc and under shmkeeper
   on one private dockerd (exec root on tmpfs, as /run/docker on hosts),
   interleaved, as a ratio.
Medians side by side with the baseline, in one run. Usage: bench_runtime.py [N]
"""
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))
import harness  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 30
EXEC_ONLY_C = '#include <unistd.h>\nint main(int c, char** v) { (void)c; execv("/bin/true", v); return 1; }\n'


def timed(cmd):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - t0) * 1000


def docker_spec():
    return {
        "ociVersion": "1.0.2-dev",
        "process": {"args": ["true"], "env": ["PATH=/bin"], "cwd": "/"},
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                   {"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
                    "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=67108864"]}],
        "linux": {"namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "mount"}]},
    }


def tmpfs(path: Path):
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "bench", str(path)], check=True)
    return path


def bench_create(tmp, where: Path, variants):
    """Median ms of `<variant> create --bundle B id` per variant, interleaved."""
    bundle = where / "bundle"
    bundle.mkdir(parents=True, exist_ok=True)
    spec = json.dumps(docker_spec())
    times = {name: [] for name, _ in variants}
    for i in range(N):
        for name, argv in variants:
            (bundle / "config.json").write_text(spec)  # the engine's 64 MiB spec every time
            times[name].append(timed(argv + ["--root", str(tmp), "create", "--bundle", str(bundle), f"c{i}"]))
    return {name: statistics.median(v) for name, v in times.items()}


def bench_docker(tmp):
    rootfs = harness.make_busybox_rootfs(tmp / "rootfs")
    engine = harness.PrivateDocker(tmp / "docker", exec_root=tmpfs(tmp / "docker-exec")).start()
    try:
        subprocess.run([str(harness.CLI), "install", "docker", "--config", str(engine.daemon_json),
                        "--runtime-path", str(harness.RUNTIME)], check=True, stdout=subprocess.DEVNULL)
        engine.import_busybox("shmk-bench:latest", rootfs)
        time.sleep(1)
        times = {"runc": [], "shmkeeper": []}
        for _ in range(N):
            for rt in times:
                times[rt].append(timed(["docker", "-H", engine.host, "run", "--rm", "--network", "none",
                                        "--runtime", rt, "shmk-bench:latest", "true"]))
        return statistics.median(times["runc"]), statistics.median(times["shmkeeper"])
    finally:
        engine.stop()


def row(case, base, value, unit="ms", digits=2):
    print(f"{case:<44}{base:>10.{digits}f}{unit}{value:>10.{digits}f}{unit}"
          f"{value - base:>9.{digits}f}{unit}{value / base:>8.3f}")


def main():
    tmp = Path(tempfile.mkdtemp(prefix="shmk-bench-"))
    mounts = []
    try:
        cfg = tmp / "shmkeeper.yaml"
        cfg.write_text(f"runtime:\n  path: /bin/true\nlog:\n  path: {tmp}/runtime.log\n")
        exec_only = tmp / "exec-only"
        (tmp / "exec-only.c").write_text(EXEC_ONLY_C)
        subprocess.run(["cc", "-O2", "-static", "-o", str(exec_only), str(tmp / "exec-only.c")], check=True)
        variants = [("true", ["/bin/true"]), ("exec-only", [str(exec_only)]),
                    ("shmkeeper", [str(harness.RUNTIME), "--config", str(cfg)])]
        mounts.append(tmpfs(tmp / "run"))
        on_tmpfs = bench_create(tmp, tmp / "run", variants)
        on_disk = bench_create(tmp, tmp / "disk", variants)
        print(f"shmkeeper-runtime benchmark, {N} runs per case, medians")
        print(f"{'case':<44}{'baseline':>12}{'measured':>12}{'added':>11}{'ratio':>8}")
        row("create, floor: static exec-only wrapper", on_tmpfs["true"], on_tmpfs["exec-only"])
        row("create, shmkeeper, bundle on tmpfs (/run)", on_tmpfs["true"], on_tmpfs["shmkeeper"])
        row("create, shmkeeper, bundle on disk", on_disk["true"], on_disk["shmkeeper"])
        row("create, shmkeeper's own work above the floor", on_tmpfs["exec-only"], on_tmpfs["shmkeeper"])
        if shutil.which("dockerd"):
            b, w = bench_docker(tmp)
            row("docker run --rm busybox true: runc vs shmk", b, w, digits=1)
    finally:
        for m in mounts + [tmp / "docker-exec"]:
            subprocess.run(["umount", "-l", str(m)], stderr=subprocess.DEVNULL)
        subprocess.run(["rm", "-rf", str(tmp)])


if __name__ == "__main__":
    main()
