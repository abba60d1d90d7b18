"""The sharing runtime's injection through NRI (issue 38, "The same injection
as the wrapper"): sid's containerd 2.1 (NRI on) in the sid namespace, the
agent on the host connected to its NRI socket, pods created over CRI as the
kubelet does. The agent reads the container's image from containerd's
snapshot (agent.criSocket) to tell a glibc image, and answers CreateContainer
with the wrapper's mounts, env, devices and rlimits (agent/nri_rootfs.h).

The same containerd also has the `shmkeeper` runtime handler that `shmkeeper
install containerd` adds (build/plugin/shmkeeper-runtime), so
one policy file serves both paths: the runtime-handler pods are created while
the agent is stopped (no NRI plugin: the wrapper alone injects), the NRI pods
on the default runc handler while it is connected."""
import json
import shutil

import pytest

from harness import (BUILD, CRI_TOOL, PAUSE_IMAGE, RUNTIME, SHMGROW, df_kib, glibc_rootfs, require, wait_for,
                     write_image_archive)
from nri_env import NriAgent, agent_running, nri_toml, pod_maker, with_cri

import sidroot
from engines_env import shmkeeper

MiB = 1 << 20
GLIBC_IMAGE = "shmkeeper.test/glibc:nri"
LIBRARY = BUILD / "plugin" / "libshmkeeper-preload.so"


@pytest.fixture(scope="module")
def ctd(ns, rootfs, tmp_path_factory):
    """sid's containerd: NRI on, the default runc handler, and a `shmkeeper` handler running the wrapper with
    the same policy as the agent's."""
    require(CRI_TOOL.exists() and SHMGROW.exists() and LIBRARY.exists(), "cri-tool, shmgrow and the preload library")
    base = ns.base / "nri-inj"
    engine = sidroot.SidContainerd(ns, base, PAUSE_IMAGE)
    engine.policy = base / "policy.yaml"
    engine.events = base / "events"
    engine.nri_sock = base / "nri.sock"
    engine.env = {"SHMKEEPER_CONFIG": str(engine.policy)}
    engine.extra_config = nri_toml(engine.nri_sock)
    engine.write_config()
    # The runtime handler as users get it: `shmkeeper install containerd` (the static CLI, in the sid root).
    shmkeeper(ns, "install", "containerd", "--config", engine.config, "--runtime-path", RUNTIME)
    engine.events.mkdir(parents=True, exist_ok=True)
    engine.start()
    for tag, root, cmd in [(PAUSE_IMAGE, rootfs, ["/bin/sleep", "2147483647"]),
                           (GLIBC_IMAGE, glibc_rootfs(tmp_path_factory.mktemp("glibc-nri")), ["sh"])]:
        engine.ctr("images", "import", write_image_archive(root, tag, cmd, base / (tag.split("/")[-1] + ".tar")))
    yield with_cri(engine)
    engine.stop(cri=engine.cri)


class InjectingAgent(NriAgent):
    """test_nri's agent with the policy the wrapper reads too: the event socket's directory (injected into
    glibc containers) and agent.criSocket, the containerd socket the image is read through."""

    def __init__(self, base, engine):
        super().__init__(base, engine.nri_sock)
        self.config = engine.policy
        self.config.write_text(f"""shm:
  default: 256Mi
log:
  path: {base}/decisions.log
agent:
  socket: {self.sock}
  stateDir: {base}/state
  metricsAddress: 127.0.0.1:0
  eventSocket: {engine.events}/events.sock
  dockerSocket: ""
  criSocket: {engine.endpoint}
  nri:
    socket: {engine.nri_sock}
""")


@pytest.fixture(scope="module")
def agent(ctd, tmp_path_factory):
    with agent_running(InjectingAgent(tmp_path_factory.mktemp("nri-inject-agent"), ctd)) as a:
        yield a


