#!/usr/bin/env python3
"""Benchmark (not a test): the time NRI adds to a pod's creation. Run as root
after `tests/run.sh build` (it uses the cached Debian sid root of
tests/engines/root.sh, built on first use).

Debian sid's containerd 2.1 (NRI on) runs in a private namespace
(tests/engines/sidroot.py); the kubelet is played over CRI with cri-tool, as
tests/engines/test_nri.py does (its Pod and NriAgent are reused). The same
pod, annotated shmkeeper.io/shm-size: 2Gi, is created N times with the agent
connected as containerd's NRI plugin ("nri") and N times with no plugin
connected (the agent stopped: "none"), interleaved (ABBA order), in one run.
Each creation is timed per CRI call as the kubelet makes it:
RunPodSandbox (runp), CreateContainer (create: the call NRI adjusts; the
agent subscribes to CreateContainer only), StartContainer (start), and their
sum. Each time is a cri-tool process's wall time (its start and gRPC
connection included, the same in both arms). After each creation the
container's first `df -k /dev/shm` is checked (2 GiB with the plugin, 64 MiB
without), so each sample is what its arm claims; the pod is then removed,
outside the timed part. Prints median and p99 (nearest rank: with N = 30 it
is the largest sample) per call and arm, side by side.

Usage: bench_nri.py [N]   (default 30)
"""
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "lib"))
sys.path.insert(0, str(HERE.parent / "engines"))
import harness  # noqa: E402
import sidroot  # noqa: E402
from test_nri import NriAgent, Pod  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 30
GiB, MiB = 1 << 30, 1 << 20
EXPECT_KIB = {"nri": 2 * GiB // 1024, "none": 64 * MiB // 1024}
CALLS = ("runp", "create", "start")


def start_containerd(ns, rootfs):
    """sid's containerd with NRI on (its socket under the namespace's base), the pause image imported."""
    engine = sidroot.SidContainerd(ns, ns.base / "ctd", harness.PAUSE_IMAGE)
    engine.write_config()
    engine.nri_sock = engine.base / "nri.sock"
    with open(engine.config, "a") as f:
        f.write(f'[plugins."io.containerd.nri.v1.nri"]\n  disable = false\n  socket_path = "{engine.nri_sock}"\n')
    engine.start()
    archive = harness.write_image_archive(rootfs, harness.PAUSE_IMAGE, ["/bin/sleep", "2147483647"],
                                          engine.base / "pause.tar")
    engine.ctr("images", "import", archive)
    return engine


def timed_cri(engine, record):
    """engine.cri that appends (verb, milliseconds) of each call to `record`."""
    def cri(*args, check=True):
        t0 = time.perf_counter()
        p = harness.run([harness.CRI_TOOL, "-r", engine.endpoint, *args], check=check, timeout=180)
        record.append((str(args[0]), (time.perf_counter() - t0) * 1000))
        return p
    return cri


def one_pod(engine, name):
    """Creates the annotated pod and its container (timed), checks the size its first process saw, removes it:
    {call: ms}."""
    record = []
    engine.cri = timed_cri(engine, record)
    pod = Pod(engine, name, annotations={"shmkeeper.io/shm-size": "2Gi"})  # runp
    pod.create("a")  # create, start
    times = {verb: ms for verb, ms in record}
    engine.cri = timed_cri(engine, [])
    kib = pod.first_df_kib("a")
    pod.remove()
    shutil.rmtree(pod.dir, ignore_errors=True)
    return times, kib


def p99(xs):
    xs = sorted(xs)
    return xs[max(0, -(-99 * len(xs) // 100) - 1)]  # nearest rank


def main():
    if os.geteuid() != 0:
        sys.exit("bench_nri.py: needs root (namespaces, mounts)")
    for b in (harness.AGENTD, harness.CRI_TOOL):
        if not Path(b).exists():
            sys.exit(f"bench_nri.py: {b} is not built (tests/run.sh build)")
    root = sidroot.sid_root()
    versions = sidroot.root_versions(root)
    work = Path(tempfile.mkdtemp(prefix="shmk-bench-nri-"))
    rootfs = harness.make_busybox_rootfs(work / "rootfs")
    ns = sidroot.SidNamespace(sidroot.short_base("bench-nri"), root=root, binds=[harness.BUILD, rootfs]).start()
    engine = agent = None
    try:
        engine = start_containerd(ns, rootfs)
        agent = NriAgent(work / "agent", engine.nri_sock)
        # As deployed: the agent reads each container's image through containerd (agent.criSocket) to decide
        # the preload, so the time of that read (a snapshot call, a child mounting the layers) is in the figure.
        agent.config.write_text(agent.config.read_text().replace("criSocket: none", f"criSocket: {engine.endpoint}"))
        samples = {"nri": [], "none": []}
        # ABBA: each arm goes first as often as the other; one untimed warm-up pod per arm.
        order = ["nri", "none"] + [arm for i in range(N) for arm in (("nri", "none") if i % 2 == 0
                                                                     else ("none", "nri"))]
        for i, arm in enumerate(order):
            connected = agent.proc is not None and agent.proc.poll() is None
            if arm == "nri" and not connected:
                agent.start()  # returns once the agent logged "NRI: registered"
            elif arm == "none" and connected:
                agent.stop()
            times, kib = one_pod(engine, f"bench-{i}-{arm}")
            if kib != EXPECT_KIB[arm]:
                raise AssertionError(f"pod {i} ({arm}): /dev/shm {kib} KiB, expected {EXPECT_KIB[arm]}")
            if i >= 2:
                samples[arm].append(times)
        report(samples, versions)
    finally:
        if agent:
            agent.stop()
        if engine:
            engine.stop(cri=engine.cri)
        ns.stop()
        shutil.rmtree(ns.base, ignore_errors=True)
        shutil.rmtree(work, ignore_errors=True)


def report(samples, versions):
    print(f"containerd {versions.get('containerd', '?')} (Debian sid), runc {versions.get('runc', '?')}; "
          f"{len(samples['nri'])} pods per arm, interleaved; {os.cpu_count()} CPUs")
    print(f"{'call':<28}{'no plugin: median':>18}{'p99':>8}{'NRI plugin: median':>20}{'p99':>8}"
          f"{'added (median)':>16}")
    rows = [(c, [s[c] for s in samples["none"]], [s[c] for s in samples["nri"]]) for c in CALLS]
    rows.append(("runp+create+start", [sum(s[c] for c in CALLS) for s in samples["none"]],
                 [sum(s[c] for c in CALLS) for s in samples["nri"]]))
    names = {"runp": "RunPodSandbox", "create": "CreateContainer", "start": "StartContainer"}
    for call, none, nri in rows:
        m0, m1 = statistics.median(none), statistics.median(nri)
        print(f"{names.get(call, call):<28}{m0:>15.1f} ms{p99(none):>5.0f} ms{m1:>17.1f} ms{p99(nri):>5.0f} ms"
              f"{m1 - m0:>+13.1f} ms")


if __name__ == "__main__":
    main()
