"""What a fleet rollout needs from the chart, and a report-only profile that
holds no more than it reads, rendered by the real helm v4 and kubectl 1.35
(tests/lib/k8s_render.py): values.schema.json refuses a value the chart does
not know (`helm template` and `helm install`); the DaemonSets roll with a
configurable maxUnavailable and pull with imagePullSecrets; extra args, env
and volumes reach the agent; tolerations and the priority class are empty
unless given; the user's policy.agent.metricsAddress is kept; kubeVersion
refuses a cluster older than the fields used; the report-only agent mounts
neither the host's /run nor any directory that holds an engine's socket (in
the chart for every distribution, and in components/report-only); and the
readiness probe, rendered with mutual TLS on the metrics port, passes against
a real shmkeeperd started with the rendered policy, where the former
`httpGet /readyz` probe cannot connect."""
import shutil
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
import yaml

from harness import AGENTD, REPO, free_port, require, run, stop_process, wait_for
from k8s_render import CHART, render_chart, render_variant

DISTRIBUTIONS = ["containerd", "k3s", "rke2", "microk8s", "crio"]
# Every engine API socket a node may have (Docker, containerd, k3s/RKE2, MicroK8s, CRI-O, podman).
ENGINE_SOCKETS = ["/run/docker.sock", "/var/run/docker.sock", "/run/containerd/containerd.sock",
                  "/run/containerd/containerd.sock.ttrpc", "/run/k3s/containerd/containerd.sock",
                  "/var/snap/microk8s/common/run/containerd.sock", "/run/crio/crio.sock", "/var/run/crio/crio.sock",
                  "/run/podman/podman.sock", "/run/dockershim.sock"]


def helm_template(helm, *args):
    return run([helm, "template", "shmkeeper", CHART, *args], check=False)


def daemonset(docs, name="shmkeeper"):
    return next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == name)


def agent_container(docs):
    return next(c for c in daemonset(docs)["spec"]["template"]["spec"]["containers"] if c["name"] == "agent")


def rendered_policy(docs):
    return yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap" and "policy" in d["metadata"]["name"])
                          ["data"]["config.yaml"])


# ---- values.schema.json -----------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["--set", "agent.reportonly=true"], "at '/agent': additional properties 'reportonly' not allowed"),
    (["--set", "tolerations[0].operator=Exists", "--set", "imagePullSecret=regcred"],
     "additional properties 'imagePullSecret' not allowed"),
    (["--set", "policy.agent.metricsAdress=0.0.0.0:9100"],
     "at '/policy/agent': additional properties 'metricsAdress' not allowed"),
    (["--set", "policy.leaks.reclaim=sometimes"], "at '/policy/leaks/reclaim': value must be one of"),
    (["--set", "updateStrategy.maxUnavailable=0"], "at '/updateStrategy/maxUnavailable'"),
    (["--set", "policy.agent.socket="], "at '/policy/agent/socket'"),
])
def test_an_unknown_or_wrong_value_is_refused(helm, args, message):
    p = helm_template(helm, *args)
    assert p.returncode != 0 and message in p.stderr, p.stderr
    # helm install validates the same way, before it would reach a cluster.
    p = run([helm, "install", "--dry-run=client", "shmkeeper", CHART, *args], check=False)
    assert p.returncode != 0 and message in p.stderr, p.stderr


