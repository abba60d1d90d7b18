"""shmkeeper compose check / fix on a corpus of real compose projects
(tests/compose/*: browsers, databases, MPI, ML and ordinary web stacks),
each with its findings and suggested sizes, validated with Debian's docker-compose, and every bad
input the reader must refuse without touching the file."""
import difflib
import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

import golden
from harness import require, run

# Findings whose fix writes the suggested size.
SIZED_BY_FIX = {"missing-shm-size", "size-too-small", "host-shm-bind", "ipc-host-for-shm"}
# Removed lines a fix may drop whole: ipc: host, and a host /dev/shm bind's volumes entry.
REMOVABLE = re.compile(r"^-\s*(- )?\s*(ipc|volumes|type|source|target|read_only|bind|propagation)\s*:")

CORPUS = sorted(p for p in (Path(__file__).parents[1] / "compose").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def compose_bin():
    require(shutil.which("docker-compose") is not None, "docker-compose is not installed")


def check(bins, cwd, *args):
    # --no-engine: the corpus is judged from its files alone, whatever images the machine holds.
    return run([bins.CLI, "compose", "check", "--no-engine", *args], cwd=cwd, check=False)


@pytest.mark.parametrize("case", CORPUS, ids=[p.name for p in CORPUS])
def test_check_finds_what_is_expected(bins, case):
    expected = json.loads((case / "expected.json").read_text())
    p = check(bins, case, "-o", "json")
    # "choices": info findings (ipc: host kept), which state a choice and do not fail the check.
    choices = expected.get("choices", [])
    assert p.returncode == (1 if len(expected["codes"]) > len(choices) else 0), p.stderr
    report = json.loads(p.stdout)
    assert sorted(f["code"] for f in report["findings"]) == expected["codes"]
    assert sorted(f["code"] for f in report["findings"] if f["severity"] == "info") == choices
    for f in report["findings"]:
        assert f["line"] > 0 and f["column"] > 0 and f["file"].endswith(".yml")
        # The finding's line is in the file it names.
        text = (case / f["file"]).read_text().splitlines()
        assert f["line"] <= len(text), f
    # The suggested size of every service that needs one, and the workload it was recognised as.
    assert {svc: s["shmSize"] for svc, s in report["suggestions"].items()} == expected["sizes"]
    for svc, why in expected["why"].items():
        assert why in report["suggestions"][svc]["reason"], report["suggestions"][svc]
    # Every finding of a recognised need names the sign that fired, in JSON and in text.
    for f in report["findings"]:
        if f["code"] in SIZED_BY_FIX | {"size-too-small", "build-shm-size"}:
            assert f["because"], f
    for svc, because in expected.get("because", {}).items():
        assert any(because in f["because"] for f in report["findings"] if f["service"] == svc), report["findings"]
    text = check(bins, case).stdout
    assert text.count("(because: ") == sum(1 for f in report["findings"] if f["because"]), text


LABELS = json.loads((Path(__file__).parents[1] / "compose" / "labels.json").read_text())


def test_corpus_recall_and_strict_precision(bins):
    """The corpus measurement (tests/compose/README.md): over the services
    labelled as needing more /dev/shm (labels.json, the workload each runs),
    recall = found / labelled >= 90 %, strict precision = found with the
    labelled workload / every service found >= 95 %. A service counts as
    found when the check suggests a size for a workload it recognised (a
    host /dev/shm bind alone is no recognition)."""
    assert sorted(LABELS) == [p.name for p in CORPUS]  # every case is labelled
    labelled = found = right = 0
    misses, wrong = [], []
    for case in CORPUS:
        report = json.loads(check(bins, case, "-o", "json").stdout)
        recognised = {svc: s["reason"] for svc, s in report["suggestions"].items()
                      if s["reason"] != "binds the host's /dev/shm"}
        labels = LABELS[case.name]
        labelled += len(labels)
        found += len(recognised)
        for svc, workload in labels.items():
            if svc not in recognised:
                misses.append(f"{case.name}/{svc}")
        for svc, reason in recognised.items():
            if svc in labels and labels[svc] in reason:
                right += 1
            else:
                wrong.append(f"{case.name}/{svc}: {reason}")
    recall = (labelled - len(misses)) / labelled
    precision = right / found if found else 1.0
    print(f"corpus: {len(CORPUS)} projects, {labelled} labelled services, recall {recall:.1%}, "
          f"strict precision {precision:.1%}; missed {misses}; wrong {wrong}")
    assert recall >= 0.90, misses
    assert precision >= 0.95, wrong


@pytest.mark.parametrize("case", ["49-web-stack", "22-selenium-grid-sized", "02-pytorch-missing", "05-comments-many"])
def test_check_json_golden(bins, case):
    """`compose check -o json`, whole, for a stack that needs nothing and for
    stacks with findings (golden/README.md in tests/e2e says how to regenerate)."""
    p = check(bins, Path(__file__).parents[1] / "compose" / case, "-o", "json")
    golden.check_golden(Path(__file__).parent / "golden", f"compose_check_{case}", json.loads(p.stdout))


@pytest.mark.parametrize("case", CORPUS, ids=[p.name for p in CORPUS])
def test_fix_is_surgical_and_accepted_by_docker_compose(bins, compose_bin, case, tmp_path):
    expected = json.loads((case / "expected.json").read_text())
    work = tmp_path / case.name
    shutil.copytree(case, work)
    files = sorted(work.glob("*.yml"))
    before = {f: f.read_bytes() for f in files}
    fix = [bins.CLI, "compose", "fix", "--no-engine"]
    # A finding fix cannot make is named ("not fixed: ...") and the exit is 1.
    not_fixed = expected.get("not_fixed", 0)
    diff = run(fix, cwd=work, check=False)
    assert diff.returncode == (1 if not_fixed else 0), diff.stderr
    assert [ln.startswith("not fixed: ") for ln in diff.stderr.splitlines()].count(True) == not_fixed, diff.stderr
    assert {f: f.read_bytes() for f in files} == before  # without --write nothing is written
    p = run(fix + ["--write"], cwd=work, check=False)
    assert p.returncode == (1 if not_fixed else 0), p.stderr
    assert [ln.startswith("not fixed: ") for ln in p.stderr.splitlines()].count(True) == not_fixed, p.stderr
    after = {f: f.read_bytes() for f in files}
    if len(expected["codes"]) == len(expected.get("choices", [])):
        assert after == before
    # Every file a finding came from is edited (override and extends files too).
    report = json.loads(check(bins, case, "-o", "json").stdout)
    for f in expected.get("edited", []):
        assert after[work / f] != before[work / f], f
    for f in files:
        if after[f] != before[f]:
            assert f.name in diff.stdout  # the diff showed it
        # Only the fixed lines differ; every other byte, comments and anchors included, is kept.
        # Lines may go only with a host /dev/shm bind (its volumes entry) or an ipc: host.
        changed = [line for line in difflib.unified_diff(before[f].decode().splitlines(True),
                                                         after[f].decode().splitlines(True), n=0)
                   if line[:1] in "+-" and not line.startswith(("+++", "---"))]
        assert all("shm" in line or REMOVABLE.match(line) for line in changed), changed
        if b"\r\n" in before[f]:
            assert after[f].count(b"\n") == after[f].count(b"\r\n")  # CRLF kept
    if diff.stdout:
        assert diff.stdout.startswith("--- a/")
    if expected["fix_makes_config_valid"] in (True, ["1.29"]):  # README.md: true, or the engines named
        cfg = run(["docker-compose", "config"], cwd=work, check=False)
        assert cfg.returncode == 0, cfg.stderr
        again = json.loads(check(bins, work, "-o", "json").stdout)
        assert [f for f in again["findings"]
                if f["severity"] == "error" or (f["code"] in SIZED_BY_FIX and f["severity"] != "info")] == []
        # docker-compose itself reads the suggested size where the fix wrote one.
        config = yaml.safe_load(cfg.stdout)
        for svc in {f["service"] for f in report["findings"] if f["code"] in SIZED_BY_FIX and f["severity"] != "info"}:
            assert config["services"][svc]["shm_size"] == expected["sizes"][svc], svc


def test_typo_fix_keeps_the_value(bins, tmp_path):
    work = tmp_path / "w"
    shutil.copytree(CORPUS[0], work)
    run([bins.CLI, "compose", "fix", "--no-engine", "--write"], cwd=work)
    assert "    shm_size: 10.24gb\n" in (work / "docker-compose.yml").read_text()


BAD = {
    "missing": (None, "no compose file"),
    "syntax": ("services:\n  a:\n    image: [x\n", "docker-compose.yml:"),
    "not-a-mapping": ("- a\n- b\n", "a compose file must be a mapping"),
    "duplicate-keys": ("services:\n  a:\n    image: x\n    image: y\n", "docker-compose.yml:4:5: duplicate key 'image'"),
    "alias-bomb": ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" +
                   "".join(f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
                           f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
                           for i in range(8)) + "services: {}\n", "too many YAML nodes"),
    "undefined-alias": ("services:\n  a: *nope\n", "docker-compose.yml:"),
    "binary": ("\x00\x01\x02garbage\xff", "binary data"),
    "gigantic": ("# " + "x" * (5 << 20) + "\n", "larger than"),
    "bad-service": ("services:\n  a: 5\n", "service 'a' must be a mapping"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_is_one_line_exit_2_and_untouched(bins, tmp_path, name):
    text, expect = BAD[name]
    f = tmp_path / "docker-compose.yml"
    if text is not None:
        f.write_bytes(text.encode("utf-8", "surrogateescape") if "\xff" not in text else text.encode("latin-1"))
    before = f.read_bytes() if f.exists() else None
    for verb in (["check"], ["fix", "--write"]):
        p = run([bins.CLI, "compose", *verb], cwd=tmp_path, check=False)
        assert p.returncode == 2, (verb, p.stdout, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert expect in p.stderr
    assert (f.read_bytes() if f.exists() else None) == before


def test_no_service_is_not_ok(bins, tmp_path):
    """A file with no service (only top-level keys of the compose spec) is
    not "ok": the check says it found nothing to check."""
    (tmp_path / "docker-compose.yml").write_text("version: '3.8'\nvolumes:\n  data: {}\n")
    p = check(bins, tmp_path)
    assert p.returncode == 0 and "ok" not in p.stdout and "no service found in 1 file(s)" in p.stdout, p.stdout
    assert json.loads(check(bins, tmp_path, "-o", "json").stdout)["services"] == []


def test_usage_errors_exit_2(bins, tmp_path):
    p = run([bins.CLI, "compose", "fix", "--size", "lots"], cwd=CORPUS[0], check=False)
    assert p.returncode == 2 and '--size "lots"' in p.stderr
    p = run([bins.CLI, "compose", "check", str(tmp_path / "nope.yml")], check=False)
    assert p.returncode == 2 and "nope.yml" in p.stderr


# Sizes docker-compose 1.29 hands to docker-py's parse_bytes (what `up` does
# with shm_size), and what compose v2 (go-units RAMInBytes) alone accepts.
V1_SIZES = ["2gb", "2 GB", "2 g", "512M", "1024", "10.24gb", ".5g", "1.g", "1e3m", "+2g", " 2g", "2  g", "1_000m",
            "2bb", "2kb", "100 b", "2GiB", "2tb", "1t", "2g ", "-1g", "g", "gb", "lots", "2Gi", "inf", "nan", "0x10",
            "1e", "1.2.3g", "2 gigabytes"]


def test_sizes_as_docker_compose_v1_parses_them(bins, tmp_path):
    """Each size through `compose check` and through docker-py's own
    parse_bytes (the code docker-compose 1.29 runs): invalid-size exactly
    where both compose grammars refuse it (v2's own additions: GiB, t, p)."""
    utils = pytest.importorskip("docker.utils")
    v2_only = {"2GiB", "2tb", "1t"}
    for size in V1_SIZES:
        try:
            v1_ok = utils.parse_bytes(size) >= 0
        except Exception:  # noqa: BLE001 - docker-py raises DockerException, ValueError, OverflowError
            v1_ok = False
        (tmp_path / "docker-compose.yml").write_text(
            f"services:\n  db:\n    image: postgres:16\n    shm_size: {json.dumps(size)}\n")
        report = json.loads(check(bins, tmp_path, "-o", "json").stdout)
        invalid = any(f["code"] == "invalid-size" for f in report["findings"])
        assert invalid == (not v1_ok and size not in v2_only), (size, v1_ok, report["findings"])
