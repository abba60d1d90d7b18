"""The Grafana dashboard (deploy/monitoring/shmkeeper-dashboard.json) against
Grafana's published schema: the npm package @grafana/schema, installed into a
test-private directory, type-checks the dashboard and each panel's options
with TypeScript's compiler. Its queries are checked against a real Prometheus
in tests/e2e/test_prometheus.py."""
import json
import re
import shutil
import subprocess

import pytest

from harness import REPO, require, run

DASHBOARD = REPO / "deploy" / "monitoring" / "shmkeeper-dashboard.json"
PACKAGES = ["@grafana/schema@13.2.3", "typescript@5.9.3"]
# Each panel type's options (and custom field config) as Grafana's schema defines them.
PANEL_TYPES = {
    "timeseries": "TimeSeriesPanelCfg_types.gen",
    "stat": "StatPanelCfg_types.gen",
    "bargauge": "BarGaugePanelCfg_types.gen",
    "table": "TablePanelCfg_types.gen",
}
# String enums of the schema are spelled as their values in JSON: Lit<T> turns them into those literals.
PRELUDE = """\
import type { Dashboard } from '@grafana/schema';
%s
type Lit<T> = T extends string ? `${T}` : T extends (infer U)[] ? Lit<U>[] : T extends object ? { [K in keyof T]: Lit<T[K]> } : T;
"""


def dashboard():
    return json.loads(DASHBOARD.read_text())


def panels(d):
    for p in d["panels"]:
        yield p
        yield from p.get("panels", [])


def typescript_check(d):
    """TypeScript source that compiles only if `d` fits Grafana's types."""
    imports = "\n".join(f"import type {{ Options as {t}Options, FieldConfig as {t}Field }} from "
                        f"'@grafana/schema/dist/esm/raw/composable/{t}/panelcfg/x/{mod}';"
                        if t == "timeseries" else
                        f"import type {{ Options as {t}Options }} from "
                        f"'@grafana/schema/dist/esm/raw/composable/{t}/panelcfg/x/{mod}';"
                        for t, mod in PANEL_TYPES.items())
    out = [PRELUDE % imports, f"export const dashboard: Lit<Dashboard> = {json.dumps(d)};"]
    for p in panels(d):
        if p["type"] == "row":
            continue
        out.append(f"export const options{p['id']}: Lit<{p['type']}Options> = {json.dumps(p['options'])};")
        if p["type"] == "timeseries":
            out.append(f"export const custom{p['id']}: Lit<timeseriesField> = "
                       f"{json.dumps(p['fieldConfig']['defaults']['custom'])};")
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def tsc(tmp_path_factory):
    require(shutil.which("npm") is not None, "npm is not installed")
    work = tmp_path_factory.mktemp("grafana-schema")
    p = subprocess.run(["npm", "install", "--prefix", str(work), "--no-audit", "--no-fund", "--silent", *PACKAGES],
                       capture_output=True, text=True, timeout=300)
    require(p.returncode == 0, f"npm install {' '.join(PACKAGES)} failed (no registry?): {p.stderr[-500:]}")

    def check(d):
        src = work / "check.ts"
        src.write_text(typescript_check(d))
        return subprocess.run([str(work / "node_modules" / ".bin" / "tsc"), "--noEmit", "--strict", "--skipLibCheck",
                               "--module", "esnext", "--moduleResolution", "bundler", "--target", "es2022", str(src)],
                              capture_output=True, text=True, timeout=300, cwd=work)
    return check


def test_dashboard_fits_grafanas_published_schema(tsc):
    p = tsc(dashboard())
    assert p.returncode == 0, p.stdout + p.stderr


def test_the_schema_check_rejects_a_broken_dashboard(tsc):
    d = dashboard()
    d["graphTooltip"] = "shared"                      # a number (cursor sync mode)
    d["panels"][1]["options"]["colorMode"] = "rainbow"  # not a stat colour mode
    del d["panels"][5]["options"]["tooltip"]          # timeseries options need one
    d["panels"][0]["collapsed"] = "no"                # a boolean
    d["templating"]["list"][1]["refesh"] = 2          # a misspelled key
    p = tsc(d)
    errors = [line for line in p.stdout.splitlines() if "error TS" in line]
    assert p.returncode != 0 and len(errors) == 5, p.stdout


def test_dashboard_structure():
    d = dashboard()
    ids = [p["id"] for p in panels(d)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    variables = {v["name"] for v in d["templating"]["list"]} | {"__rate_interval"}
    types = set()
    for p in panels(d):
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24 and g["w"] > 0 and g["h"] > 0, p["title"]
        types.add(p["type"])
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert p["targets"] and len(refs) == len(set(refs)), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and t["expr"].strip()
            assert set(re.findall(r"\$(\w+)", t["expr"])) <= variables, t["expr"]
    assert types <= set(PANEL_TYPES) | {"row"}
    # Node and pod views, and scan health.
    titles = [p["title"] for p in d["panels"] if p["type"] == "row"]
    assert titles == ["Nodes", "Pods", "Scan health"]
