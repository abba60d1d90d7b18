"""The Helm chart and the kustomize base give the same objects for the same
choices. There is no helm binary here: tests/helpers/helmrender renders the
chart's templates with Go's text/template, the sprig library Helm uses
(Debian's golang-github-masterminds-sprig-dev) and Helm's own template
functions as Helm defines them (include, tpl, required, toYaml, ...).
Differences that are Helm's or kustomize's own are normalised away before
comparing: Helm's release labels (instance, version, helm.sh/chart) and the
policy checksum annotation, kustomize's ConfigMap name hash, env order (a
strategic-merge patch reorders lists), and the policy file's comments (it is
compared parsed). test_schema.py validates every chart variant."""
import copy
import json
import re

import pytest
import yaml

from k8s_render import render_chart, render_variant

HELM_ONLY_LABELS = {"app.kubernetes.io/instance", "app.kubernetes.io/version", "helm.sh/chart"}

# Chart values for each kustomize variant (tests/lib/k8s_render.py VARIANTS).
CHART_VALUES = {
    "base": {},
    "agent-only": {"agentOnly": True},
    "servicemonitor": {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}}}},
    "agent-only+servicemonitor": {"agentOnly": True, "metrics": {"serviceMonitor": {
        "enabled": True, "labels": {"release": "kube-prometheus-stack"}}}},
    "networkpolicy": {"metrics": {"networkPolicy": {"enabled": True}}},
}


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
            for c in tmpl["spec"]["containers"] + tmpl["spec"].get("initContainers", []):
                if "env" in c:
                    c["env"] = sorted(c["env"], key=lambda e: e["name"])
        out[(d["kind"], meta["name"])] = d
    return out


@pytest.mark.parametrize("variant", list(CHART_VALUES))
def test_chart_and_kustomize_render_the_same_objects(helmrender, tmp_path, variant):
    base = normalise(render_variant(tmp_path, variant))
    chart = normalise(render_chart(helmrender, tmp_path, CHART_VALUES[variant]))
    assert sorted(chart) == sorted(base)
    for key in base:
        assert chart[key] == base[key], f"{key} differs:\nchart: {json.dumps(chart[key], indent=1, sort_keys=True)}" \
                                        f"\nkustomize: {json.dumps(base[key], indent=1, sort_keys=True)}"


def test_chart_choices_beyond_the_base(helmrender, tmp_path):
    docs = render_chart(helmrender, tmp_path, {"nodeSelector": {"gpu": "true"}, "namespace": {"create": False},
                                               "restartRuntime": "command", "restartCommand": "sv restart containerd"},
                        namespace="infra")
    assert not [d for d in docs if d["kind"] == "Namespace"]
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "RuntimeClass"} == {"infra"}
    rc = next(d for d in docs if d["kind"] == "RuntimeClass")
    assert rc["scheduling"]["nodeSelector"] == {"gpu": "true"}  # pods naming it go where shmkeeper is
    ds = next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "shmkeeper")
    env = {e["name"]: e["value"] for e in ds["spec"]["template"]["spec"]["initContainers"][0]["env"]}
    assert env["SHMKEEPER_RESTART_RUNTIME"] == "command" and env["SHMKEEPER_RESTART_COMMAND"] == "sv restart containerd"
