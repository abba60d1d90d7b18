"""Every rendered object is schema-valid, offline: npm's kubernetes-models
and @kubernetes-models/prometheus-operator (their validate(), ajv compiled
from the upstream OpenAPI schema) plus a strict unknown-field check (each
object as a literal of its model's TypeScript interface, compiled by tsc).
The packages are installed from the npm registry once into a test-private
directory of the build tree (pinned versions below)."""
import pytest

from k8s_render import VARIANTS, render_chart, render_variant, validate
from test_chart import CHART_VALUES


# Chart values beyond the kustomize-equivalent ones (test_chart.py CHART_VALUES).
CHART_SCHEMA_VARIANTS = dict(CHART_VALUES, **{
    "no-metrics": {"metrics": {"enabled": False}},
    "set-as-default+nodeSelector": {"runtime": {"integration": "runtimeclass"}, "setAsDefault": True,
                                    "nodeSelector": {"gpu": "true"}},
    "own-namespace": {"namespace": {"create": True}},
    "no-node-label": {"runtime": {"integration": "runtimeclass"}, "nodeLabel": {"enabled": False}},
    "crio+report-only": {"runtime": {"integration": "runtimeclass", "distribution": "crio"},
                         "agent": {"reportOnly": True}},
    "nri+agent-only": {"agentOnly": True, "agent": {"reportOnly": True}},
    "rollout": {"runtime": {"integration": "runtimeclass"},
                "updateStrategy": {"maxUnavailable": "10%"}, "imagePullSecrets": [{"name": "regcred"}],
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "priorityClassName": "system-node-critical",
                "agent": {"reportOnly": True, "mountCriSocket": True, "readOnly": True, "extraArgs": ["--read-only"],
                          "extraEnv": [{"name": "TZ", "value": "UTC"}],
                          "extraVolumes": [{"name": "tls", "secret": {"secretName": "shmkeeper-metrics-tls"}}],
                          "extraVolumeMounts": [{"name": "tls", "mountPath": "/etc/shmkeeper-tls", "readOnly": True}]},
                "policy": {"agent": {"metricsAddress": "0.0.0.0:9100"}, "leaks": {"reclaim": "off"}}},
})


@pytest.fixture(scope="module")
def validated(k8s_models, helm, tmp_path_factory):
    """Every kustomize and chart variant, validated in one run (one tsc
    compile): the validator's output and how many objects each render had."""
    tmp = tmp_path_factory.mktemp("schema")
    docs = []
    for name in VARIANTS:
        docs += [dict(d, __source="kustomize " + name) for d in render_variant(tmp, name)]
    for name, values in CHART_SCHEMA_VARIANTS.items():
        d = tmp / ("chart-" + name)
        d.mkdir()
        docs += [dict(o, __source="chart " + name) for o in render_chart(helm, d, values, namespace="shmk-test")]
    p = validate(k8s_models, tmp, docs)
    assert p.stdout.strip().splitlines()[-1].startswith(f"{len(docs)} objects,"), p.stdout + p.stderr
    return p.stdout, {s: sum(1 for d in docs if d["__source"] == s) for s in {d["__source"] for d in docs}}


@pytest.mark.parametrize("source", [f"kustomize {v}" for v in VARIANTS] +
                         [f"chart {v}" for v in CHART_SCHEMA_VARIANTS])
def test_every_rendered_object_is_schema_valid(validated, source):
    out, counts = validated
    assert counts[source] >= 4  # the render produced its objects (NRI without metrics: 2 DaemonSets, SA, ConfigMap)
    problems = [line for line in out.splitlines() if f"({source})" in line]
    assert not problems, "\n".join(problems)


def test_the_validator_rejects_unknown_fields_and_wrong_types(k8s_models, tmp_path):
    docs = [dict(d, __source="mutant") for d in render_variant(tmp_path, "servicemonitor")]
    ds = next(d for d in docs if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "shmkeeper")
    ds["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "9731"
    ds["spec"]["template"]["spec"]["volumes"][0]["hostpath"] = {"path": "/"}  # misspelt: unknown to the schema
    sm = next(d for d in docs if d["kind"] == "ServiceMonitor")
    sm["spec"]["endpoints"][0]["intervall"] = "30s"
    p = validate(k8s_models, tmp_path, docs)
    assert p.returncode == 1
    assert "DaemonSet/shmkeeper (mutant): data/spec/template/spec/containers/0/ports/0/containerPort must be integer" \
        in p.stdout
    assert "'\"hostpath\"' does not exist in type 'IVolume'" in p.stdout, p.stdout
    assert "ServiceMonitor/shmkeeper (mutant): tsc: Object literal may only specify known properties, and '\"intervall\"'" \
        in p.stdout, p.stdout