class Pod:
    """One pod sandbox (on `handler`, "" = the default runc) with one container whose output goes to a host
    directory bound at /out."""

    def __init__(self, engine, ns_name, name, annotations, handler=""):
        self.engine = engine
        self.dir = engine.base / "pods" / ns_name / name
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "out").mkdir(parents=True)
        cfg = {"metadata": {"name": name, "namespace": ns_name, "uid": f"uid-{ns_name}-{name}"},
               "annotations": annotations,
               "linux": {"security_context": {"namespace_options": {"network": "NODE"}}}}
        (self.dir / "pod.json").write_text(json.dumps(cfg))
        self.id = engine.cri("runp", self.dir / "pod.json", *([handler] if handler else [])).stdout.strip()
        self.cid = None

    def start(self, image, script):
        cfg = {"metadata": {"name": "main"}, "image": {"image": image}, "command": ["sh", "-c", script],
               "mounts": [{"container_path": "/out", "host_path": str(self.dir / "out")}]}
        (self.dir / "main.json").write_text(json.dumps(cfg))
        self.cid = self.engine.cri("create", self.id, self.dir / "main.json", self.dir / "pod.json").stdout.strip()
        self.engine.cri("start", self.cid)
        return self

    def output(self, name="out", until="exit="):
        path = self.dir / "out" / name
        return wait_for(lambda: path.exists() and until in path.read_text() and path.read_text(), timeout=60,
                        what=f"the container's {name}")

    def config_json(self):
        """The container's OCI config.json as runc got it: the bundle in containerd's state dir."""
        return json.loads((self.engine.base / "state" / "io.containerd.runtime.v2.task" / "k8s.io" / self.cid /
                           "config.json").read_text())

    def remove(self):
        self.engine.cri("stopp", self.id, check=False)
        self.engine.cri("rmp", self.id, check=False)


@pytest.fixture
def pods(ctd):
    with pod_maker(lambda *a, **kw: Pod(ctd, *a, **kw)) as make:
        yield make


OVERFILL = "shmgrow env > /out/out; shmgrow create big 64 >> /out/out 2>&1; echo exit=$? >> /out/out; sleep 600"


def test_nri_glibc_container_gets_enospc_instead_of_sigbus_from_the_injected_preload(agent, pods):
    """A 32 MiB pod whose glibc program asks for 64 MiB: the preload the agent injected through NRI answers
    ftruncate with ENOSPC (exit 28). Control: the same pod with `shmkeeper.io/inject: "false"` gets no preload
    and dies of SIGBUS writing past the tmpfs (exit 135)."""
    before = agent.metrics()
    pod = pods("nri", "enospc", {"shmkeeper.io/shm-size": "32Mi"}).start(GLIBC_IMAGE, OVERFILL)
    out = pod.output()
    assert out.splitlines()[0] == "/run/shmkeeper/libshmkeeper-preload.so", out
    assert "ftruncate: errno 28" in out and "exit=28" in out, out  # ENOSPC, not SIGBUS
    assert "shmkeeper: cannot fit 64.0 MiB for /dev/shm/big" in out, out
    control = pods("nri", "sigbus", {"shmkeeper.io/shm-size": "32Mi", "shmkeeper.io/inject": "false"})
    out = control.start(GLIBC_IMAGE, OVERFILL).output()
    assert out.splitlines()[0] == "none" and "exit=135" in out, out  # 128 + SIGBUS
    after = agent.metrics()
    key = 'shmkeeper_nri_injections_total{what="preload",outcome="%s"}'
    assert after[key % "injected"] == before[key % "injected"] + 1
    assert after[key % "skipped"] >= before[key % "skipped"] + 1  # the opt-out (and the sandboxes' pause)
    assert after[key % "undecided"] == before[key % "undecided"]


def injected_view(pod):
    """What the comparison reads of a container's config.json, normalised for what legitimately differs
    between two pods and two paths:
    - the sandbox's and the container's ids (and the pod's CRI namespace, which is part of no path here) in
      mount sources (/dev/shm is containerd's sandboxes/<pod id>/shm, /etc/hosts, resolv.conf, ... are
      per-pod files): replaced by <pod> and <ctr>; the test's own /out volume is per pod too;
    - the order of the mounts: containerd applies an NRI adjustment's mounts and then sorts all of them by
      destination depth (containerd/nri pkg/runtime-tools/generate AdjustMounts), while the wrapper puts its
      own first; none of them nests in another, so the order is not the container's view: sorted here;
    - the order of the env: NRI appends new variables in name order, the wrapper in its own: a set here.
    Nothing else is normalised: the mounts' types and options, the env values, linux.devices, the device
    cgroup's rules and process.rlimits are compared as runc got them."""
    spec = pod.config_json()

    def norm(s):
        return s.replace(pod.id, "<pod>").replace(pod.cid, "<ctr>").replace(str(pod.dir), "<pod dir>")
    mounts = sorted((m["destination"], m.get("type", ""), norm(m.get("source", "")), tuple(m.get("options", [])))
                    for m in spec.get("mounts", []))
    linux = spec.get("linux", {})
    return {"mounts": mounts, "env": sorted(spec["process"].get("env", [])),
            "devices": linux.get("devices", []), "device_rules": linux.get("resources", {}).get("devices", []),
            "rlimits": spec["process"].get("rlimits", [])}