def test_the_schema_knows_every_policy_key(helm, tmp_path):
    """deploy/config/config.yaml (every key with its default) is a valid policy: the schema is not stricter than the
    agent; the reclaim switch's three values pass, `off` from a values file (YAML 1.1's false) is written as off."""
    full = yaml.safe_load((REPO / "deploy" / "config" / "config.yaml").read_text())
    docs = render_chart(helm, tmp_path, {"policy": full})
    assert rendered_policy(docs)["agent"]["metricsAddress"] == full["agent"]["metricsAddress"]
    for value in ("off", "report", "auto"):
        p = helm_template(helm, "--set", f"policy.leaks.reclaim={value}")
        assert p.returncode == 0, p.stderr
    values = tmp_path / "reclaim-off.yaml"
    values.write_text("policy:\n  leaks:\n    reclaim: off\n")  # unquoted: a boolean to helm's YAML parser
    docs = [d for d in yaml.safe_load_all(run([helm, "template", "x", CHART, "-f", values]).stdout) if d]
    cm = next(d for d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"]
    assert yaml.safe_load(cm)["leaks"]["reclaim"] == "off" and "reclaim: \"off\"" in cm, cm


# ---- a rollout ----------------------------------------------------------------------

def test_rollout_strategy_pull_secrets_and_extra_args(helm, tmp_path):
    docs = render_chart(helm, tmp_path, {
        "updateStrategy": {"maxUnavailable": "10%"}, "imagePullSecrets": [{"name": "regcred"}],
        "agent": {"readOnly": True, "extraArgs": ["--state-dir", "/run/shmkeeper"],
                  "extraEnv": [{"name": "TZ", "value": "UTC"}]}})
    for name in ("shmkeeper", "shmkeeper-uninstall"):
        ds = daemonset(docs, name)
        assert ds["spec"]["updateStrategy"] == {"type": "RollingUpdate",
                                                "rollingUpdate": {"maxUnavailable": "10%", "maxSurge": 0}}
        assert ds["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
    agent = agent_container(docs)
    assert agent["command"] == ["/usr/local/bin/shmkeeperd", "--config", "/etc/shmkeeper/config.yaml", "--read-only",
                                "--state-dir", "/run/shmkeeper"]
    assert agent["env"] == [{"name": "TZ", "value": "UTC"}]
    # Defaults: one node at a time, the agent's own arguments only.
    docs = render_chart(helm, tmp_path)
    assert daemonset(docs)["spec"]["updateStrategy"]["rollingUpdate"] == {"maxUnavailable": 1, "maxSurge": 0}
    assert "imagePullSecrets" not in daemonset(docs)["spec"]["template"]["spec"]
    assert agent_container(docs)["command"] == ["/usr/local/bin/shmkeeperd", "--config", "/etc/shmkeeper/config.yaml"]


def test_tolerations_and_priority_are_conservative_unless_widened(helm, tmp_path):
    for docs in (render_chart(helm, tmp_path), render_variant(tmp_path, "base")):
        for ds in (d for d in docs if d["kind"] == "DaemonSet"):
            pod = ds["spec"]["template"]["spec"]
            assert "tolerations" not in pod and "priorityClassName" not in pod, ds["metadata"]["name"]
    wide = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    docs = render_chart(helm, tmp_path, {"tolerations": wide, "priorityClassName": "system-node-critical"})
    for ds in (d for d in docs if d["kind"] == "DaemonSet"):
        pod = ds["spec"]["template"]["spec"]
        assert pod["tolerations"] == wide and pod["priorityClassName"] == "system-node-critical"


def test_the_users_metrics_address_is_kept(helm, tmp_path):
    docs = render_chart(helm, tmp_path, {"policy": {"agent": {"metricsAddress": "127.0.0.1:9100"}}})
    assert rendered_policy(docs)["agent"]["metricsAddress"] == "127.0.0.1:9100"
    assert agent_container(docs)["ports"] == [{"name": "metrics", "containerPort": 9100}]
    docs = render_chart(helm, tmp_path)  # unset: every address of the pod, metrics.port
    assert rendered_policy(docs)["agent"]["metricsAddress"] == "0.0.0.0:9731"
    docs = render_chart(helm, tmp_path, {"metrics": {"enabled": False}})
    assert rendered_policy(docs)["agent"]["metricsAddress"] == "" and "ports" not in agent_container(docs)
    p = helm_template(helm, "--set", "policy.agent.metricsAddress=")
    assert p.returncode != 0 and "policy.agent.metricsAddress is empty while metrics.enabled is true" in p.stderr
    p = helm_template(helm, "--set", "policy.agent.metricsAddress=127.0.0.1:0")
    assert p.returncode != 0 and "needs a fixed port" in p.stderr, p.stderr


def test_kube_version_is_the_oldest_with_every_field_used(helm):
    """securityContext.appArmorProfile (report-only) is a field since Kubernetes 1.30."""
    rc = ("--set", "runtime.integration=runtimeclass")  # report-only is not the NRI plugin
    p = helm_template(helm, "--kube-version", "1.29.9", "--set", "agent.reportOnly=true", *rc)
    assert p.returncode != 0 and "chart requires kubeVersion: >=1.30.0-0" in p.stderr, p.stderr
    assert helm_template(helm, "--kube-version", "1.30.0", "--set", "agent.reportOnly=true", *rc).returncode == 0


# ---- the report-only profile's host paths -------------------------------------------

def agent_host_mounts(docs):
    """{host path: readOnly} of the agent container's hostPath mounts."""
    pod = daemonset(docs)["spec"]["template"]["spec"]
    paths = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    return {paths[m["name"]]["path"]: (bool(m.get("readOnly")), paths[m["name"]].get("type"))
            for m in agent_container(docs)["volumeMounts"] if m["name"] in paths}


def assert_no_engine_socket(mounts):
    for path in mounts:
        assert path not in ("/run", "/var/run", "/"), f"the agent mounts the host's {path}"
        for sock in ENGINE_SOCKETS:  # neither the socket nor a directory above it
            assert not (sock == path or sock.startswith(path.rstrip("/") + "/")), f"{path} holds {sock}"
    writable = {p for p, (ro, _) in mounts.items() if not ro}
    assert writable == {"/run/shmkeeper"}, writable


@pytest.mark.parametrize("distribution", DISTRIBUTIONS)
def test_report_only_agent_mounts_no_engine_socket_and_not_run(helm, tmp_path, distribution):
    docs = render_chart(helm, tmp_path, {"agent": {"reportOnly": True},
                                         "runtime": {"integration": "runtimeclass", "distribution": distribution}})
    mounts = agent_host_mounts(docs)
    assert_no_engine_socket(mounts)
    assert any(p.endswith("runc") for p in mounts), mounts  # the runtime's state, read-only
    sc = agent_container(docs)["securityContext"]
    assert sc["privileged"] is False and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"], "add": ["SYS_PTRACE", "DAC_READ_SEARCH", "SYS_ADMIN"]}
    # Positive control: the privileged profile does mount the host's /run (containerd.sock and all).
    assert "/run" in agent_host_mounts(render_chart(helm, tmp_path, {"runtime": {"distribution": distribution}}))


def test_report_only_component_mounts_no_engine_socket_and_not_run(tmp_path):
    assert_no_engine_socket(agent_host_mounts(render_variant(tmp_path, "report-only")))
    assert "/run" in agent_host_mounts(render_variant(tmp_path, "base"))


@pytest.mark.parametrize("distribution,socket_path", [
    ("containerd", "/run/containerd/containerd.sock"), ("k3s", "/run/k3s/containerd/containerd.sock"),
    ("microk8s", "/var/snap/microk8s/common/run/containerd.sock"), ("crio", "/run/crio/crio.sock")])
def test_report_only_cri_socket_is_that_one_file_by_choice(helm, tmp_path, distribution, socket_path):
    docs = render_chart(helm, tmp_path, {"agent": {"reportOnly": True, "mountCriSocket": True},
                                         "runtime": {"integration": "runtimeclass", "distribution": distribution}})
    mounts = agent_host_mounts(docs)
    assert mounts.pop(socket_path) == (False, "Socket")  # the file only; a socket cannot be read-only in effect
    assert_no_engine_socket(mounts)


# ---- the readiness probe with mutual TLS, against a real agent ----------------------

def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_certificates(d: Path):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=s9-chart-ca", cwd=d)
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr", "-subj",
            "/CN=shmkeeper", cwd=d)
    (d / "server.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-out",
            "server.pem", "-days", "1", "-extfile", "server.ext", cwd=d)


def kubelet_http_get(port, https):
    """What the kubelet's httpGet probe does (HTTPS: no certificate check, no client certificate): the status, or
    None when no HTTP answer came."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            s = raw
            if https:
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
                s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            s.sendall(b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            head = s.recv(64).decode(errors="replace")
            return int(head.split()[1]) if head.startswith("HTTP/1.1 ") else None
    except (OSError, ssl.SSLError):
        return None


def start_rendered_agent(helm, d: Path, metrics_tls):
    """The chart rendered with a private policy (sockets and state under `d`, metrics on a free loopback port,
    `metrics_tls` as agent.metrics), its agent container's command started as it would run in the pod: (the
    agent container, a function running its readiness probe, the process, the port)."""
    port = free_port()
    state = d / "state"
    docs = render_chart(helm, d, {"runtime": {"integration": "runtimeclass"}, "policy": {"agent": {
        "socket": str(state / "agent.sock"), "stateDir": str(state), "eventSocket": str(state / "events.sock"),
        "metricsAddress": f"127.0.0.1:{port}", "scanInterval": "1s", "dockerSocket": "", "criSocket": "none",
        "runtimeRoots": [str(d / "no-runtime-root")], "metrics": metrics_tls}}})
    config = d / "config.yaml"  # what the ConfigMap volume holds at /etc/shmkeeper/config.yaml
    config.write_text(next(x for x in docs if x["kind"] == "ConfigMap")["data"]["config.yaml"])
    agent = agent_container(docs)
    assert set(agent["readinessProbe"]) & {"exec", "httpGet"} == {"exec"}, agent["readinessProbe"]

    def in_this_pod(command):  # the container's paths, mapped to the build tree and the test's directory
        return [str(AGENTD) if a == "/usr/local/bin/shmkeeperd" else str(config)
                if a == "/etc/shmkeeper/config.yaml" else a for a in command]

    def ready():
        return subprocess.run(in_this_pod(agent["readinessProbe"]["exec"]["command"]), capture_output=True,
                              text=True, timeout=agent["readinessProbe"]["timeoutSeconds"])

    assert ready().returncode != 0  # no agent yet: the probe can fail
    proc = subprocess.Popen(in_this_pod(agent["command"]), stdout=open(d / "agent.log", "w"),
                            stderr=subprocess.STDOUT, start_new_session=True)
    return agent, ready, proc, port


def test_readiness_probe_with_mutual_tls_passes_against_a_real_agent(helm, tmp_path):
    require(AGENTD.exists(), f"{AGENTD} is not built")
    require(shutil.which("openssl") is not None, "openssl is not installed")
    make_certificates(tmp_path)
    (tmp_path / "mtls").mkdir()
    agent, ready, proc, port = start_rendered_agent(helm, tmp_path / "mtls", {
        "certFile": str(tmp_path / "server.pem"), "keyFile": str(tmp_path / "server.key"),
        "clientCAFile": str(tmp_path / "ca.pem")})
    try:
        p = wait_for(lambda: (lambda r: r if r.returncode == 0 else None)(ready()), timeout=30,
                     what="the rendered readiness probe passing")
        assert p.stdout.strip() == "ok", p.stdout
        assert proc.poll() is None
        # The former probe (httpGet /readyz on the metrics port) gets no answer from this agent, over HTTP or HTTPS.
        assert kubelet_http_get(port, https=False) is None
        assert kubelet_http_get(port, https=True) is None
    finally:
        stop_process(proc, timeout=10)
    assert ready().returncode != 0, "the probe passes with the agent stopped"
    # Control: without TLS the same kubelet-style GET is answered (the helper can see a ready agent).
    (tmp_path / "plain").mkdir()
    _, ready, proc, port = start_rendered_agent(helm, tmp_path / "plain", {})
    try:
        wait_for(lambda: ready().returncode == 0, timeout=30, what="the plain agent ready")
        assert kubelet_http_get(port, https=False) == 200
    finally:
        stop_process(proc, timeout=10)
