"""Kubernetes without a cluster: a private containerd with its CRI plugin,
configured by `shmkeeper install containerd`, driven over its CRI gRPC socket
exactly as the kubelet does (RunPodSandbox with annotations, CreateContainer,
StartContainer; host network, so no CNI). What /dev/shm is inside the
containers, and what the agent reports, are read from the real thing."""
import json
import os
import shutil

import pytest

from harness import (BUILD, CLI, CRI_TOOL, REPO, PAUSE_IMAGE, RUNTIME, SHMTOOL, AgentProcess, PrivateContainerd, df_kib, require,
                     run, shm_mounts_under, wait_for, write_image_archive)

MiB = 1 << 20
GiB = 1 << 30
POLICY_DEFAULT = 256 * MiB
SCAN = 1  # agent scan interval, seconds


@pytest.fixture(scope="module")
def pause_archive(tmp_path_factory, rootfs):
    require(shutil.which("containerd") is not None, "containerd is not installed")
    require(CRI_TOOL.exists(), f"cri-tool not built at {CRI_TOOL}")
    return write_image_archive(rootfs, PAUSE_IMAGE, ["/bin/sleep", "2147483647"],
                               tmp_path_factory.mktemp("images") / "pause.tar")


def start_containerd(base, pause_archive, install):
    policy = base / "shmkeeper.yaml"
    policy.write_text(f"shm:\n  default: 256Mi\nlog:\n  path: {base}/runtime.log\n")
    engine = PrivateContainerd(base / "containerd", env={"SHMKEEPER_CONFIG": str(policy)})
    engine.base.mkdir(parents=True)
    engine.write_config()
    if install:
        run([CLI, "install", "containerd", "--config", engine.config, "--set-as-default", "--runtime-path", RUNTIME])
    engine.start()
    engine.import_image(pause_archive)
    engine.policy = policy
    return engine


@pytest.fixture(scope="module")
def containerd(tmp_path_factory, pause_archive, root_and_runc, bins):
    """containerd with shmkeeper installed as its default CRI runtime."""
    engine = start_containerd(tmp_path_factory.mktemp("cri"), pause_archive, install=True)
    yield engine
    engine.stop()


class Pod:
    """One pod sandbox and its containers, created the kubelet's way."""

    def __init__(self, engine, base, name, ns="default", annotations=None):
        self.engine, self.name, self.ns = engine, name, ns
        self.dir = base / f"{ns}_{name}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = {"metadata": {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}"},
                       "annotations": annotations or {}, "labels": {"app": name},
                       "linux": {"security_context": {"namespace_options": {"network": "NODE"}}}}
        self.config_path = self.dir / "pod.json"
        self.config_path.write_text(json.dumps(self.config))
        self.id = None
        self.containers = {}

    def run(self, check=True):
        p = self.engine.cri("runp", self.config_path, check=check)
        self.id = p.stdout.strip() if p.returncode == 0 else None
        return p

    def container(self, name, *cmd, mounts=(), image=PAUSE_IMAGE):
        cfg = {"metadata": {"name": name}, "image": {"image": image}, "command": list(cmd),
               "mounts": [{"container_path": c, "host_path": str(h), "readonly": True} for c, h in mounts]}
        path = self.dir / f"{name}.json"
        path.write_text(json.dumps(cfg))
        cid = self.engine.cri("create", self.id, path, self.config_path).stdout.strip()
        self.engine.cri("start", cid)
        self.containers[name] = cid
        return cid

    def exec(self, name, *cmd, check=True):
        return self.engine.cri("exec", self.containers[name], *cmd, check=check)

    def shm_kib(self, name):
        return df_kib(self.exec(name, "df", "-k", "/dev/shm").stdout)

    def remove(self):
        if self.id:
            self.engine.cri("stopp", self.id, check=False)
            self.engine.cri("rmp", self.id, check=False)
            self.id = None


@pytest.fixture
def pods(containerd, tmp_path):
    made = []

    def make(name, **kw):
        p = Pod(kw.pop("engine", containerd), tmp_path, name, **kw)
        made.append(p)
        return p
    yield make
    for p in made:
        p.remove()


def sandbox_shm(engine, pod_id):
    return engine.state / "io.containerd.grpc.v1.cri" / "sandboxes" / pod_id / "shm"


