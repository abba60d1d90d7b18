"""The Helm chart, rendered by the real helm (v4, tests/lib/k8s_render.py):
`helm lint` is clean, and for the same choices it gives the same objects as
the kustomize base and its components. Differences that are Helm's or
kustomize's own are normalised away before comparing: Helm's release labels
(instance, version, helm.sh/chart) and the policy checksum annotation,
kustomize's ConfigMap name hash, the order of env, volumes and mounts (a
strategic-merge patch reorders lists), and the policy file's comments (it is
compared parsed). Every namespaced object lands in the release namespace,
the chart owns no Namespace unless asked, and no profile mounts the host's /.
test_schema.py validates every chart variant."""
import copy
import json
import re

import pytest
import yaml

from harness import run
from k8s_render import CHART, render_chart, render_variant

HELM_ONLY_LABELS = {"app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart"}
SM = {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}

# Chart values for each kustomize variant (tests/lib/k8s_render.py VARIANTS); the
# kustomize base creates its namespace (kustomize has no release namespace).
# The kustomize base is the RuntimeClass integration; the chart's default is
# NRI (components/nri).
RC = {"runtime": {"integration": "runtimeclass"}}
CHART_VALUES = {
    "base": RC,
    "agent-only": dict(RC, agentOnly=True),
    "servicemonitor": dict(RC, metrics={"serviceMonitor": SM}),
    "agent-only+servicemonitor": dict(RC, agentOnly=True, metrics={"serviceMonitor": SM}),
    "k3s": {"runtime": {"integration": "runtimeclass", "distribution": "k3s"}},
    "rke2": {"runtime": {"integration": "runtimeclass", "distribution": "rke2"}},
    "microk8s": {"runtime": {"integration": "runtimeclass", "distribution": "microk8s"}},
    "crio": {"runtime": {"integration": "runtimeclass", "distribution": "crio"}},
    "k3s+install-root-opt": {"runtime": {"integration": "runtimeclass", "distribution": "k3s"},
                             "installRoot": "/opt/shmkeeper"},
    "report-only": dict(RC, agent={"reportOnly": True}),
    "networkpolicy": dict(RC, metrics={"networkPolicy": {"enabled": True}}),
    "nri": {},
    "nri+install-root-opt": {"installRoot": "/opt/shmkeeper"},
}
NAMESPACED = {"ServiceAccount", "ConfigMap", "Service", "DaemonSet", "ServiceMonitor", "PrometheusRule", "NetworkPolicy"}


def normalise(docs):
    out = {}
    for d in copy.deepcopy(docs):
        meta = d["metadata"]
        for k in HELM_ONLY_LABELS:
            meta.get("labels", {}).pop(k, None)
        if d["kind"] == "ConfigMap":
            meta["name"] = re.sub(r"-[a-z0-9]{10}$", "", meta["name"])  # kustomize's hash suffix
            d["data"] = {k: yaml.safe_load(v) for k, v in d["data"].items()}
        if d["kind"] == "DaemonSet":
            tmpl = d["spec"]["template"]
            tmpl["metadata"].get("annotations", {}).pop("checksum/policy", None)
            if not tmpl["metadata"].get("annotations"):
                tmpl["metadata"].pop("annotations", None)
            for v in tmpl["spec"]["volumes"]:
                if "configMap" in v:
                    v["configMap"]["name"] = re.sub(r"-[a-z0-9]{10}$", "", v["configMap"]["name"])
            tmpl["spec"]["volumes"].sort(key=lambda v: v["name"])
            for c in tmpl["spec"]["containers"] + tmpl["spec"].get("initContainers", []):
                for key, field in (("env", "name"), ("volumeMounts", "mountPath")):
                    if key in c:
                        c[key] = sorted(c[key], key=lambda e: e[field])
        out[(d["kind"], meta["name"])] = d
    return out


@pytest.mark.parametrize("variant", list(CHART_VALUES))
def test_chart_and_kustomize_render_the_same_objects(helm, tmp_path, variant):
    base = normalise(render_variant(tmp_path, variant))
    chart = normalise(render_chart(helm, tmp_path, dict(CHART_VALUES[variant], namespace={"create": True}),
                                   namespace="shmkeeper"))
    assert sorted(chart) == sorted(base)
    for key in base:
        assert chart[key] == base[key], f"{key} differs:\nchart: {json.dumps(chart[key], indent=1, sort_keys=True)}" \
                                        f"\nkustomize: {json.dumps(base[key], indent=1, sort_keys=True)}"


def test_helm_lint_is_clean(helm):
    p = run([helm, "lint", "--strict", CHART], check=False)
    assert p.returncode == 0 and "0 chart(s) failed" in p.stdout, p.stdout + p.stderr
    assert "[WARNING]" not in p.stdout and "[ERROR]" not in p.stdout, p.stdout


def host_paths(docs):
    """(DaemonSet, container, hostPath, readOnly) for every hostPath mount."""
    for d in docs:
        if d["kind"] != "DaemonSet":
            continue
        pod = d["spec"]["template"]["spec"]
        paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
        for c in pod["containers"] + pod.get("initContainers", []):
            for m in c.get("volumeMounts", []):
                if m["name"] in paths:
                    yield d["metadata"]["name"], c["name"], paths[m["name"]], bool(m.get("readOnly"))


