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
    return run([bins.CLI, "compose", "check", *args], cwd=cwd, check=False)


@pytest.mark.parametrize("case", CORPUS, ids=[p.name for p in CORPUS])
def test_check_finds_what_is_expected(bins, case):
    expected = json.loads((case / "expected.json").read_text())
    p = check(bins, case, "-o", "json")
    assert p.returncode == (1 if expected["codes"] else 0), p.stderr
    report = json.loads(p.stdout)
    assert sorted(f["code"] for f in report["findings"]) == expected["codes"]
    for f in report["findings"]:
        assert f["line"] > 0 and f["column"] > 0 and f["file"].endswith(".yml")
    # The suggested size of every service that needs one, and the workload it was recognised as.
    assert {svc: s["shmSize"] for svc, s in report["suggestions"].items()} == expected["sizes"]
    for svc, why in expected["why"].items():
        assert why in report["suggestions"][svc]["reason"], report["suggestions"][svc]


@pytest.mark.parametrize("case", CORPUS, ids=[p.name for p in CORPUS])
def test_fix_is_surgical_and_accepted_by_docker_compose(bins, compose_bin, case, tmp_path):
    expected = json.loads((case / "expected.json").read_text())
    work = tmp_path / case.name
    shutil.copytree(case, work)
    target = work / "docker-compose.yml"
    before = target.read_bytes()
    diff = run([bins.CLI, "compose", "fix"], cwd=work, check=False)
    assert diff.returncode == 0, diff.stderr
    assert target.read_bytes() == before  # without --write nothing is written
    p = run([bins.CLI, "compose", "fix", "--write"], cwd=work, check=False)
    assert p.returncode == 0, p.stderr
    after = target.read_bytes()
    if not expected["codes"]:
        assert after == before
    # Only the fixed lines differ; every other byte, comments and anchors included, is kept.
    # Lines may go only with a host /dev/shm bind (its volumes entry) or an ipc: host.
    changed = [line for line in difflib.unified_diff(before.decode().splitlines(True), after.decode().splitlines(True), n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert all("shm" in line or REMOVABLE.match(line) for line in changed), changed
    if diff.stdout:
        assert diff.stdout.startswith("--- a/")
    if expected["fix_makes_config_valid"]:
        cfg = run(["docker-compose", "config"], cwd=work, check=False)
        assert cfg.returncode == 0, cfg.stderr
        again = json.loads(check(bins, work, "-o", "json").stdout)
        assert [f for f in again["findings"] if f["severity"] == "error" or f["code"] in SIZED_BY_FIX] == []
        # docker-compose itself reads the suggested size where the fix wrote one.
        config = yaml.safe_load(cfg.stdout)
        for svc in {f["service"] for f in json.loads(check(bins, case, "-o", "json").stdout)["findings"]
                    if f["code"] in SIZED_BY_FIX}:
            assert config["services"][svc]["shm_size"] == expected["sizes"][svc], svc
    if b"\r\n" in before:
        assert after.count(b"\n") == after.count(b"\r\n")  # CRLF kept


def test_typo_fix_keeps_the_value(bins, tmp_path):
    work = tmp_path / "w"
    shutil.copytree(CORPUS[0], work)
    run([bins.CLI, "compose", "fix", "--write"], cwd=work)
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


def test_usage_errors_exit_2(bins, tmp_path):
    p = run([bins.CLI, "compose", "fix", "--size", "lots"], cwd=CORPUS[0], check=False)
    assert p.returncode == 2 and '--size "lots"' in p.stderr
    p = run([bins.CLI, "compose", "check", str(tmp_path / "nope.yml")], check=False)
    assert p.returncode == 2 and "nope.yml" in p.stderr