def test_annotation_sizes_the_pod_and_its_containers_share_one_tmpfs(pods):
    pod = pods("big", annotations={"shmkeeper.io/shm-size": "2Gi"})
    pod.run()
    pod.container("a", "sleep", "600")
    pod.container("b", "sleep", "600")
    assert pod.shm_kib("a") == 2 * GiB // 1024
    assert pod.shm_kib("b") == 2 * GiB // 1024
    pod.exec("a", "sh", "-c", "echo from-a > /dev/shm/shared")
    assert pod.exec("b", "cat", "/dev/shm/shared").stdout.strip() == "from-a"
    st = os.statvfs(sandbox_shm(pod.engine, pod.id))
    assert st.f_blocks * st.f_frsize == 2 * GiB  # the host-side sandbox tmpfs itself


@pytest.mark.parametrize("annotations,expected", [
    ({}, POLICY_DEFAULT),
    ({"shm-size.crio.io": "1Gi"}, GiB),
    ({"io.kubernetes.cri-o.ShmSize": "512Mi"}, 512 * MiB),
], ids=["policy-default", "crio-annotation", "crio-legacy-annotation"])
def test_size_from_policy_or_crio_annotations(pods, annotations, expected):
    pod = pods("sized", annotations=annotations)
    pod.run()
    pod.container("main", "sleep", "600")
    assert pod.shm_kib("main") == expected // 1024


def test_invalid_annotation_fails_run_pod_sandbox_and_leaves_nothing(containerd, pods):
    pod = pods("bad", annotations={"shmkeeper.io/shm-size": "lots"})
    p = pod.run(check=False)
    assert p.returncode != 0
    assert 'shmkeeper: annotation shmkeeper.io/shm-size: invalid size "lots"' in p.stderr
    assert not [m for m in shm_mounts_under(str(containerd.state)) if "/sandboxes/" in m]
    assert all(s["metadata"]["name"] != "bad" for s in containerd.pods())


def test_install_is_idempotent_and_uninstall_restores_the_bytes(containerd, tmp_path):
    cfg = tmp_path / "config.toml"
    original = (containerd.config.parent / "config.toml.shmkeeper-backup").read_text()  # before the fixture's install
    cfg.write_text(original)
    run([CLI, "install", "containerd", "--config", cfg, "--runtime-path", RUNTIME])
    once = cfg.read_bytes()
    assert "already installed" in run([CLI, "install", "containerd", "--config", cfg,
                                       "--runtime-path", RUNTIME]).stdout
    assert cfg.read_bytes() == once
    dump = run(["containerd", "--config", cfg, "config", "dump"]).stdout
    assert f'BinaryName = "{RUNTIME}"' in dump and f'sandbox_image = "{PAUSE_IMAGE}"' in dump
    assert "restrict_oom_score_adj = true" in dump  # the user's CRI settings survive
    run([CLI, "uninstall", "containerd", "--config", cfg])
    assert cfg.read_text() == original
    assert not (tmp_path / "config.toml.shmkeeper-backup").exists()


def test_bad_containerd_config_is_refused_untouched(tmp_path):
    cfg = tmp_path / "config.toml"
    cfg.write_text('version = 2\n[plugins."io.containerd.grpc.v1.cri"\n')
    p = run([CLI, "install", "containerd", "--config", cfg, "--runtime-path", RUNTIME], check=False)
    assert p.returncode == 2 and f"{cfg}:2:" in p.stderr and len(p.stderr.strip().splitlines()) == 1
    assert cfg.read_text() == 'version = 2\n[plugins."io.containerd.grpc.v1.cri"\n'
    assert list(tmp_path.iterdir()) == [cfg]


