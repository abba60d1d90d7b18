"""The cluster deployment as a user gets it: `kubectl kustomize` renders the
manifests (kubectl is real here; no API server is), the rendered objects
hold together, the policy they carry parses with the agent's own parser, the
Helm chart agrees with them, and node-setup.sh (what the DaemonSet runs on a
node) registers shmkeeper with a node's runtime config and takes it back."""
import json
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import yaml

from harness import AGENTD, BUILD, REPO, require, run

VERSION = re.search(r"project\(shmkeeper VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
BASE = REPO / "deploy" / "kubernetes"
CHART = REPO / "helm" / "shmkeeper"
SETUP = REPO / "deploy" / "image" / "node-setup.sh"


def kustomize(path):
    require(shutil.which("kubectl") is not None, "kubectl is not installed")
    return list(yaml.safe_load_all(run(["kubectl", "kustomize", path]).stdout))


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
    assert kinds == ["ConfigMap", "DaemonSet", "Namespace", "RuntimeClass", "Service", "ServiceAccount"]
    for d in rendered:
        if d["kind"] not in ("Namespace", "RuntimeClass"):
            assert d["metadata"]["namespace"] == "shmkeeper"


def test_daemonset_mounts_and_images_hold_together(rendered):
    ds = by_kind(rendered, "DaemonSet")[0]
    pod = ds["spec"]["template"]["spec"]
    volumes = {v["name"] for v in pod["volumes"]}
    containers = pod["containers"] + pod["initContainers"]
    for c in containers:
        assert c["image"] == f"shmkeeper/shmkeeper:{VERSION}"  # the image tag is the project version
        for m in c.get("volumeMounts", []):
            assert m["name"] in volumes, f"{c['name']} mounts {m['name']}, which has no volume"
    assert pod["hostPID"] is True
    assert ds["spec"]["selector"]["matchLabels"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    cm = by_kind(rendered, "ConfigMap")[0]["metadata"]["name"]
    assert [v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v] == [cm]
    svc = by_kind(rendered, "Service")[0]
    assert svc["spec"]["selector"].items() <= ds["spec"]["template"]["metadata"]["labels"].items()
    ports = {p["name"] for c in pod["containers"] for p in c.get("ports", [])}
    assert svc["spec"]["ports"][0]["targetPort"] in ports
    for c in containers:
        for cmd in (c.get("command") or [])[:1] + [c.get("lifecycle", {}).get("preStop", {}).get("exec", {})
                                                   .get("command", [None])[0]]:
            if cmd and cmd.startswith("/usr/local/bin/"):
                name = cmd.rsplit("/", 1)[1]
                assert (REPO / "deploy" / "image" / name).exists() or (BUILD / "plugin" / name).exists(), cmd


def test_policy_configmap_parses_with_the_agents_parser(rendered, tmp_path):
    text = by_kind(rendered, "ConfigMap")[0]["data"]["config.yaml"]
    eff = check_policy(tmp_path, text)
    assert eff["agent"]["socket"] == "/run/shmkeeper/agent.sock"
    assert eff["agent"]["metricsAddress"].endswith(":9731")


def test_runtimeclass_names_the_handler_install_registers(rendered):
    rc = by_kind(rendered, "RuntimeClass")[0]
    assert rc["metadata"]["name"] == "shmkeeper" and rc["handler"] == "shmkeeper"


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
    docs = kustomize_overlay(tmp_path, ("components/agent-only", "components/servicemonitor"))
    pod = by_kind(docs, "DaemonSet")[0]["spec"]["template"]["spec"]
    init_env = {e["name"]: e["value"] for e in pod["initContainers"][0]["env"]}
    assert init_env["SHMKEEPER_AGENT_ONLY"] == "true"
    assert "--reconcile" in pod["containers"][0]["command"]
    assert {e["name"]: e["value"] for e in pod["containers"][0]["env"]}["SHMKEEPER_AGENT_ONLY"] == "true"
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

@pytest.fixture
def node(tmp_path, bins):
    host = tmp_path / "host"
    (host / "etc" / "containerd").mkdir(parents=True)
    (host / "run" / "containerd").mkdir(parents=True)
    original = "version = 2\n\n[plugins]\n  [plugins.\"io.containerd.grpc.v1.cri\"]\n    sandbox_image = \"p:1\"\n"
    (host / "etc" / "containerd" / "config.toml").write_text(original)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(host / "run" / "containerd" / "containerd.sock"))
    env = {"SHMKEEPER_HOST_ROOT": str(host), "SHMKEEPER_SOURCE_BIN_DIR": str(BUILD / "plugin"),
           "SHMKEEPER_POLICY": str(BASE / "config.yaml"), "SHMKEEPER_RESTART_RUNTIME": "false",
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
        assert p.returncode == 1 and "runtime must be auto, containerd or crio" in p.stderr
    finally:
        s.close()