@pytest.mark.parametrize("variant", list(CHART_VALUES))
def test_every_object_in_the_release_namespace_and_no_host_root(helm, tmp_path, variant):
    docs = render_chart(helm, tmp_path, CHART_VALUES[variant], namespace="shmk-test")
    assert not [d for d in docs if d["kind"] == "Namespace"]  # opt-in only
    for d in docs:
        if d["kind"] in NAMESPACED:
            assert d["metadata"].get("namespace") == "shmk-test", (d["kind"], d["metadata"])
        else:
            assert "namespace" not in d["metadata"], d["kind"]
    binding = next((d for d in docs if d["kind"] == "ClusterRoleBinding"), None)
    assert (binding is None) == variant.startswith("nri")  # NRI: no node label, no RBAC
    assert variant.startswith("nri") or binding["subjects"] == [{"kind": "ServiceAccount", "name": "shmkeeper", "namespace": "shmk-test"}]
    mounts = list(host_paths(docs)) + list(host_paths(render_variant(tmp_path / "k", variant)))
    assert mounts
    assert not [m for m in mounts if m[2] == "/"], "the host's / is mounted"
    # The long-running agent mounts /run only (report-only: its own directory and the runtime's state, read-only),
    # and the wrapper's decision log read-only; everything the installer writes is a narrow directory.
    agent_mounts = {m[2]: m[3] for m in mounts if m[1] == "agent"}
    if variant.startswith("nri"):
        assert agent_mounts == {"/run": False, "/var/run/nri": True, "/var/log/shmkeeper": True}
        # The NRI profile's installer only copies: no /run, no runtime config, no token.
        assert {m[2] for m in mounts if m[1] == "install"} == {"/etc/shmkeeper", "/usr/local" if variant == "nri"
                                                                else "/opt/shmkeeper"}
    elif variant == "report-only":
        assert {m[2]: m[3] for m in mounts if m[1] == "agent"} == {
            "/run/shmkeeper": False, "/run/containerd/runc": True, "/run/containerd/io.containerd.runtime.v2.task": True,
            "/run/containerd/io.containerd.grpc.v1.cri": True, "/var/log/shmkeeper": True}
    else:
        assert {m[2]: m[3] for m in mounts if m[1] == "agent"} == {"/run": False, "/var/log/shmkeeper": True}
    writable = {m[2] for m in mounts if not m[3]}
    assert writable <= {"/run", "/run/shmkeeper", "/etc/shmkeeper", "/usr/local", "/opt/shmkeeper", "/etc/containerd", "/etc/crio",
                        "/var/lib/rancher/k3s/agent/etc/containerd", "/var/lib/rancher/rke2/agent/etc/containerd",
                        "/var/snap/microk8s/current/args", "/usr/share/containers/oci/hooks.d"}, writable
    if not variant.startswith("nri"):
        assert ("shmkeeper", "install", "/run", True) in mounts  # the installer only reads /run


def test_chart_choices_beyond_the_base(helm, tmp_path):
    docs = render_chart(helm, tmp_path, {"nodeSelector": {"gpu": "true"}, "namespace": {"create": True},
                                         "restartRuntime": "command", "restartCommand": "sv restart containerd",
                                         "runtime": {"integration": "runtimeclass", "distribution": "k3s",
                                                     "configDir": "/srv/k3s/containerd",
                                                     "containerdSocket": "/srv/k3s.sock"},
                                         "installRoot": "/var/lib/shmkeeper"}, namespace="infra")
    ns = [d for d in docs if d["kind"] == "Namespace"]
    assert [n["metadata"]["name"] for n in ns] == ["infra"]  # the release namespace, opted in
    assert ns[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    rc = next(d for d in docs if d["kind"] == "RuntimeClass")
    # Pods naming it go where shmkeeper is installed and ready.
    assert rc["scheduling"]["nodeSelector"] == {"gpu": "true", "shmkeeper.io/runtime": "ready"}
    ds = next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "shmkeeper")
    pod = ds["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["initContainers"][0]["env"]}
    assert env["SHMKEEPER_RESTART_RUNTIME"] == "command" and env["SHMKEEPER_RESTART_COMMAND"] == "sv restart containerd"
    assert env["SHMKEEPER_RUNTIME"] == "k3s" and env["SHMKEEPER_CONTAINERD_SOCKET"] == "/srv/k3s.sock"
    assert env["SHMKEEPER_INSTALL_ROOT"] == "/var/lib/shmkeeper"
    vols = {v["name"]: v.get("hostPath", {}).get("path") for v in pod["volumes"]}
    assert vols["runtime-config"] == "/srv/k3s/containerd" and vols["install-root"] == "/var/lib/shmkeeper"
    # Without the label: no RBAC, no token, the RuntimeClass selects only nodeSelector.
    docs = render_chart(helm, tmp_path, dict(RC, nodeLabel={"enabled": False}))
    assert not [d for d in docs if d["kind"].startswith("ClusterRole")]
    rc = next(d for d in docs if d["kind"] == "RuntimeClass")
    assert "scheduling" not in rc
    p = run([helm, "template", "x", CHART, "--set", "runtime.distribution=docker"], check=False)
    assert p.returncode != 0 and "at '/runtime/distribution': value must be one of 'containerd', 'k3s', 'rke2', " \
        "'microk8s', 'crio'" in p.stderr, p.stderr  # values.schema.json


def test_only_the_setup_containers_get_a_token(helm, tmp_path):
    docs = render_chart(helm, tmp_path, RC)
    for ds in (d for d in docs if d["kind"] == "DaemonSet"):
        pod = ds["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False
        for c in pod["containers"] + pod.get("initContainers", []):
            has = any(m["name"] == "node-label-token" for m in c.get("volumeMounts", []))
            assert has == (c["name"] in ("install", "uninstall")), (ds["metadata"]["name"], c["name"])
    role = next(d for d in docs if d["kind"] == "ClusterRole")
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}]
