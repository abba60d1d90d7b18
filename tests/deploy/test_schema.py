"""Every rendered object is schema-valid, offline: npm's kubernetes-models
and @kubernetes-models/prometheus-operator (their validate(), ajv compiled
from the upstream OpenAPI schema) plus a strict unknown-field check (each
object as a literal of its model's TypeScript interface, compiled by tsc).
The packages are installed from the npm registry once into a test-private
directory of the build tree (pinned versions below)."""
import json
import shutil
import subprocess

import pytest

from harness import BUILD, REPO, require, run
from k8s_render import VARIANTS, render_variant

PACKAGES = ["kubernetes-models@5.1.0", "@kubernetes-models/prometheus-operator@6.0.0", "typescript@5.9.3"]
VALIDATOR = REPO / "tests" / "deploy" / "validate_k8s.mjs"


@pytest.fixture(scope="session")
def k8s_models():
    require(shutil.which("node") is not None and shutil.which("npm") is not None, "node and npm are needed")
    prefix = BUILD / "npm-k8s-schema"
    stamp = prefix / "installed.txt"
    if not stamp.exists() or stamp.read_text() != "\n".join(PACKAGES):
        prefix.mkdir(parents=True, exist_ok=True)
        p = subprocess.run(["npm", "install", "--prefix", prefix, "--no-audit", "--no-fund", "--no-save", *PACKAGES],
                           capture_output=True, text=True, timeout=600)
        require(p.returncode == 0, "npm install failed (no registry?): " + p.stderr[-500:])
        stamp.write_text("\n".join(PACKAGES))
    return prefix / "node_modules"


def validate(k8s_models, tmp_path, docs):
    objects = tmp_path / "objects.json"
    objects.write_text(json.dumps(docs))
    return run(["node", VALIDATOR, k8s_models, objects, tmp_path], check=False, timeout=120)


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
