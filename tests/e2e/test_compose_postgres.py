"""A shell-wrapped PostgreSQL 15 service in a real docker-compose stack
(private dockerd, a debootstrapped Debian image with postgresql-15): `compose
check` recognises it through `bash -c "initdb && exec postgres"` and, for an
in-house image name with no command, through the engine's image config; the
parallel hash join fails at Docker's 64 MiB (the positive control), and
after `compose fix --write` the same query succeeds in the size written."""
import json
import os
import shutil
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from harness import df_kib, kib, require, run

MiB = 1 << 20
ROOTFS = Path(__file__).parents[1] / "peer" / "debian_rootfs.sh"
PACKAGES = "postgresql-15"  # the cache key #24's preload tests may share
PGBIN = "/usr/lib/postgresql/15/bin"

# A parallel hash join whose shared hash table (dynamic shared memory, posix:
# files in /dev/shm) is about 200 MB.
QUERY = """
SET max_parallel_workers_per_gather = 2; SET parallel_setup_cost = 0; SET parallel_tuple_cost = 0;
SET min_parallel_table_scan_size = 0; SET enable_mergejoin = off; SET enable_nestloop = off;
SET work_mem = '256MB';
CREATE TABLE t AS SELECT g AS id, repeat('x', 100) AS pad FROM generate_series(1, 1500000) g;
ANALYZE t;
EXPLAIN (COSTS OFF) SELECT count(*) FROM t a JOIN t b USING (id);
SELECT count(*) AS joined FROM t a JOIN t b USING (id);
"""


@pytest.fixture(scope="module")
def pg_image(docker_engine):
    """The Debian image with postgresql-15, imported twice: plain, and as an
    in-house name whose config (CMD, ENV) says PostgreSQL."""
    require(shutil.which("docker-compose") is not None, "docker-compose is not installed")
    built = subprocess.run([ROOTFS, PACKAGES], capture_output=True, text=True, timeout=1200)
    require(built.returncode == 0, "no Debian rootfs (debootstrap needs the Debian mirror): " + built.stderr[-500:])
    tarball = built.stdout.strip().splitlines()[-1]
    tag = "shmk-pg15:" + Path(tarball).stem.split("-")[-1]
    if docker_engine.docker("image", "inspect", tag, check=False).returncode != 0:
        docker_engine.docker("import", tarball, tag, timeout=600)
    inhouse = "registry.example.internal/data/warehouse:15"
    docker_engine.docker("import", "--change", "ENV PGDATA=/var/lib/postgresql/data", "--change",
                         f'CMD ["{PGBIN}/postgres", "-D", "/var/lib/postgresql/data"]', tarball, inhouse,
                         timeout=600)
    return tag, inhouse


def psql(engine, container, sql):
    return engine.docker("exec", "-u", "postgres", container, f"{PGBIN}/psql", "-h", "/tmp", "-X", "-v",
                         "ON_ERROR_STOP=1", "-c", sql, check=False, timeout=300)


def up(env, cwd, project):
    run(["docker-compose", "-p", project, "up", "-d", "--no-color", "db"], cwd=cwd, env=env, timeout=300)
    cid = run(["docker-compose", "-p", project, "ps", "-q", "db"], cwd=cwd, env=env).stdout.strip()
    assert cid
    return cid


def wait_ready(engine, cid):
    for _ in range(120):
        if engine.docker("exec", "-u", "postgres", cid, f"{PGBIN}/pg_isready", "-h", "/tmp",
                         check=False).returncode == 0:
            return
        time.sleep(0.5)
    pytest.fail("PostgreSQL did not start: " + engine.docker("logs", cid, check=False).stderr[-2000:])


def test_fixed_shell_wrapped_postgres_runs_the_parallel_hash_join(docker_engine, bins, pg_image, tmp_path):
    tag, inhouse = pg_image
    f = tmp_path / "docker-compose.yml"
    f.write_text(textwrap.dedent(f"""\
        version: "2.4"
        services:
          db:   # PostgreSQL started by hand, as analytics stacks do
            image: {tag}
            runtime: runc
            network_mode: none
            user: postgres
            command: bash -c "{PGBIN}/initdb -D /tmp/pg >/dev/null && exec {PGBIN}/postgres -D /tmp/pg -k /tmp -c listen_addresses=''"
          warehouse:   # an in-house name: only the image's config says PostgreSQL
            image: {inhouse}
            network_mode: none
        """))
    env = dict(os.environ, DOCKER_HOST=docker_engine.host)
    report = json.loads(run([bins.CLI, "compose", "check", "-o", "json"], cwd=tmp_path, env=env,
                            check=False).stdout)
    by_service = {x["service"]: x for x in report["findings"]}
    assert sorted(by_service) == ["db", "warehouse"], report
    assert by_service["db"]["code"] == "missing-shm-size"
    assert "its runtime runc gives it a 64MiB /dev/shm" in by_service["db"]["message"]
    # The engine's default runtime is shmkeeper here: no "Docker gives it 64MiB".
    assert "default runtime (shmkeeper) sizes /dev/shm by its policy" in by_service["warehouse"]["message"]
    assert "PostgreSQL" in report["suggestions"]["warehouse"]["reason"]
    # Without the engine, the in-house image shows nothing: the config was what told.
    offline = json.loads(run([bins.CLI, "compose", "check", "--no-engine", "-o", "json"], cwd=tmp_path, env=env,
                             check=False).stdout)
    assert sorted(x["service"] for x in offline["findings"]) == ["db"]

    project = "shmkpg"
    try:
        # Positive control: at Docker's 64 MiB the join fails as the finding says.
        cid = up(env, tmp_path, project)
        wait_ready(docker_engine, cid)
        p = psql(docker_engine, cid, QUERY)
        assert p.returncode != 0, p.stdout
        assert "could not resize shared memory segment" in p.stderr and "No space left on device" in p.stderr, p.stderr
        assert "Parallel Hash" in p.stdout, p.stdout  # the plan was the parallel hash join

        fixed = run([bins.CLI, "compose", "fix", "--write"], cwd=tmp_path, env=env, check=False)
        assert fixed.returncode == 0, fixed.stderr
        text = f.read_text()
        assert text.count('shm_size: "1gb"') == 2, text
        assert 'command: bash -c "' in text  # the rest of the file is as it was
        cid = up(env, tmp_path, project)  # recreated with the new size
        wait_ready(docker_engine, cid)
        assert df_kib(docker_engine.docker("exec", cid, "df", "-k", "/dev/shm").stdout) == kib(1024 * MiB)
        p = psql(docker_engine, cid, QUERY)
        assert p.returncode == 0, p.stderr
        assert "Parallel Hash" in p.stdout and "1500000" in p.stdout, p.stdout
    finally:
        run(["docker-compose", "-p", project, "down", "-t", "1"], cwd=tmp_path, env=env, check=False)
        docker_engine.docker("rmi", inhouse, check=False)
