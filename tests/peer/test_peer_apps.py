"""Peer programs as a compatibility gate for the preload's ENOSPC check:
Debian's PostgreSQL 15 (a parallel hash join) and Chromium (headless, a tall
page), each run by the private dockerd with shmkeeper as its default runtime,
once with the preload injected and once with SHMKEEPER_INJECT=0, at a
/dev/shm that fits and one that does not. The results must be the same, and
the preload's ENOSPC line ("shmkeeper: cannot ...": the one divergence from
libc, or a SIGBUS it saved) must not appear.

The programs are the host's Debian 12 packages (postgresql-15, chromium:
deploy/install-deps.sh test), with their own glibc 2.36, mounted read-only
into a busybox image that carries glibc's loader (so the wrapper injects the
preload): no image to build or cache, about a minute in all. Chromium is
called as /usr/lib/chromium/chromium: Debian's /usr/bin/chromium launcher adds
--disable-dev-shm-usage by itself when /dev/shm is small, which would take
/dev/shm out of the test."""
import re
import shutil
from pathlib import Path

import pytest

from harness import glibc_rootfs, require

IMG = "shmk-peer-apps:test"
PG_BIN = Path("/usr/lib/postgresql/15/bin")
CHROMIUM = Path("/usr/lib/chromium/chromium")
HOST = [a for d in ["/usr", "/lib", "/lib64", "/etc/fonts"] for a in ("-v", f"{d}:{d}:ro")]
MODES = {"preload": [], "no-inject": ["-e", "SHMKEEPER_INJECT=0"]}
DIVERGENCE = "shmkeeper: cannot"


@pytest.fixture(scope="module")
def image(docker_engine, tmp_path_factory):
    root = glibc_rootfs(tmp_path_factory.mktemp("peer-apps"))
    (root / "etc" / "passwd").write_text("root:x:0:0:root:/:/bin/sh\npostgres:x:101:104:postgres:/tmp:/bin/sh\n")
    (root / "etc" / "group").write_text("root:x:0:\npostgres:x:104:\n")
    (root / "etc" / "fonts").mkdir()
    docker_engine.import_busybox(IMG, root)
    return IMG


def counted(stderr):
    return stderr.count(DIVERGENCE)


# initdb, start, a parallel hash join (two workers, a shared hash table in
# dynamic shared memory on /dev/shm), stop.
PG = r"""
set -e
export PATH=/usr/lib/postgresql/15/bin:$PATH
initdb -D /tmp/db -A trust >/dev/null
pg_ctl -D /tmp/db -l /tmp/log -w -o "-k /tmp -c listen_addresses= -c dynamic_shared_memory_type=posix \
  -c max_parallel_workers_per_gather=2 -c parallel_setup_cost=0 -c parallel_tuple_cost=0 \
  -c min_parallel_table_scan_size=0 -c work_mem=64MB" start >/dev/null
echo "maps=$(grep -c libshmkeeper-preload /proc/$(head -1 /tmp/db/postmaster.pid)/maps)" >&2
psql -h /tmp -d postgres -Atq -c "create table a as select g as id, md5(g::text) as v from generate_series(1,400000) g;
  create table b as select g as id from generate_series(1,400000) g; analyze a; analyze b;" \
  -c "explain (costs off) select count(*), sum(length(v)) from a join b using (id)" \
  -c "select count(*), sum(length(v)) from a join b using (id)" 2>&1 || true
pg_ctl -D /tmp/db -m fast stop >/dev/null
"""


def postgres(docker_engine, image, mode, shm):
    p = docker_engine.docker("run", "--rm", "--user", "101:104", "--tmpfs", "/tmp:uid=101,gid=104", "-e",
                             f"SHMKEEPER_SHM_SIZE={shm}", *MODES[mode], *HOST, image, "sh", "-c", PG,
                             check=False, timeout=180)
    assert p.returncode == 0, (mode, shm, p.stdout[-2000:], p.stderr[-2000:])
    # the postmaster has the library mapped in one mode only (the positive control)
    assert ("maps=0" in p.stderr) == (mode == "no-inject") and "maps=" in p.stderr, (mode, p.stderr[-2000:])
    # the segment's name is random ("/PostgreSQL.<n>"), and whether the leader or a worker met the full
    # /dev/shm first is timing (a "CONTEXT:  parallel worker" line)
    lines = [line for line in p.stdout.splitlines() if not line.startswith("CONTEXT:")]
    return re.sub(r"PostgreSQL\.\d+", "PostgreSQL.N", "\n".join(lines)).strip(), counted(p.stdout + p.stderr)


def test_postgresql_parallel_hash_join_is_the_same_with_and_without_the_preload(docker_engine, image):
    require((PG_BIN / "postgres").exists(), "postgresql-15 is not installed (deploy/install-deps.sh test)")
    for shm, expect in [("256Mi", "400000|12800000"), ("8Mi", "No space left on device")]:
        got = {mode: postgres(docker_engine, image, mode, shm) for mode in MODES}
        assert "Parallel Hash Join" in got["preload"][0], got  # the plan that puts its hash table in /dev/shm
        assert expect in got["preload"][0], got
        assert got["preload"] == got["no-inject"], got
        assert got["preload"][1] == 0, got  # PostgreSQL sizes with posix_fallocate: never the divergence
        print(f"PostgreSQL at /dev/shm {shm}: {got['preload'][0].splitlines()[-1]} in both modes")


def test_chromium_renders_a_tall_page_the_same_with_and_without_the_preload(docker_engine, image, tmp_path):
    require(CHROMIUM.exists(), "chromium is not installed (deploy/install-deps.sh test)")
    rows = "".join(f'<div style="height:40px;background:hsl({i * 7 % 360},60%,70%)">row {i}</div>'
                   for i in range(500))
    out = tmp_path / "out"
    out.mkdir()
    (out / "tall.html").write_text(f'<html><body style="margin:0">{rows}</body></html>')
    shots = {}
    for shm in ["2Gi", "16Mi"]:
        for mode in MODES:
            name = f"{mode}-{shm}.png"
            p = docker_engine.docker(
                "run", "--rm", "-e", f"SHMKEEPER_SHM_SIZE={shm}", *MODES[mode], *HOST, "-v", f"{out}:/out", image,
                "sh", "-c", 'echo "preload=${LD_PRELOAD:-none}" >&2; exec "$@"', "sh", str(CHROMIUM), "--headless=new", "--no-sandbox", "--disable-gpu", "--user-data-dir=/tmp/ud",
                f"--screenshot=/out/{name}", "--window-size=1000,20000", "--hide-scrollbars", "file:///out/tall.html",
                check=False, timeout=120)
            assert p.returncode == 0 and (out / name).exists(), (mode, shm, p.returncode, p.stderr[-3000:])
            assert counted(p.stderr) == 0, p.stderr[-3000:]
            assert ("preload=none" in p.stderr) == (mode == "no-inject"), p.stderr[:500]
            shots[name] = (out / name).read_bytes()
    first = next(iter(shots.values()))
    assert len(first) > 10000 and all(s == first for s in shots.values()), {k: len(v) for k, v in shots.items()}
    shutil.rmtree(out)