def test_nri_and_the_runtime_handler_give_the_same_pods_the_same_dev_shm_and_the_same_injection(ctd, agent, pods):
    """Three pods (a glibc one, the same opted out, a static busybox one), once through the `shmkeeper`
    runtime handler (the wrapper, the agent stopped: no NRI plugin) and once on the default runc handler with
    the agent connected: each pair ends with the same /dev/shm size and the same mounts, env, devices and
    rlimits in config.json. Control: the glibc pod's view differs from the opted-out one's (the comparison can
    tell an injection from none)."""
    cases = [("glibc", GLIBC_IMAGE, {"shmkeeper.io/shm-size": "48Mi"}),
             ("opted-out", GLIBC_IMAGE, {"shmkeeper.io/shm-size": "48Mi", "shmkeeper.io/inject": "false"}),
             ("static", PAUSE_IMAGE, {})]
    script = "df -k /dev/shm > /out/df; echo exit=0 >> /out/df; sleep 600"
    agent.stop()
    handler = {name: pods("rh", name, ann, handler="shmkeeper").start(image, script) for name, image, ann in cases}
    handler_view = {name: (df_kib(p.output("df")), injected_view(p)) for name, p in handler.items()}
    agent.start()
    nri = {name: pods("nri", name, ann).start(image, script) for name, image, ann in cases}
    nri_view = {name: (df_kib(p.output("df")), injected_view(p)) for name, p in nri.items()}
    assert handler_view["glibc"][0] == 48 * MiB // 1024 and handler_view["static"][0] == 256 * MiB // 1024
    for name in handler_view:
        assert nri_view[name] == handler_view[name], name
    glibc_env = set(nri_view["glibc"][1]["env"]) - set(nri_view["opted-out"][1]["env"])
    assert glibc_env == {"LD_PRELOAD=/run/shmkeeper/libshmkeeper-preload.so",
                         "SHMKEEPER_EVENT_SOCKET=/run/shmkeeper/events/events.sock"}, glibc_env
    ours = [m for m in nri_view["glibc"][1]["mounts"] if m[0].startswith("/run/shmkeeper")]
    assert ours == [("/run/shmkeeper/events", "bind", str(ctd.events), ("bind", "ro", "nosuid", "nodev", "noexec")),
                    ("/run/shmkeeper/libshmkeeper-preload.so", "bind", str(LIBRARY),
                     ("bind", "ro", "nosuid", "nodev"))], ours


def test_nri_an_image_the_agent_cannot_read_is_created_sized_without_the_preload_counted_and_logged(
        ctd, agent, pods, tmp_path_factory):
    """agent.criSocket none: the agent cannot read the container's image, so it cannot tell glibc. The pod is
    created and sized all the same, with no preload (the overfill dies of SIGBUS), the skip is counted as
    undecided and logged as a warning with the reason. Control: the same pod with the agent that reads the
    image (the first test) gets ENOSPC."""
    agent.stop()
    blind = InjectingAgent(tmp_path_factory.mktemp("nri-blind-agent"), ctd)
    blind.config = blind.base / "blind.yaml"
    blind.config.write_text(ctd.policy.read_text().replace(f"criSocket: {ctd.endpoint}", "criSocket: none"))
    blind.start()
    try:
        pod = pods("nri", "blind", {"shmkeeper.io/shm-size": "32Mi"}).start(GLIBC_IMAGE, OVERFILL)
        out = pod.output()
        assert out.splitlines()[0] == "none" and "exit=135" in out, out
        m = blind.metrics()
        assert m['shmkeeper_nri_injections_total{what="preload",outcome="undecided"}'] == 1
        assert m['shmkeeper_nri_decisions_total{action="resize"}'] == 1  # sized: 64 MiB -> 32 MiB
        line = blind.wait_log("nri/blind container main: inject skip: the image cannot be read")[0]
        assert line["level"] == "warning" and "agent.criSocket is none" in line["msg"], line
    finally:
        blind.stop()
        agent.start()