def test_install_and_uninstall_check_what_the_running_containerd_loaded(tmp_path, bins):
    """containerd reads config.toml only at start: install/uninstall ask the
    running containerd (CRI Status, verbose: the config it loaded) and, while
    it runs without the change, exit 3 naming the restart; after the restart
    the same command exits 0. Bad input changes nothing."""
    require(shutil.which("containerd") is not None, "containerd is not installed")
    engine = PrivateContainerd(tmp_path / "ctd")
    engine.base.mkdir(parents=True)
    engine.write_config()
    original = engine.config.read_bytes()
    engine.start()
    try:
        pid = engine.proc.pid
        # `unshare --net -- containerd`: the containerd is unshare's child or unshare itself (exec)
        pids = {pid} | {int(c) for c in run(["pgrep", "-P", str(pid)], check=False).stdout.split()}
        install = [CLI, "install", "containerd", "--config", engine.config, "--runtime-path", RUNTIME]
        p = run(install, check=False)
        assert p.returncode == 3, (p.stdout, p.stderr)
        assert "does not have it yet" in p.stdout
        [line] = p.stderr.strip().splitlines()
        assert any(f"containerd (pid {x}, {engine.sock})" in line for x in pids), line
        assert 'still runs with default runtime "runc", handlers runc' in line
        # no systemd on this machine: the plain-host wording (a unit/distribution would be named)
        assert "no init system shmkeeper knows runs it" in line and f"containerd --config {engine.config}" in line
        assert f"BinaryName = '{RUNTIME}'" in engine.config.read_text()  # the file is as asked

        # Bad input while it runs: one line, exit 2, not a byte changed, no temp file.
        written = engine.config.read_bytes()
        before = sorted(engine.base.iterdir())
        p = run([*install, "--runtime-name", "no such"], check=False)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert engine.config.read_bytes() == written and sorted(engine.base.iterdir()) == before

        engine.stop()
        engine.start()
        p = run(install, check=False)
        assert p.returncode == 0 and "already installed" in p.stdout, (p.stdout, p.stderr)
        # The handler is loaded, but not as the default: --set-as-default needs another restart.
        p = run([*install, "--set-as-default"], check=False)
        assert p.returncode == 3 and 'default runtime "runc"' in p.stderr, (p.stdout, p.stderr)
        engine.stop()
        engine.start()
        assert run([*install, "--set-as-default"], check=False).returncode == 0

        p = run([CLI, "uninstall", "containerd", "--config", engine.config], check=False)
        assert p.returncode == 3, (p.stdout, p.stderr)
        # an uninstall the running containerd has not applied: it still has the handler (not "does not have it yet")
        assert "the running containerd still has it" in p.stdout and "does not have it" not in p.stdout, p.stdout
        assert f'still runs with default runtime "shmkeeper", handlers runc, shmkeeper ({RUNTIME})' in p.stderr
        assert "(the default: every new pod) still runs shmkeeper-runtime" in p.stderr
        assert engine.config.read_bytes() == original
        engine.stop()
        engine.start()
        p = run([CLI, "uninstall", "containerd", "--config", engine.config], check=False)
        assert p.returncode == 0 and "already uninstalled" in p.stdout, (p.stdout, p.stderr)
    finally:
        engine.stop()
    # Nothing uses the file now: exit 0, and it says when the change applies.
    p = run(install, check=False)
    assert p.returncode == 0 and "no running containerd uses it" in p.stdout, (p.stdout, p.stderr)


# ---- the agent on a CRI node -------------------------------------------------

@pytest.fixture(scope="module")
def cri_agent(containerd, tmp_path_factory):
    require(SHMTOOL.exists(), f"shmtool not built at {SHMTOOL}")
    base = tmp_path_factory.mktemp("cri-agent")
    a = AgentProcess(base, f"""
agent:
  socket: {base}/agent.sock
  eventSocket: {base}/events.sock
  metricsAddress: ""
  scanInterval: {SCAN}s
  runtimeRoots: [{containerd.runc_root}/k8s.io]
  dockerSocket: ""
leaks:
  grace: 1s
""").start()
    yield a
    a.stop()


def agent_pod(agent, ns, name):
    for p in agent.json("pods").get("pods", []):
        if p.get("namespace") == ns and p.get("name") == name:
            return p
    return None


def test_agent_reports_kubernetes_pods_with_usage_holders_and_sizing(pods, cri_agent):
    pod = pods("trainer", ns="ml", annotations={"shmkeeper.io/shm-size": "1Gi"})
    pod.run()
    pod.container("worker", "/t/shmtool", "hold", "data", "100", mounts=[("/t/shmtool", SHMTOOL)])
    p = wait_for(lambda: (q := agent_pod(cri_agent, "ml", "trainer")) and int(q["shm"].get("usedBytes", 0)) >= 95 * MiB
                 and q, timeout=10, what="the pod's usage")
    assert p["kind"] == "POD_KIND_KUBERNETES" and p["uid"] == "uid-ml-trainer"
    assert abs(int(p["shm"]["usedBytes"]) - 100 * MiB) <= 5 * MiB
    assert int(p["shm"]["sizeBytes"]) == GiB
    assert p["shm"]["sizedBy"] == "runtime"
    assert p["shm"]["requestedSource"] == "annotation:shmkeeper.io/shm-size"
    seg = p["topSegments"][0]
    assert seg["path"] == "/dev/shm/data" and any("shmtool" in h["command"] for h in seg["holders"])
    table = cri_agent.cli("pods").stdout
    assert any(line.split()[:2] == ["ml", "trainer"] for line in table.splitlines())


