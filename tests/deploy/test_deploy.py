"""The cluster deployment as a user gets it: `kubectl kustomize` renders the
manifests (kubectl is real here; no API server is), the rendered objects
hold together, the policy they carry parses with the agent's own parser, the
Helm chart agrees with them, and node-setup.sh (what the DaemonSet runs on a
node) registers shmkeeper with a node's runtime config and takes it back."""
import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from harness import AGENTD, BUILD, REPO, require, run
from k8s_render import BASE, RELEASE_LABEL, kustomize, overlay

VERSION = re.search(r"project\(shmkeeper VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
CHART = REPO / "helm" / "shmkeeper"
SETUP = REPO / "deploy" / "image" / "node-setup.sh"


def by_kind(docs, kind):
    return [d for d in docs if d["kind"] == kind]


def check_policy(tmp_path, text):
    f = tmp_path / "policy.yaml"
    f.write_text(text)
    p = run([AGENTD, "--check-config", "--config", f], check=False)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


@pytest.fixture(scope="module")
def rendered():
    return kustomize(BASE)


def test_kustomize_renders_every_object(rendered):
    kinds = sorted(d["kind"] for d in rendered)
    assert kinds == ["ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "DaemonSet", "Namespace",
                     "RuntimeClass", "Service", "ServiceAccount"]
    for d in rendered:
        if d["kind"] not in ("Namespace", "RuntimeClass", "ClusterRole", "ClusterRoleBinding"):
            assert d["metadata"]["namespace"] == "shmkeeper"


def daemonset(docs, name="shmkeeper"):
    return next(d for d in by_kind(docs, "DaemonSet") if d["metadata"]["name"] == name)


def test_daemonset_mounts_and_images_hold_together(rendered):
    for ds in by_kind(rendered, "DaemonSet"):
        pod = ds["spec"]["template"]["spec"]
        volumes = {v["name"] for v in pod["volumes"]}
        containers = pod["containers"] + pod["initContainers"]
        for c in containers:
            assert c["image"] == f"shmkeeper/shmkeeper:{VERSION}"  # the image tag is the project version
            assert "lifecycle" not in c  # no preStop: a liveness kill or a rolling update must not uninstall
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, f"{c['name']} mounts {m['name']}, which has no volume"
        # Host paths are checked, never created (no runtime directories appear on nodes using another
        # runtime), except shmkeeper's own: the install root, /etc/shmkeeper and its decision log's directory.
        for v in pod["volumes"]:
            if "hostPath" in v:
                own = ("install-root", "host-policy", "decision-log")
                assert v["hostPath"]["type"] == ("DirectoryOrCreate" if v["name"] in own else "Directory"), v
        assert pod["hostPID"] is True
        assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
        for c in containers:
            for cmd in (c.get("command") or [])[:1]:
                if cmd.startswith("/usr/local/bin/"):
                    name = cmd.rsplit("/", 1)[1]
                    assert (REPO / "deploy" / "image" / name).exists() or (BUILD / "plugin" / name).exists(), cmd
    ds = daemonset(rendered)
    pod = ds["spec"]["template"]["spec"]
    cm = by_kind(rendered, "ConfigMap")[0]["metadata"]["name"]
    assert [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v] == [cm]
    svc = by_kind(rendered, "Service")[0]
    assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    assert not svc["spec"]["selector"].items() <= daemonset(rendered, "shmkeeper-uninstall")["spec"]["template"][
        "metadata"]["labels"].items()
    ports = {p["name"]: p["containerPort"] for c in pod["containers"] for p in c.get("ports", [])}
    assert svc["spec"]["ports"][0]["targetPort"] in ports
    # The port the Service and the readiness probe name is the policy's agent.metricsAddress port.
    policy = yaml.safe_load(by_kind(rendered, "ConfigMap")[0]["data"]["config.yaml"])
    assert int(policy["agent"]["metricsAddress"].rsplit(":", 1)[1]) == ports["metrics"] == svc["spec"]["ports"][0]["port"]
    agent = pod["containers"][0]
    assert agent["livenessProbe"]["exec"]["command"][-1] == "--probe"
    mounts = {m["mountPath"]: m for m in agent["volumeMounts"]}
    assert mounts["/run"]["mountPropagation"] == "HostToContainer"  # /run/crun, /run/containerd, ... and new sandboxes
    # The agent leaves nodes labelled for uninstall; the uninstall DaemonSet runs only there.
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term["matchExpressions"] == [{"key": "shmkeeper.io/uninstall", "operator": "NotIn", "values": ["true"]}]
    un = daemonset(rendered, "shmkeeper-uninstall")["spec"]["template"]["spec"]
    assert un["nodeSelector"] == {"shmkeeper.io/uninstall": "true"}
    assert un["initContainers"][0]["command"] == ["/usr/local/bin/node-setup.sh", "uninstall"]


def test_policy_configmap_parses_with_the_agents_parser(rendered, tmp_path):
    text = by_kind(rendered, "ConfigMap")[0]["data"]["config.yaml"]
    eff = check_policy(tmp_path, text)
    assert eff["agent"]["socket"] == "/run/shmkeeper/agent.sock"
    assert eff["agent"]["metricsAddress"].endswith(":9731")


def test_runtimeclass_names_the_handler_install_registers(rendered):
    rc = by_kind(rendered, "RuntimeClass")[0]
    assert rc["metadata"]["name"] == "shmkeeper" and rc["handler"] == "shmkeeper"
    # Pods naming it land only on nodes the install container labelled ready.
    assert rc["scheduling"]["nodeSelector"] == {"shmkeeper.io/runtime": "ready"}


def kustomize_overlay(tmp_path, components):
    """Renders an overlay of the base with the given components (kustomize wants relative paths)."""
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    up = Path("..") / Path(*[".."] * len(tmp_path.parts[1:]))
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [str(up / BASE.relative_to("/"))],
        "components": [str(up / (BASE / c).relative_to("/")) for c in components]}))
    return kustomize(overlay)


