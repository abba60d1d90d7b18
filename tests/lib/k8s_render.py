"""Rendering the kustomize base and its overlays as a user does (`kubectl
kustomize`), the Helm chart (tests/helpers/helmrender), and validating what
they render (tests/deploy/validate_k8s.mjs); shared by the deploy tests."""
import json
import os
import shutil
import subprocess
from pathlib import Path

import yaml

from harness import BUILD, REPO, require, run

BASE = REPO / "deploy" / "kubernetes"

# What components/servicemonitor/kustomization.yaml tells users to add for kube-prometheus-stack.
RELEASE_LABEL = {"labels": [{"pairs": {"release": "kube-prometheus-stack"}, "includeSelectors": False,
                             "fields": [{"kind": "ServiceMonitor", "path": "metadata/labels", "create": True}]}]}


def kustomize(path):
    require(shutil.which("kubectl") is not None, "kubectl is not installed")
    return list(yaml.safe_load_all(run(["kubectl", "kustomize", path]).stdout))


def overlay(tmp_path, components, extra=None):
    """An overlay directory of the base with `components` (paths relative to
    the base) and `extra` kustomization fields, as a user writes it."""
    d = tmp_path / ("overlay-" + "-".join(c.rsplit("/", 1)[-1] for c in components))
    d.mkdir(parents=True)
    up = Path(*[".."] * len(d.parts[1:]))
    doc = {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
           "resources": [str(up / BASE.relative_to("/"))],
           "components": [str(up / (BASE / c).relative_to("/")) for c in components]}
    (d / "kustomization.yaml").write_text(yaml.safe_dump(dict(doc, **(extra or {}))))
    return d


# Every kustomize variant a user can build from the base and its components.
VARIANTS = {
    "base": ([], None),
    "agent-only": (["components/agent-only"], None),
    "servicemonitor": (["components/servicemonitor"], RELEASE_LABEL),
    "agent-only+servicemonitor": (["components/agent-only", "components/servicemonitor"], RELEASE_LABEL),
    "networkpolicy": (["components/networkpolicy"], None),
}


def render_variant(tmp_path, name):
    components, extra = VARIANTS[name]
    return kustomize(overlay(tmp_path / name, components, extra) if components else BASE)


# ---- schema validation (npm) ----------------------------------------------------

PACKAGES = ["kubernetes-models@5.1.0", "@kubernetes-models/prometheus-operator@6.0.0", "typescript@5.9.3"]
VALIDATOR = REPO / "tests" / "deploy" / "validate_k8s.mjs"


def install_k8s_models():
    """The pinned npm packages in build/npm-k8s-schema (installed once); their node_modules."""
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
    """validate_k8s.mjs on `docs` (each with a "__source" naming its render)."""
    objects = tmp_path / "objects.json"
    objects.write_text(json.dumps(docs))
    return run(["node", VALIDATOR, k8s_models, objects, tmp_path], check=False, timeout=120)


# ---- the Helm chart ---------------------------------------------------------------

CHART = REPO / "helm" / "shmkeeper"
HELMRENDER_SRC = REPO / "tests" / "helpers" / "helmrender"


def build_helmrender():
    """tests/helpers/helmrender built with Debian's Go and its sprig and
    ghodss/yaml packages (GOPATH mode: nothing downloaded)."""
    require(shutil.which("go") is not None, "go (golang-go) is not installed")
    require(os.path.isdir("/usr/share/gocode/src/github.com/Masterminds/sprig"),
            "golang-github-masterminds-sprig-dev is not installed")
    out = BUILD / "helmrender"
    env = dict(os.environ, GO111MODULE="off", GOPATH="/usr/share/gocode", GOCACHE=str(BUILD / "go-cache"))
    p = subprocess.run(["go", "build", "-o", str(out), "."], cwd=HELMRENDER_SRC, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return out


def render_chart(helmrender, tmp_path, values=None, release="shmkeeper", namespace="default"):
    """The chart's objects for `values` (overrides coalesced into values.yaml)."""
    args = [helmrender, CHART, release, namespace]
    if values:
        f = tmp_path / "values.json"
        f.write_text(json.dumps(values))
        args.append(f)
    return [d for d in yaml.safe_load_all(run(args).stdout) if d]