def test_memcg_shmem_of_a_cri_pod_is_its_workload_containers(pods, cri_agent):
    """The pause container and each workload container have memory cgroups of their own: the 20 MiB the
    workload writes to /dev/shm are charged to the workload's, and the pod's memcgShmemBytes counts them
    (reading only the pause container's cgroup, it was 0)."""
    pod = pods("memcg", ns="ml")
    pod.run()
    cid = pod.container("writer", "/t/shmtool", "hold", "data", "20", mounts=[("/t/shmtool", SHMTOOL)])
    init = lambda i: json.loads((pod.engine.runc_root / "k8s.io" / i / "state.json").read_text())["init_process_pid"]  # noqa: E731
    sandbox_pid, workload_pid = init(pod.id), init(cid)
    memcg = lambda pid: [l.split(":")[2] for l in open(f"/proc/{pid}/cgroup").read().splitlines()  # noqa: E731
                         if "memory" in l.split(":")[1].split(",") or l.startswith("0::")][0]
    assert memcg(sandbox_pid) != memcg(workload_pid)  # what makes the pause container's cgroup the wrong one
    p = wait_for(lambda: (q := agent_pod(cri_agent, "ml", "memcg")) and int(q["shm"].get("memcgShmemBytes", 0))
                 >= 20 * MiB and q, timeout=15, what="the pod's memcgShmemBytes >= 20 MiB")
    assert int(p["shm"]["usedBytes"]) >= 20 * MiB


def test_agent_finds_and_reclaims_a_leak_in_a_cri_pod(pods, cri_agent):
    pod = pods("leaky", ns="ml")
    pod.run()
    pod.container("main", "/t/shmtool", "map", "mapped", "4", mounts=[("/t/shmtool", SHMTOOL)])
    wait_for(lambda: "mapped" in pod.exec("main", "ls", "/dev/shm").stdout.split(), what="the mapped segment")
    out = pod.exec("main", "/t/shmtool", "torch-leak", "8", check=False).stdout
    creator = int(out.split()[1])

    def leaks():
        return [l for l in cri_agent.json("leaks").get("leaks", [])
                if l["pod"].get("name") == "leaky" and l["pod"].get("namespace") == "ml"]
    leak = wait_for(lambda: [l for l in leaks() if l["state"] == "LEAK_STATE_LEAKED" and l.get("reclaimable")],
                    timeout=2 * SCAN + 5, what="a reclaimable leak")[0]
    assert leak["path"] == f"/dev/shm/torch_{creator}_0" and int(leak["bytes"]) == 8 * MiB
    assert "/dev/shm/mapped" not in {l.get("path") for l in leaks()}
    shm = sandbox_shm(pod.engine, pod.id)
    used = lambda: (lambda s: (s.f_blocks - s.f_bfree) * s.f_frsize)(os.statvfs(shm))  # noqa: E731
    before = used()
    done = cri_agent.json("reclaim", "--yes", "-n", "ml", "--pod", "leaky")
    assert int(done.get("freedBytes", 0)) == 8 * MiB, (done, cri_agent.json("reclaim", "-n", "ml", "--pod", "leaky"), leaks())
    assert before - used() >= 8 * MiB  # statfs on the sandbox tmpfs confirms
    assert "mapped" in pod.exec("main", "ls", "/dev/shm").stdout.split()