def test_components_render(tmp_path):
    docs = kustomize(overlay(tmp_path, ["components/agent-only", "components/servicemonitor"], RELEASE_LABEL))
    pod = daemonset(docs)["spec"]["template"]["spec"]
    init_env = {e["name"]: e.get("value") for e in pod["initContainers"][0]["env"]}
    assert init_env["SHMKEEPER_AGENT_ONLY"] == "true" and init_env["SHMKEEPER_RESTART_RUNTIME"] == "auto"
    assert "--reconcile" in pod["containers"][0]["command"]
    un = daemonset(docs, "shmkeeper-uninstall")["spec"]["template"]["spec"]
    assert {e["name"]: e.get("value") for e in un["initContainers"][0]["env"]}["SHMKEEPER_AGENT_ONLY"] == "true"
    assert not by_kind(docs, "RuntimeClass")  # agent-only registers no handler
    sm = by_kind(docs, "ServiceMonitor")[0]
    assert sm["spec"]["endpoints"][0]["port"] == "metrics"
    assert sm["metadata"]["namespace"] == "shmkeeper" and sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    svc = by_kind(docs, "Service")[0]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["metadata"]["namespace"] == svc["metadata"]["namespace"] and "namespaceSelector" not in sm["spec"]
    endpoint = by_kind(docs, "ServiceMonitor")[0]["spec"]["endpoints"][0]
    assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True
    assert {r["targetLabel"] for r in endpoint["relabelings"]} == {"job", "node"}  # what the rules select on


# ---- monitoring: rules and dashboard as the operator and Grafana's sidecar get them --

MONITORING = REPO / "deploy" / "monitoring"


def test_monitoring_copies_are_in_sync():
    p = run(["python3", MONITORING / "sync.py", "--check"], check=False)
    assert p.returncode == 0, p.stdout + p.stderr


def test_prometheusrule_and_dashboard_components_render(tmp_path):
    require(shutil.which("promtool") is not None, "promtool (prometheus) is not installed")
    docs = kustomize_overlay(tmp_path, ("components/prometheusrule", "components/grafana-dashboard"))
    rule = by_kind(docs, "PrometheusRule")[0]
    assert rule["metadata"]["namespace"] == "shmkeeper"
    assert rule["spec"] == yaml.safe_load((MONITORING / "shmkeeper-rules.yaml").read_text())
    rendered = tmp_path / "rendered-rules.yaml"
    rendered.write_text(yaml.safe_dump(rule["spec"]))
    p = run(["promtool", "check", "rules", rendered], check=False)
    assert p.returncode == 0 and "SUCCESS" in p.stdout, p.stdout + p.stderr
    cm = [d for d in by_kind(docs, "ConfigMap") if d["metadata"]["name"] == "shmkeeper-grafana-dashboard"][0]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(cm["data"]["shmkeeper-dashboard.json"]) == json.loads(
        (MONITORING / "shmkeeper-dashboard.json").read_text())


