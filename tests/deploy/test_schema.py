"""Every rendered object is schema-valid, offline: npm's kubernetes-models
and @kubernetes-models/prometheus-operator (their validate(), ajv compiled
from the upstream OpenAPI schema) plus a strict unknown-field check (each
object as a literal of its model's TypeScript interface, compiled by tsc).
The packages are installed from the npm registry once into a test-private
directory of the build tree (pinned versions below)."""
import pytest

from k8s_render import VARIANTS, render_variant, validate


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_kustomize_variant_is_schema_valid(k8s_models, tmp_path, variant):
    docs = [dict(d, __source=variant) for d in render_variant(tmp_path, variant)]
    p = validate(k8s_models, tmp_path, docs)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.strip().endswith(f"{len(docs)} objects, 0 problems")


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
