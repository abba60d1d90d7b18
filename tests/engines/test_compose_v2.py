"""docker compose v2 (sid's docker-compose 2.40, the docker CLI plugin): a
stack up on Docker 28 with and without shm_size, and every fixed file of the
corpus (tests/compose) through compose v2's own validation
(`docker compose config`), as issue 39 asks."""
import json
import shutil
from pathlib import Path

from engines_env import IMAGE, MiB, STATIC_CLI
from harness import df_kib, host_ram_bytes, kib

CORPUS = sorted(p for p in (Path(__file__).parents[1] / "compose").iterdir() if p.is_dir())
# Compose file format v1 (services at the top level): compose v2 reads no such
# file, before or after the fix (docker-compose 1.29 did).
V1_FORMAT = {"70-compose-v1", "73-sameersbn-postgresql-v1"}
# Findings whose fix writes the suggested size (as tests/integration/test_compose.py).
SIZED_BY_FIX = {"missing-shm-size", "size-too-small", "host-shm-bind", "ipc-host-for-shm"}
UNITS = {"b": 1, "k": 1 << 10, "kb": 1 << 10, "m": MiB, "mb": MiB, "g": 1 << 30, "gb": 1 << 30}


def size_bytes(text):
    text = str(text).lower()
    digits = text.rstrip("bkmg")
    return int(float(digits) * UNITS.get(text[len(digits):], 1))


def test_compose_up_with_and_without_shm_size(dockerd, ns):
    work = ns.base / "compose-up"
    work.mkdir()
    (work / "compose.yaml").write_text(f"""services:
  sized:
    image: {IMAGE}
    network_mode: none
    shm_size: 200m
    command: ["df", "-k", "/dev/shm"]
  plain:
    image: {IMAGE}
    network_mode: none
    command: ["df", "-k", "/dev/shm"]
""")
    compose = ["docker", "-H", dockerd.host, "compose", "-p", "shmkengines"]
    assert ns.run(["docker", "compose", "version", "--short"]).stdout.startswith("2.")
    try:
        ns.run([*compose, "up", "--no-color", "--abort-on-container-exit"], cwd=work)
        out = {svc: df_kib(ns.run([*compose, "logs", "--no-color", "--no-log-prefix", svc], cwd=work).stdout)
               for svc in ["sized", "plain"]}
    finally:
        ns.run([*compose, "down"], cwd=work, check=False)
    assert out["sized"] == kib(200 * MiB)
    assert abs(out["plain"] - kib(host_ram_bytes() // 2)) <= 4  # shm.default auto: half of RAM


# Per case, inside the root (two at a time): check (the findings), fix --write,
# then compose v2's config of the fixed project; each output to a file.
PER_CASE = r"""
cd "$1" || exit 1
"$0" compose check --no-engine -o json >check.out 2>/dev/null
"$0" compose fix --no-engine --write >fix.out 2>&1
docker compose config --format json >config.out 2>config.err
echo $? >config.rc
"""


def test_every_fixed_file_passes_compose_v2_config(ns):
    """`shmkeeper compose fix --write` on each case, then `docker compose
    config`: every case whose fix is meant to make a valid project passes
    (but the v1-format one, which compose v2 cannot read at all), and compose
    v2 reads the size the fix wrote."""
    root = ns.base / "corpus"
    for case in CORPUS:
        shutil.copytree(case, root / case.name)
    two_at_a_time = 'cli=$1; shift; printf "%s\\n" "$@" | xargs -P2 -I{} sh -c "$0" "$cli" {}'
    ns.run(["sh", "-c", two_at_a_time, PER_CASE, STATIC_CLI,
            *[root / c.name for c in CORPUS]], timeout=600)
    passed, failed = [], []
    for case in CORPUS:
        expected = json.loads((case / "expected.json").read_text())
        work = root / case.name
        rc = int((work / "config.rc").read_text())
        (passed if rc == 0 else failed).append(case.name)
        if expected["fix_makes_config_valid"] not in (True, ["v2"]):  # tests/compose/README.md
            continue
        if case.name in V1_FORMAT:
            assert rc != 0, case.name
            continue
        assert rc == 0, (case.name, (work / "config.err").read_text())
        report = json.loads((work / "check.out").read_text())
        sized = {f["service"] for f in report["findings"] if f["code"] in SIZED_BY_FIX and f["severity"] != "info"}
        services = json.loads((work / "config.out").read_text())["services"]
        for svc in sized:  # compose v2 reads the size the fix wrote (in bytes)
            assert size_bytes(services[svc]["shm_size"]) == size_bytes(expected["sizes"][svc]), (case.name, svc)
    print(f"compose v2 config: {len(passed)} of {len(CORPUS)} fixed files pass; fail: {failed}")
    assert set(failed) <= V1_FORMAT | {c.name for c in CORPUS if json.loads((c / "expected.json").read_text())[
        "fix_makes_config_valid"] not in (True, ["v2"])}