def test_chart_ships_the_rules_and_the_dashboard():
    for template in ("prometheusrule.yaml", "grafana-dashboard.yaml"):
        text = (CHART / "templates" / template).read_text()
        for name in re.findall(r'\.Files\.Get "([^"]+)"', text):
            assert (CHART / name).is_file(), f"{template} reads {name}, which the chart lacks"
    assert (CHART / "files" / "shmkeeper-rules.yaml").read_text() == (MONITORING / "shmkeeper-rules.yaml").read_text()


# ---- the Helm chart (no helm binary here: structure and values) ----------------

def values_paths(node, prefix=""):
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + k
            yield from values_paths(v, prefix + k + ".")


def test_chart_version_values_and_templates_agree(tmp_path):
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == VERSION and chart["appVersion"] == VERSION
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    known = set(values_paths(values))
    used = set()
    for t in (CHART / "templates").iterdir():
        text = t.read_text()
        assert len(re.findall(r"\{\{.*?\}\}", text, re.S)) == text.count("{{"), f"unclosed action in {t.name}"
        used |= set(re.findall(r"\.Values\.([A-Za-z0-9_.]+)", text))
    assert used <= known, f"templates use values that values.yaml lacks: {used - known}"
    top = {p.split(".")[0] for p in used}
    assert top == set(values), f"values.yaml keys no template reads: {set(values) - top}"
    # The chart's policy, with what the template adds, parses with the agent's parser.
    policy = dict(values["policy"])
    policy["agent"] = dict(policy["agent"], metricsAddress="0.0.0.0:9731", reconcile=False)
    eff = check_policy(tmp_path, yaml.safe_dump(policy))
    assert eff["shm"]["overMax"] == "reject"


# ---- node-setup.sh on a node's filesystem ----------------------------------------

def image_dirs(root):
    """The image's /usr/local/bin and /usr/local/lib/shmkeeper, from the build
    (the CLI as its static build, as deploy/image/build-offline.sh lays it out)."""
    bin_dir, lib_dir = root / "bin", root / "lib"
    bin_dir.mkdir(parents=True)
    lib_dir.mkdir()
    for b in ("shmkeeper-runtime", "shmkeeper-hook", "shmkeeper-doctor"):
        shutil.copy(BUILD / "plugin" / b, bin_dir / b)
    shutil.copy(BUILD / "plugin" / "shmkeeper-static", bin_dir / "shmkeeper")
    shutil.copy(BUILD / "plugin" / "libshmkeeper-preload.so", lib_dir)
    return bin_dir, lib_dir


