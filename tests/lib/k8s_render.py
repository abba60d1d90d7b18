"""Rendering the kustomize base and its overlays as a user does (`kubectl
kustomize`), shared by the deploy tests."""
import shutil
from pathlib import Path

import yaml

from harness import REPO, require, run

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
}


def render_variant(tmp_path, name):
    components, extra = VARIANTS[name]
    return kustomize(overlay(tmp_path / name, components, extra) if components else BASE)