def test_agent_reports_a_sysv_leak_with_its_pod_and_survives_a_restart(pods, cri_agent):
    pod = pods("ipc", ns="ml")
    pod.run()
    pod.container("main", "sleep", "600", mounts=[("/t/shmtool", SHMTOOL)])
    shmid = int(pod.exec("main", "/t/shmtool", "sysv", "2").stdout.split()[1])

    def sysv_leak():
        return [l for l in cri_agent.json("leaks").get("leaks", [])
                if l.get("sysvId", 0) == shmid and l["pod"].get("namespace") == "ml" and l["pod"]["name"] == "ipc"]
    # unheld at first sight, leaked once leaks.grace is over
    leak = wait_for(lambda: [l for l in sysv_leak() if l["state"] == "LEAK_STATE_LEAKED"], timeout=2 * SCAN + 8,
                    what="the SysV leak")[0]
    assert int(leak["bytes"]) == 2 * MiB
    cri_agent.stop()
    cri_agent.start()  # rebuilds its view from the node alone
    assert sysv_leak() and agent_pod(cri_agent, "ml", "ipc")["shm"]["sysvSegments"] == 1


# ---- agent-only mode: plain runc, the agent sizes the pods ---------------------

@pytest.fixture(scope="module")
def plain_containerd(tmp_path_factory, pause_archive, root_and_runc, bins):
    engine = start_containerd(tmp_path_factory.mktemp("cri-plain"), pause_archive, install=False)
    yield engine
    engine.stop()


@pytest.fixture(scope="module")
def reconciler(plain_containerd, tmp_path_factory):
    base = tmp_path_factory.mktemp("reconciler")
    a = AgentProcess(base, f"""
shm:
  default: 256Mi
agent:
  socket: {base}/agent.sock
  eventSocket: {base}/events.sock
  metricsAddress: ""
  scanInterval: {SCAN}s
  runtimeRoots: [{plain_containerd.runc_root}/k8s.io]
  dockerSocket: ""
  criSocket: {plain_containerd.endpoint}
  reconcile: true
""").start()
    yield a
    a.stop()


@pytest.mark.parametrize("annotations,expected", [
    ({"shmkeeper.io/shm-size": "2Gi"}, 2 * GiB),
    ({}, POLICY_DEFAULT),
    ({"shm-size.crio.io": "1Gi"}, GiB),
], ids=["annotation", "policy-default", "crio-annotation"])
def test_agent_only_mode_sizes_pods_within_one_scan(plain_containerd, reconciler, pods, annotations, expected):
    pod = pods("reconciled", ns="batch", annotations=annotations, engine=plain_containerd)
    pod.run()
    pod.container("main", "sleep", "600")
    # The agent is the only thing that can resize here: plain runc gave 64 MiB.
    wait_for(lambda: pod.shm_kib("main") == expected // 1024, timeout=SCAN + 3, interval=0.2,
             what=f"/dev/shm of {expected} bytes")
    p = wait_for(lambda: agent_pod(reconciler, "batch", "reconciled"), what="the pod in the agent")
    assert p["shm"]["sizedBy"] == "reconcile"


def test_agent_only_mode_leaves_a_bad_annotation_at_the_engine_size(plain_containerd, reconciler, pods):
    pod = pods("typo", ns="batch", annotations={"shmkeeper.io/shm-size": "lots"}, engine=plain_containerd)
    pod.run()
    pod.container("main", "sleep", "600")
    wait_for(lambda: 'invalid size \\"lots\\"' in reconciler.log.read_text(), timeout=SCAN + 3,
             what="the reconcile warning")
    assert pod.shm_kib("main") == 64 * 1024


def test_offline_built_agent_image_runs_under_containerd(containerd, pods, tmp_path):
    """deploy/image/build-offline.sh: the DaemonSet's image, built without a
    registry, imported and run the way the kubelet would run it."""
    archive = tmp_path / "shmkeeper.tar"
    run([REPO / "deploy" / "image" / "build-offline.sh", BUILD, archive, "shmkeeper.test/shmkeeper:test"])
    containerd.import_image(archive)
    pod = pods("agent", ns="shmkeeper")
    pod.run()
    pod.container("agent", "/bin/sleep", "600", image="shmkeeper.test/shmkeeper:test")
    assert pod.exec("agent", "/usr/local/bin/shmkeeperd", "--version").stdout.startswith("shmkeeperd ")
    p = pod.exec("agent", "/usr/local/bin/shmkeeperd", "--check-config", "--config", "/etc/shmkeeper/config.yaml")
    assert json.loads(p.stdout)["agent"]["socket"] == "/run/shmkeeper/agent.sock"
    p = pod.exec("agent", "/usr/local/bin/node-setup.sh", check=False)
    assert p.returncode == 1 and "usage: node-setup.sh install|uninstall|idle" in p.stderr
