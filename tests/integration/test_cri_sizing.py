"""Kubernetes sizing over CRI (the kubelet played as in test_cri.py, on
private containerds): sizes as the kernel stores them (whole pages), and
`shm.default: auto` following the pod's memory limit, with the wrapper
installed and in agent-only mode. What /dev/shm is inside the containers, and
what the agent reports, are read from the real thing."""
import json
import os
import shutil
import subprocess
import time

import pytest

from harness import (AGENTD, CLI, SHMGROW, AgentProcess, PrivateContainerd, glibc_rootfs, require, run, wait_for,
                     write_image_archive)
from test_cri import Pod, agent_pod, pause_archive, start_containerd  # noqa: F401 (pause_archive: a fixture)

MiB = 1 << 20
GiB = 1 << 30
PAGE = os.sysconf("SC_PAGE_SIZE")
SCAN = 1  # agent scan interval, seconds
GLIBC_IMAGE = "shmkeeper.test/glibc:test"
SANDBOX_MEMORY = "annotation:io.kubernetes.cri.sandbox-memory"


def whole_pages(n):
    return -(-n // PAGE) * PAGE


def limited_pod(engine, base, name, limit, ns="default", annotations=None):
    """A pod whose containers' limits add up to `limit`: the kubelet sends it
    in PodSandboxConfig.linux.resources, containerd writes it on the sandbox's
    spec as io.kubernetes.cri.sandbox-memory."""
    pod = Pod(engine, base, name, ns=ns, annotations=annotations)
    pod.config["linux"]["resources"] = {"memory_limit_in_bytes": str(limit)}
    pod.config_path.write_text(json.dumps(pod.config))
    return pod


def start_probe(pod, name, script, out, limit=None, env=()):
    """A container of the glibc image running `sh -c script` with `out`
    mounted writable at /out, and the kubelet's per-container memory limit."""
    cfg = {"metadata": {"name": name}, "image": {"image": GLIBC_IMAGE}, "command": ["sh", "-c", script],
           "envs": [{"key": k, "value": v} for k, v in env],
           "mounts": [{"container_path": "/out", "host_path": str(out)}]}
    if limit:
        cfg["linux"] = {"resources": {"memory_limit_in_bytes": str(limit)}}
    path = pod.dir / f"{name}.json"
    path.write_text(json.dumps(cfg))
    cid = pod.engine.cri("create", pod.id, path, pod.config_path).stdout.strip()
    pod.engine.cri("start", cid)
    pod.containers[name] = cid
    return cid


def decisions(log, container):
    return [d for d in (json.loads(line) for line in log.read_text().splitlines() if '"shm decision"' in line)
            if d.get("container") == container]


def agent_lines(agent, msg, sandbox):
    out = []
    for line in agent.log.read_text().splitlines():
        if line.startswith("{") and msg in line:
            d = json.loads(line)
            if d.get("sandbox") == sandbox:
                out.append(d)
    return out


def agent_config(base, engine=None, reconcile=False, roots=None, scan=SCAN):
    """A private agent: runtime roots `roots` (default: the engine's k8s.io
    runc root) and the engine's CRI socket (none without an engine)."""
    roots = roots or [f"{engine.runc_root}/k8s.io"]
    cri = f"  criSocket: {engine.endpoint}\n  reconcile: {str(reconcile).lower()}\n" if engine else ""
    return f"""
agent:
  socket: {base}/agent.sock
  eventSocket: {base}/events.sock
  metricsAddress: ""
  scanInterval: {scan}s
  runtimeRoots: [{", ".join(str(r) for r in roots)}]
  dockerSocket: ""
{cri}"""


@pytest.fixture(scope="module")
def auto_containerd(tmp_path_factory, pause_archive, root_and_runc, bins):  # noqa: F811
    """shmkeeper installed as the default runtime, `shm.default` unset (auto),
    a glibc image (the preload applies) and an agent with the CRI socket (not
    agent-only: labels still come from the CRI)."""
    require(SHMGROW.exists(), f"shmgrow not built at {SHMGROW}")
    base = tmp_path_factory.mktemp("cri-auto")
    engine = start_containerd(base, pause_archive, install=True)
    engine.policy.write_text(f"log:\n  path: {base}/runtime.log\n")  # the wrapper reads it per call
    engine.runtime_log = base / "runtime.log"
    archive = write_image_archive(glibc_rootfs(base / "glibc-rootfs"), GLIBC_IMAGE, ["/bin/sleep", "2147483647"],
                                  base / "glibc.tar")
    engine.import_image(archive)
    agent_base = base / "agent"
    agent_base.mkdir()
    engine.agent = AgentProcess(agent_base, agent_config(agent_base, engine)).start()
    yield engine
    engine.agent.stop()
    engine.stop()


@pytest.fixture(scope="module")
def agent_only(tmp_path_factory, pause_archive, root_and_runc, bins):  # noqa: F811
    """Plain runc (no shmkeeper in containerd) and the agent in agent-only
    mode with `shm.default` unset (auto)."""
    base = tmp_path_factory.mktemp("cri-agent-only")
    engine = start_containerd(base, pause_archive, install=False)
    agent_base = base / "agent"
    agent_base.mkdir()
    engine.agent = AgentProcess(agent_base, agent_config(agent_base, engine, reconcile=True)).start()
    yield engine
    engine.agent.stop()
    engine.stop()


@pytest.fixture
def pods(tmp_path):
    made = []

    def make(engine, name, limit=None, **kw):
        p = limited_pod(engine, tmp_path, name, limit, **kw) if limit else Pod(engine, tmp_path, name, **kw)
        made.append(p)
        return p
    yield make
    for p in made:
        p.remove()


# ---- issue 17: sizes in whole pages, resized once -------------------------------

@pytest.mark.parametrize("quantity", ["1G", "100000001"])
def test_agent_only_resizes_a_decimal_size_once_and_reports_what_df_shows(agent_only, pods, quantity):
    agent = agent_only.agent
    pod = pods(agent_only, f"decimal-{quantity.lower()}", ns="batch", annotations={"shmkeeper.io/shm-size": quantity})
    pod.run()
    pod.container("main", "sleep", "600")
    want = whole_pages(10**9 if quantity == "1G" else int(quantity))
    wait_for(lambda: pod.shm_kib("main") * 1024 == want, timeout=SCAN + 5, interval=0.2,
             what=f"/dev/shm of {want} bytes")
    def scans():
        return int(agent.json("status")["node"]["scans"])
    first = scans()
    wait_for(lambda: scans() >= first + 5, timeout=10 * SCAN + 10, what="5 more scans")
    resized = agent_lines(agent, "reconcile: resized", pod.id)
    assert len(resized) == 1, resized  # was: one remount and one line per scan, forever
    assert resized[0]["new_bytes"] == want
    p = agent_pod(agent, "batch", pod.name)
    df_bytes = pod.shm_kib("main") * 1024
    assert int(p["shm"]["sizeBytes"]) == df_bytes == want
    assert int(p["shm"]["requestedBytes"]) == want and p["shm"]["sizedBy"] == "reconcile"


# ---- issue 13: shm.default auto follows the pod's memory limit -----------------

def test_auto_gives_a_1gib_pod_1gib_and_a_full_shm_fails_without_an_oom_kill(auto_containerd, pods, tmp_path):
    engine = auto_containerd
    pod = pods(engine, "limited", limit=GiB, ns="ml")
    pod.run()
    sized = decisions(engine.runtime_log, pod.id)[-1]
    assert sized["new_bytes"] == GiB and sized["requested"] == "auto"
    assert sized["memory_limit"] == {"bytes": GiB, "source": SANDBOX_MEMORY}
    fill = "df -k /dev/shm > /out/df; shmgrow create seg 1536 > /out/stdout 2> /out/stderr; echo $? > /out/rc; sleep 600"
    results = {}
    # With the preload the 1.5 GiB segment is refused before a page is used, so
    # even a container whose own limit is the whole 1 GiB is not OOM-killed.
    # Without it the pages are touched one by one: the tmpfs fills (SIGBUS) only
    # if the container's limit leaves room for its process next to a full
    # /dev/shm (at exactly 1 GiB its memory cgroup OOM-kills the writer first,
    # as for a full memory-backed emptyDir).
    for name, env, limit in [("preload", (), GiB), ("plain", (("SHMKEEPER_INJECT", "0"),), GiB + 64 * MiB)]:
        out = tmp_path / name
        out.mkdir()
        out.chmod(0o777)
        start_probe(pod, name, fill, out, limit=limit, env=env)
        wait_for(lambda: (out / "rc").exists() and (out / "rc").read_text().strip(), timeout=120, what=f"{name} probe")
        results[name] = out
    df = results["preload"] / "df"
    assert int(df.read_text().splitlines()[1].split()[1]) == GiB // 1024
    rc = int((results["preload"] / "rc").read_text())
    assert rc == 28 and "ftruncate: errno 28" in (results["preload"] / "stdout").read_text(), rc
    assert "/dev/shm has" in (results["preload"] / "stderr").read_text()
    rc = int((results["plain"] / "rc").read_text())
    assert rc == 128 + 7, (rc, (results["plain"] / "stderr").read_text())  # SIGBUS; 137 would be the OOM killer
    # Both containers' shells outlived the probe: nothing in the pod was OOM-killed.
    states = {c["id"]: c["state"] for c in json.loads(engine.cri("ps").stdout).get("containers", [])}
    assert all(states.get(pod.containers[n]) == "CONTAINER_RUNNING" for n in ("preload", "plain")), states
    # The agent shows which limit sized it, and the CRI's labels.
    p = wait_for(lambda: agent_pod(engine.agent, "ml", "limited"), what="the pod in the agent")
    assert int(p["shm"]["memoryLimitBytes"]) == GiB and p["shm"]["memoryLimitSource"] == SANDBOX_MEMORY
    assert p["labels"] == {"app": "limited"}
    table = engine.agent.cli("pods").stdout
    assert f"1GiB (policy, memory limit from {SANDBOX_MEMORY}, by runtime)" in table, table


def test_agent_only_auto_follows_the_pod_limit(agent_only, pods):
    agent = agent_only.agent
    pod = pods(agent_only, "limited", limit=GiB, ns="batch")
    pod.run()
    pod.container("main", "sleep", "600")
    wait_for(lambda: pod.shm_kib("main") == GiB // 1024, timeout=SCAN + 5, interval=0.2, what="/dev/shm of 1 GiB")
    resized = wait_for(lambda: agent_lines(agent, "reconcile: resized", pod.id), what="the reconcile line")
    assert resized[0]["memory_limit"] == {"bytes": GiB, "source": SANDBOX_MEMORY}
    p = wait_for(lambda: agent_pod(agent, "batch", "limited"), what="the pod in the agent")
    assert p["shm"]["memoryLimitSource"] == SANDBOX_MEMORY and p["labels"] == {"app": "limited"}


# ---- issue 13: what the agent says and sees --------------------------------------

def test_a_runtime_root_above_the_namespace_directories_is_named_with_the_fix(agent_only, pods, tmp_path):
    pod = pods(agent_only, "somebody", ns="batch")
    pod.run()
    base = tmp_path / "wrong-root"
    base.mkdir()
    a = AgentProcess(base, agent_config(base, roots=[agent_only.runc_root])).start()
    try:
        line = wait_for(lambda: [l for l in a.log.read_text().splitlines() if "holds namespace directories" in l],
                        timeout=5, what="the runtime-root warning")[0]
        assert f"{agent_only.runc_root}/k8s.io" in line and "agent.runtimeRoots" in line
        assert json.loads(line)["level"] == "warning"
    finally:
        a.stop()


def test_the_first_container_of_a_new_runtime_root_is_seen_by_inotify(tmp_path, pause_archive, root_and_runc,  # noqa: F811
                                                                      bins, pods):
    """The agent starts before containerd has made its runc root: the first
    pod must be seen within the inotify path (well under the 30 s scan)."""
    engine_base = tmp_path / "late"
    engine_base.mkdir()
    engine = PrivateContainerd(engine_base / "containerd")
    agent_base = tmp_path / "late-agent"
    agent_base.mkdir()
    a = AgentProcess(agent_base, agent_config(agent_base, engine, scan=30)).start()
    try:
        assert not (engine.runc_root / "k8s.io").exists()
        engine = start_containerd(engine_base, pause_archive, install=False)
        pod = pods(engine, "first", ns="late")
        pod.run()
        t0 = time.monotonic()
        wait_for(lambda: agent_pod(a, "late", "first"), timeout=10, interval=0.1, what="the first pod")
        assert time.monotonic() - t0 < 10
    finally:
        a.stop()
        engine.stop()


def test_a_pod_first_seen_over_80_percent_full_gets_the_event(auto_containerd, pods, tmp_path):
    """The pod is already 87.5% full when the agent first sees it (its runc
    state is shown to the agent only then): the 80% event fires at first
    sight, not only on a change between two scans."""
    engine = auto_containerd
    pod = pods(engine, "full", ns="ml", annotations={"shmkeeper.io/shm-size": "64Mi"})
    pod.run()
    pod.container("main", "sleep", "600")
    pod.exec("main", "dd", "if=/dev/zero", "of=/dev/shm/fill", "bs=1M", "count=56")
    root = tmp_path / "root"
    root.mkdir()
    base = tmp_path / "fresh"
    base.mkdir()
    a = AgentProcess(base, agent_config(base, roots=[root]).replace('metricsAddress: ""',
                                                                   'metricsAddress: "127.0.0.1:0"')).start()
    watch = subprocess.Popen([CLI, "watch", "-n", "ml", "--agent", a.sock, "-o", "json"], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        a.wait_watching()
        for cid in (pod.id, pod.containers["main"]):
            (root / cid).mkdir()
            shutil.copy(engine.runc_root / "k8s.io" / cid / "state.json", root / cid / "state.json")
        wait_for(lambda: agent_pod(a, "ml", "full"), timeout=5 * SCAN + 5, what="the pod in the fresh agent")
        time.sleep(1)
    finally:
        watch.terminate()
        out = watch.communicate(timeout=10)[0]
        a.stop()
    assert "80% full" in out and "95% full" not in out, out


def test_agent_only_asks_the_cri_for_the_limit_when_the_spec_does_not_show_it(tmp_path, pause_archive,  # noqa: F811
                                                                              root_and_runc, bins, pods):
    """A runtime that does not write the pod's limit on the sandbox's spec
    (containerd before 1.6, or a spec edited here to look like one): the
    agent asks containerd's PodSandboxStatus, which has the kubelet's config."""
    (tmp_path / "bare").mkdir()
    engine = start_containerd(tmp_path / "bare", pause_archive, install=False)
    try:
        pod = pods(engine, "asked", limit=GiB, ns="batch")
        pod.run()
        pod.container("main", "sleep", "600")
        bundle = engine.state / "io.containerd.runtime.v2.task" / "k8s.io" / pod.id / "config.json"
        spec = json.loads(bundle.read_text())
        assert spec["annotations"].pop("io.kubernetes.cri.sandbox-memory") == str(GiB)
        assert "memory" not in spec.get("linux", {}).get("resources", {})
        bundle.write_text(json.dumps(spec))
        base = tmp_path / "agent"
        base.mkdir()
        a = AgentProcess(base, agent_config(base, engine, reconcile=True)).start()
        try:
            wait_for(lambda: pod.shm_kib("main") == GiB // 1024, timeout=SCAN + 5, interval=0.2,
                     what="/dev/shm of 1 GiB")
            resized = agent_lines(a, "reconcile: resized", pod.id)
            assert resized[0]["memory_limit"] == {"bytes": GiB, "source": "cri:PodSandboxStatus"}
        finally:
            a.stop()
    finally:
        engine.stop()


def test_cri_socket_none_turns_the_cri_off(tmp_path):
    cfg = tmp_path / "agent.yaml"
    cfg.write_text("agent:\n  criSocket: none\n")
    p = run([AGENTD, "--config", cfg, "--check-config"])
    assert json.loads(p.stdout)["agent"]["criSocket"] == ""
    cfg.write_text("agent:\n  criSocket: none\n  reconcile: true\n")
    p = run([AGENTD, "--config", cfg], check=False)
    assert p.returncode == 2 and p.stderr.strip().splitlines() == [
        "shmkeeperd: agent.reconcile needs a CRI socket, but agent.criSocket is none"], p.stderr