@pytest.fixture
def node(tmp_path, bins):
    host = tmp_path / "host"
    (host / "etc" / "containerd").mkdir(parents=True)
    (host / "run" / "containerd").mkdir(parents=True)
    original = "version = 2\n\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    sandbox_image = \"p:1\"\n"
    (host / "etc" / "containerd" / "config.toml").write_text(original)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(host / "run" / "containerd" / "containerd.sock"))
    bin_dir, lib_dir = image_dirs(tmp_path / "image")
    env = {"SHMKEEPER_HOST_ROOT": str(host), "SHMKEEPER_SOURCE_BIN_DIR": str(bin_dir),
           "SHMKEEPER_SOURCE_LIB_DIR": str(lib_dir),
           "SHMKEEPER_POLICY": str(BASE / "config.yaml"), "SHMKEEPER_RESTART_RUNTIME": "false",
           "SHMKEEPER_HOST_PID": str(os.getpid()),  # the restart command enters this test's namespaces
           "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    yield host, original, env
    sock.close()


def node_setup(env, verb, **extra):
    return subprocess.run(["sh", str(SETUP), verb], env=dict(env, **extra), capture_output=True, text=True,
                          timeout=60)


def test_node_setup_registers_with_containerd_and_takes_it_back(node):
    host, original, env = node
    p = node_setup(env, "install", SHMKEEPER_SET_AS_DEFAULT="true")
    assert p.returncode == 0, p.stderr
    for b in ("shmkeeper-runtime", "shmkeeper-hook", "shmkeeper", "shmkeeper-doctor"):
        assert (host / "usr" / "local" / "bin" / b).stat().st_mode & 0o111
        # Every binary on the host is static: it runs against the host's libraries, not the image's.
        assert "statically linked" in run(["file", host / "usr" / "local" / "bin" / b]).stdout, b
    # The preload library where the runtime's default inject.library lookup finds it.
    lib = host / "usr" / "local" / "lib" / "shmkeeper" / "libshmkeeper-preload.so"
    assert lib.read_bytes() == (BUILD / "plugin" / "libshmkeeper-preload.so").read_bytes()
    assert (host / "etc" / "shmkeeper" / "config.yaml").read_text() == (BASE / "config.yaml").read_text()
    cfg = (host / "etc" / "containerd" / "config.toml").read_text()
    assert "BinaryName = '/usr/local/bin/shmkeeper-runtime'" in cfg and "sandbox_image = \"p:1\"" in cfg
    assert "containerd config changed; restart it to apply" in p.stdout
    again = node_setup(env, "install", SHMKEEPER_SET_AS_DEFAULT="true")
    assert again.returncode == 0 and "restart it to apply" not in again.stdout  # unchanged: no restart
    p = node_setup(env, "uninstall")
    assert p.returncode == 0, p.stderr
    assert (host / "etc" / "containerd" / "config.toml").read_text() == original
    assert (host / "usr" / "local" / "bin" / "shmkeeper-runtime").exists()  # old containers still need it


def test_node_setup_restarts_the_runtime_without_systemd(node, tmp_path):
    """No /run/systemd/system on this node: `auto` needs SHMKEEPER_RESTART_COMMAND,
    which runs on the host (through pid 1's namespaces) only when the config changed."""
    host, original, env = node
    marker = tmp_path / "restarted"
    p = node_setup(env, "install", SHMKEEPER_RESTART_RUNTIME="auto")
    assert p.returncode == 1
    assert "the node has no systemd and SHMKEEPER_RESTART_COMMAND is unset" in p.stderr
    (host / "etc" / "containerd" / "config.toml").write_text(original)
    # A runtime coming back binds a new socket: node-setup waits for it.
    sock = host / "run" / "containerd" / "containerd.sock"
    command = (f"echo restarted >> {marker}; rm {sock}; "
               f"python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' {sock}")
    p = node_setup(env, "install", SHMKEEPER_RESTART_RUNTIME="auto", SHMKEEPER_RESTART_COMMAND=command)
    assert p.returncode == 0, p.stderr
    assert "restarted containerd (command)" in p.stdout and marker.read_text() == "restarted\n"
    p = node_setup(env, "install", SHMKEEPER_RESTART_RUNTIME="auto", SHMKEEPER_RESTART_COMMAND=command)
    assert p.returncode == 0 and marker.read_text() == "restarted\n"  # a rolling update: config unchanged
    p = node_setup(env, "uninstall", SHMKEEPER_RESTART_RUNTIME="command", SHMKEEPER_RESTART_COMMAND="exit 3")
    assert p.returncode == 1 and "restarting it (command) failed" in p.stderr
    p = node_setup(env, "install", SHMKEEPER_RESTART_RUNTIME="reboot")
    assert p.returncode == 1 and "must be auto, systemd, command or false" in p.stderr


def test_node_setup_on_crio_and_in_agent_only_mode(node):
    host, original, env = node
    (host / "run" / "containerd" / "containerd.sock").unlink()
    (host / "run" / "crio").mkdir(parents=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(host / "run" / "crio" / "crio.sock"))
    (host / "usr" / "bin").mkdir(parents=True)
    (host / "usr" / "bin" / "crun").write_text("")
    (host / "usr" / "bin" / "crun").chmod(0o755)
    try:
        p = node_setup(env, "install")
        assert p.returncode == 0, p.stderr
        hook = json.loads((host / "usr/share/containers/oci/hooks.d/shmkeeper.json").read_text())
        assert hook["hook"]["path"] == "/usr/local/bin/shmkeeper-hook"
        dropin = (host / "etc/crio/crio.conf.d/99-shmkeeper.conf").read_text()
        assert "runtime_path = '/usr/bin/crun'" in dropin and "hooks_dir" not in dropin
        assert node_setup(env, "uninstall").returncode == 0
        assert not (host / "usr/share/containers/oci/hooks.d/shmkeeper.json").exists()
        # Agent-only: binaries and policy land, the runtime config is untouched.
        p = node_setup(env, "install", SHMKEEPER_AGENT_ONLY="true")
        assert p.returncode == 0 and "agent-only mode" in p.stdout
        assert not (host / "etc/crio/crio.conf.d/99-shmkeeper.conf").exists()
        p = node_setup(env, "install", SHMKEEPER_RUNTIME="docker")
        assert p.returncode == 1 and "runtime must be auto, containerd, k3s, rke2, microk8s or crio" in p.stderr
    finally:
        s.close()
