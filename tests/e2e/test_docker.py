"""End to end under a real, private Docker engine with shmkeeper-runtime
installed as its default runtime by `shmkeeper install docker`."""
import json
import os
import shutil
import textwrap

import pytest

from harness import df_kib, host_ram_bytes, kib, require, run, shm_mounts_under

MiB = 1 << 20
IMG = "shmk-busybox:test"
PROBE = "df -k /dev/shm; grep ' /dev/shm ' /proc/mounts"


def probe(engine, *flags, check=True):
    return engine.docker("run", "--rm", *flags, IMG, "sh", "-c", PROBE, check=check)


def test_no_flags_gets_policy_size(docker_engine):
    p = probe(docker_engine)
    # auto: no memory limit, so 50% of host RAM (the kernel rounds to pages).
    assert abs(df_kib(p.stdout) - kib(host_ram_bytes() // 2)) <= 4


def test_memory_limit_sizes_auto(docker_engine):
    p = probe(docker_engine, "--memory", "300m")
    assert df_kib(p.stdout) == kib(300 * MiB)


def test_plain_runc_is_still_64mib(docker_engine):
    p = probe(docker_engine, "--runtime", "runc")
    assert df_kib(p.stdout) == kib(64 * MiB)


def test_env_size(docker_engine):
    p = probe(docker_engine, "-e", "SHMKEEPER_SHM_SIZE=256m")
    assert df_kib(p.stdout) == kib(256 * MiB)


def test_explicit_shm_size_respected(docker_engine):
    p = probe(docker_engine, "--shm-size", "128m")
    assert df_kib(p.stdout) == kib(128 * MiB)


def containers(engine):
    return set(engine.docker("ps", "-aq", "--no-trunc").stdout.split())


def test_over_max_is_a_clear_error_and_leaves_nothing(docker_engine):
    before = (containers(docker_engine), shm_mounts_under(str(docker_engine.base)))
    p = probe(docker_engine, "-e", "SHMKEEPER_SHM_SIZE=100000Gi", check=False)
    assert p.returncode != 0
    assert "shmkeeper: shm size env SHMKEEPER_SHM_SIZE=\"100000Gi\"" in p.stderr
    assert "is over the node's shm.max" in p.stderr
    assert (containers(docker_engine), shm_mounts_under(str(docker_engine.base))) == before


def test_bad_size_is_a_clear_error(docker_engine):
    before = containers(docker_engine)
    p = probe(docker_engine, "-e", "SHMKEEPER_SHM_SIZE=lots", check=False)
    assert p.returncode != 0
    assert 'env SHMKEEPER_SHM_SIZE: invalid size "lots"' in p.stderr
    assert containers(docker_engine) == before


def test_ipc_shareable_is_remounted(docker_engine):
    p = probe(docker_engine, "--ipc", "shareable", "-e", "SHMKEEPER_SHM_SIZE=300m")
    assert df_kib(p.stdout) == kib(300 * MiB)
    assert "nosuid,nodev,noexec" in p.stdout


def test_ipc_container_joins_owner_size(docker_engine):
    owner = docker_engine.docker("run", "-d", "--ipc", "shareable", "-e", "SHMKEEPER_SHM_SIZE=200m",
                                 IMG, "sleep", "60").stdout.strip()
    try:
        p = probe(docker_engine, "--ipc", f"container:{owner}", "-e", "SHMKEEPER_SHM_SIZE=1g")
        assert df_kib(p.stdout) == kib(200 * MiB)  # the owner's tmpfs, untouched
    finally:
        docker_engine.docker("rm", "-f", owner)


def test_ipc_host_untouched(docker_engine):
    p = probe(docker_engine, "--ipc", "host", "-e", "SHMKEEPER_SHM_SIZE=1g")
    st = os.statvfs("/dev/shm")
    assert df_kib(p.stdout) == st.f_blocks * st.f_frsize // 1024
    assert '"action":"skip"' in docker_engine.runtime_log.read_text().splitlines()[-1]


def test_compose_stack_without_shm_size(docker_engine, tmp_path):
    require(shutil.which("docker-compose") is not None, "docker-compose is not installed")
    (tmp_path / "docker-compose.yml").write_text(textwrap.dedent(f"""\
        version: "3.7"
        services:
          trainer:
            image: {IMG}
            network_mode: none
            command: ["sh", "-c", "{PROBE}"]
        """))
    env = dict(os.environ, DOCKER_HOST=docker_engine.host)
    try:
        p = run(["docker-compose", "-p", "shmkstack", "up", "--abort-on-container-exit", "--no-color"],
                cwd=tmp_path, env=env)
        lines = "\n".join(line.split("|", 1)[1] for line in p.stdout.splitlines() if "|" in line)
        assert abs(df_kib(lines) - kib(host_ram_bytes() // 2)) <= 4
    finally:
        run(["docker-compose", "-p", "shmkstack", "down"], cwd=tmp_path, env=env, check=False)


def test_runtime_log_records_each_decision(docker_engine):
    probe(docker_engine, "-e", "SHMKEEPER_SHM_SIZE=96m")
    import json
    rec = json.loads(docker_engine.runtime_log.read_text().splitlines()[-1])
    assert rec["source"] == "env:SHMKEEPER_SHM_SIZE" and rec["requested"] == "96m"
    assert rec["old_bytes"] == 64 * MiB and rec["new_bytes"] == 96 * MiB
    assert len(rec["container"]) == 64


def test_uninstall_restores_daemon_json(docker_engine, bins):
    # Install a second runtime name and remove it: daemon.json comes back byte for byte.
    before = docker_engine.daemon_json.read_bytes()
    run([bins.CLI, "install", "docker", "--config", docker_engine.daemon_json, "--runtime-name", "shmk2",
         "--runtime-path", bins.RUNTIME])
    assert b"shmk2" in docker_engine.daemon_json.read_bytes()
    p = run([bins.CLI, "uninstall", "docker", "--config", docker_engine.daemon_json, "--runtime-name", "shmk2"],
            check=False)
    assert docker_engine.daemon_json.read_bytes() == before
    # Docker 20.10 keeps a removed runtime until it restarts: the uninstall says so and exits 3.
    live = json.loads(docker_engine.docker("info", "--format", "{{json .Runtimes}}").stdout)
    print("uninstall:", p.returncode, p.stderr.strip(), "live runtimes:", sorted(live))
    if "shmk2" in live:
        assert p.returncode == 3, (p.stdout, p.stderr)
        assert "still runs with default runtime" in p.stderr and "systemctl restart docker" in p.stderr, p.stderr
    else:
        assert p.returncode == 0, p.stderr


def test_fixed_compose_stack_gets_its_size(docker_engine, bins, tmp_path):
    """compose fix --write on a stack that needs shared memory, then a real
    docker-compose up: the container sees the size the fix wrote. Plain runc,
    so the size comes from the file, not from shmkeeper's policy."""
    require(shutil.which("docker-compose") is not None, "docker-compose is not installed")
    f = tmp_path / "docker-compose.yml"
    f.write_text(textwrap.dedent(f"""\
        version: "2.4"
        services:
          trainer:   # runs PyTorch DataLoader workers
            image: {IMG}
            runtime: runc
            network_mode: none
            command: ["sh", "-c", "echo torch num_workers=4; {PROBE}"]
        """))
    run([bins.CLI, "compose", "fix", "--write", "--size", "640m"], cwd=tmp_path)
    assert '    shm_size: "640m"\n' in f.read_text()
    env = dict(os.environ, DOCKER_HOST=docker_engine.host)
    try:
        p = run(["docker-compose", "-p", "shmkfixed", "up", "--abort-on-container-exit", "--no-color"],
                cwd=tmp_path, env=env)
        lines = "\n".join(line.split("|", 1)[1] for line in p.stdout.splitlines() if "|" in line)
        assert df_kib(lines) == kib(640 * MiB)
    finally:
        run(["docker-compose", "-p", "shmkfixed", "down"], cwd=tmp_path, env=env, check=False)


def test_fixed_browser_stack_trades_the_host_bind_for_shm_size(docker_engine, bins, tmp_path):
    """A Selenium-like stack, offline: busybox tagged as a Chrome node image,
    a launcher named google-chrome, and the host /dev/shm bind blog posts
    recommend. check names the bind and the browser's size; after fix
    --write, a real docker-compose up (plain runc) gets a private 2 GiB
    /dev/shm instead of the host's."""
    require(shutil.which("docker-compose") is not None, "docker-compose is not installed")
    docker_engine.docker("tag", IMG, "selenium/node-chrome:shmk-e2e")
    launcher = tmp_path / "google-chrome"
    launcher.write_text(f"#!/bin/sh\necho google-chrome $*; {PROBE}\n")
    launcher.chmod(0o755)
    f = tmp_path / "docker-compose.yml"
    f.write_text(textwrap.dedent("""\
        version: "2.4"
        services:
          chrome:
            image: selenium/node-chrome:shmk-e2e
            runtime: runc
            network_mode: none
            entrypoint: ["/opt/bin/google-chrome"]
            command: ["--headless=new", "--no-sandbox"]
            volumes:
              - ./google-chrome:/opt/bin/google-chrome:ro
              - /dev/shm:/dev/shm   # chrome crashed without it
        """))
    report = json.loads(run([bins.CLI, "compose", "check", "-o", "json"], cwd=tmp_path, check=False).stdout)
    assert [x["code"] for x in report["findings"]] == ["host-shm-bind"]
    assert report["suggestions"]["chrome"]["shmSize"] == "2gb"
    assert "session deleted because of page crash" in report["suggestions"]["chrome"]["reason"]
    run([bins.CLI, "compose", "fix", "--write"], cwd=tmp_path)
    text = f.read_text()
    assert '    shm_size: "2gb"\n' in text and "/dev/shm:/dev/shm" not in text and "./google-chrome:" in text
    env = dict(os.environ, DOCKER_HOST=docker_engine.host)
    try:
        p = run(["docker-compose", "-p", "shmkbrowser", "up", "--abort-on-container-exit", "--no-color"],
                cwd=tmp_path, env=env)
        lines = "\n".join(line.split("|", 1)[1] for line in p.stdout.splitlines() if "|" in line)
        assert "google-chrome --headless=new" in lines
        assert df_kib(lines) == kib(2048 * MiB)  # its own tmpfs, not the host's /dev/shm
    finally:
        run(["docker-compose", "-p", "shmkbrowser", "down"], cwd=tmp_path, env=env, check=False)
        docker_engine.docker("rmi", "selenium/node-chrome:shmk-e2e", check=False)


def test_doctor_names_the_workload_it_sees(docker_engine, bins):
    """A process named like PostgreSQL's (holding a segment as its dynamic
    shared memory does) in a 64 MiB /dev/shm: the doctor names it, its size
    and the error it will give."""
    doctor = bins.BUILD / "plugin" / "shmkeeper-doctor"
    require(bins.SHMTOOL.exists(), f"shmtool not built at {bins.SHMTOOL}")
    p = docker_engine.docker(
        "run", "--rm", "--runtime", "runc", "-v", f"{doctor}:/doctor:ro", "-v", f"{bins.SHMTOOL}:/shmtool:ro", IMG,
        "sh", "-c", "(exec -a 'postgres: parallel worker' /shmtool hold PostgreSQL.1804289383 1 &); "
        "while [ ! -e /dev/shm/PostgreSQL.1804289383 ]; do sleep 0.1; done; /doctor; /doctor -o json")
    text, js = p.stdout.split("\n{", 1)  # the text names docker info -f '{{.DefaultRuntime}}'
    j = json.loads("{" + js)
    assert [w["name"] for w in j["workloads"]] == ["PostgreSQL"]
    assert j["workloads"][0]["shmBytes"] == 1 << 30
    assert "PostgreSQL runs here" in text and "could not resize shared memory segment" in text
    assert "note: PostgreSQL (pid" in text and "hub.docker.com/_/postgres" in text


def test_doctor_in_a_default_container_names_the_limit_and_the_fix(docker_engine, bins):
    doctor = bins.BUILD / "plugin" / "shmkeeper-doctor"
    p = docker_engine.docker("run", "--rm", "--runtime", "runc", "-v", f"{doctor}:/doctor:ro", IMG, "/doctor")
    assert "/dev/shm        64MiB" in p.stdout
    assert "the 64MiB default of Docker" in p.stdout
    assert "fix: docker run --shm-size=2g" in p.stdout
    assert 'shm_size: "2gb"' in p.stdout
    assert "engine          docker" in p.stdout
    # shmkeeper is this node's default runtime; --runtime runc bypassed it. From inside, doctor cannot see
    # the default (docs/doctor.md): it names the bypass beside the install, never the install alone.
    assert "(--runtime runc): start it without --runtime" in p.stdout, p.stdout
    assert "fix: node-wide, once: shmkeeper install" not in p.stdout, p.stdout
    j = json.loads(docker_engine.docker("run", "--rm", "--runtime", "runc", "-v", f"{doctor}:/doctor:ro", IMG,
                                        "/doctor", "-o", "json").stdout)
    assert j["schemaVersion"] == "shmkeeper.io/v1"
    assert j["shm"]["sizeBytes"] == 64 * MiB and not j["ipc"]["host"] and j["inContainer"]
    assert j["sizeSource"].startswith("the engine's default")
    # Under shmkeeper, with a leaked file and its holder-less state visible.
    p = docker_engine.docker("run", "--rm", "-v", f"{doctor}:/doctor:ro", IMG, "sh", "-c",
                             "dd if=/dev/zero of=/dev/shm/torch_99_0 bs=1M count=3 2>/dev/null; /doctor -o json")
    j = json.loads(p.stdout)
    assert j["shm"]["sizeBytes"] > 64 * MiB
    assert [f["path"] for f in j["leaked"]] == ["/dev/shm/torch_99_0"]
    # The size is right and shmkeeper ran it: only the leak's fixes, no size and no install.
    assert any("shmkeeper leaks" in f for f in j["fixes"]), j["fixes"]
    assert not any("--shm-size" in f or "shm_size" in f or "install" in f for f in j["fixes"]), j["fixes"]
    assert any("PyTorch" in w for w in j["warnings"])


# docs/configuration.md#precedence as a matrix through real `docker run`: an explicit --shm-size beats
# SHMKEEPER_SHM_SIZE (from -e or from the image's ENV), which beats the policy (auto: half of RAM).
# (The annotation rank needs `docker run --annotation`, Docker >= 24; this is 20.10: tests/unit/plan_test.cc
# and tests/integration/test_runc.py cover it.)
@pytest.fixture(scope="module")
def env_image(docker_engine):
    """IMG with ENV SHMKEEPER_SHM_SIZE, as an image author would set it; and one with a malformed value."""
    for tag, value in (("shmk-env96:test", "96m"), ("shmk-envbad:test", "lots")):
        cid = docker_engine.docker("create", IMG, "true").stdout.strip()
        docker_engine.docker("commit", "--change", f"ENV SHMKEEPER_SHM_SIZE={value}", cid, tag)
        docker_engine.docker("rm", cid)
    return "shmk-env96:test", "shmk-envbad:test"


@pytest.mark.parametrize("flags,image,want,source", [
    ([], IMG, None, "policy"),
    (["-e", "SHMKEEPER_SHM_SIZE=96m"], IMG, 96 * MiB, "env:SHMKEEPER_SHM_SIZE"),
    (["--shm-size", "128m"], IMG, 128 * MiB, "engine"),
    (["-e", "SHMKEEPER_SHM_SIZE=96m", "--shm-size", "2g"], IMG, 2048 * MiB, "engine"),
    ([], "env96", 96 * MiB, "env:SHMKEEPER_SHM_SIZE"),
    (["--shm-size", "128m"], "env96", 128 * MiB, "engine"),
    (["-e", "SHMKEEPER_SHM_SIZE=200m"], "env96", 200 * MiB, "env:SHMKEEPER_SHM_SIZE"),
    (["--shm-size", "128m"], "envbad", 128 * MiB, "engine"),
], ids=["nothing-policy", "env", "shm-size", "shm-size-beats-env", "image-env", "shm-size-beats-image-env",
        "run-env-beats-image-env", "shm-size-ignores-bad-image-env"])
def test_precedence_matrix(docker_engine, env_image, flags, image, want, source):
    image = {"env96": env_image[0], "envbad": env_image[1]}.get(image, image)
    p = docker_engine.docker("run", "--rm", *flags, image, "sh", "-c", PROBE)
    want_kib = kib(want) if want else kib(host_ram_bytes() // 2)
    assert abs(df_kib(p.stdout) - want_kib) <= 4, p.stdout
    rec = json.loads(docker_engine.runtime_log.read_text().splitlines()[-1])
    assert rec["source"] == source, rec
    if source == "engine" and any("SHMKEEPER_SHM_SIZE" in f for f in flags) or image != IMG and source == "engine":
        assert "SHMKEEPER_SHM_SIZE=" in rec["reason"] and "ignored" in rec["reason"], rec


def test_doctor_says_which_source_won_and_recommends_what_takes_effect(docker_engine, bins):
    """An image's ENV SHMKEEPER_SHM_SIZE under an explicit --shm-size: the doctor names the variable as
    overridden (docs/configuration.md#precedence); alone, it names the variable as the source."""
    doctor = bins.BUILD / "plugin" / "shmkeeper-doctor"
    j = json.loads(docker_engine.docker("run", "--rm", "-v", f"{doctor}:/doctor:ro", "-e", "SHMKEEPER_SHM_SIZE=96m",
                                        "--shm-size", "128m", IMG, "/doctor", "-o", "json").stdout)
    assert j["shm"]["sizeBytes"] == 128 * MiB
    assert j["sizeSource"].startswith('not env SHMKEEPER_SHM_SIZE=96m (96MiB): /dev/shm is 128MiB'), j
    assert any("SHMKEEPER_SHM_SIZE=96m is set but did not size /dev/shm" in f for f in j["findings"]), j
    assert any(f.startswith("docker run --shm-size=") for f in j["fixes"])
    j = json.loads(docker_engine.docker("run", "--rm", "-v", f"{doctor}:/doctor:ro", "-e", "SHMKEEPER_SHM_SIZE=96m",
                                        IMG, "/doctor", "-o", "json").stdout)
    assert j["shm"]["sizeBytes"] == 96 * MiB and j["sizeSource"] == "env SHMKEEPER_SHM_SIZE=96m", j


def test_uninstall_of_the_default_runtime_checks_the_live_dockerd(tmp_path, bins, rootfs, root_and_runc):
    """install --set-as-default, a container created under shmkeeper, then uninstall against a private dockerd
    of this test's own: daemon.json is restored; when the running dockerd still has shmkeeper as its default
    (Docker 20.10 does not drop it on a reload) the command exits 1 naming the restart, never "success"; the
    container made under shmkeeper can still be stopped and removed."""
    require(shutil.which("dockerd") is not None, "dockerd (docker.io) is not installed")
    from harness import RUNTIME, PrivateDocker
    engine = PrivateDocker(tmp_path / "d").start()
    try:
        before = engine.daemon_json.read_bytes()
        run([bins.CLI, "install", "docker", "--config", engine.daemon_json, "--set-as-default", "--runtime-path",
             RUNTIME])
        engine.wait_default_runtime("shmkeeper")
        engine.import_busybox(IMG, rootfs)
        cid = engine.docker("run", "-d", IMG, "sleep", "600").stdout.strip()
        assert engine.docker("inspect", "--format", "{{.HostConfig.Runtime}}", cid).stdout.strip() == "shmkeeper"
        p = run([bins.CLI, "uninstall", "docker", "--config", engine.daemon_json], check=False)
        assert engine.daemon_json.read_bytes() == before
        default = engine.docker("info", "--format", "{{.DefaultRuntime}}").stdout.strip()
        print("uninstall:", p.returncode, p.stdout.strip(), p.stderr.strip(), "live default:", default)
        if default == "shmkeeper":
            assert p.returncode == 3, (p.stdout, p.stderr)
            assert 'still runs with default runtime "shmkeeper"' in p.stderr
            assert "systemctl restart docker" in p.stderr and "service docker restart" in p.stderr
        else:
            assert p.returncode == 0, p.stderr
        engine.docker("stop", "-t", "1", cid)
        engine.docker("rm", cid)
        assert cid not in engine.docker("ps", "-aq", "--no-trunc").stdout
    finally:
        engine.stop()


def test_install_finds_the_api_socket_in_daemon_json_hosts(tmp_path, bins, root_and_runc):
    """A dockerd whose API socket is in daemon.json's "hosts" (no -H on its command line): install
    --set-as-default checks that very dockerd and exits 0 once it runs with shmkeeper (it asked
    /var/run/docker.sock before, and failed after having applied the change); uninstall likewise."""
    require(shutil.which("dockerd") is not None, "dockerd (docker.io) is not installed")
    from harness import RUNTIME, PrivateDocker
    engine = PrivateDocker(tmp_path / "d", hosts_in_config=True).start()
    try:
        assert "-H" not in open(f"/proc/{engine.proc.pid}/cmdline").read().split("\0")
        p = run([bins.CLI, "install", "docker", "--config", engine.daemon_json, "--set-as-default", "--runtime-path",
                 RUNTIME], check=False)
        info = engine.info()
        print("install:", p.returncode, p.stdout.strip(), p.stderr.strip(), "live:", info["DefaultRuntime"])
        assert json.loads(engine.daemon_json.read_text())["hosts"] == [engine.host]  # kept
        assert "shmkeeper" in info["Runtimes"] and info["DefaultRuntime"] == "shmkeeper"
        assert p.returncode == 0 and "dockerd reloaded" in p.stdout and not p.stderr, (p.stdout, p.stderr)
        p = run([bins.CLI, "uninstall", "docker", "--config", engine.daemon_json], check=False)
        live = engine.info()
        print("uninstall:", p.returncode, p.stdout.strip(), p.stderr.strip(), "live:", live["DefaultRuntime"])
        if live["DefaultRuntime"] == "shmkeeper":  # Docker 20.10 keeps it until a restart: the engine's own socket named
            assert p.returncode == 3 and f"{engine.sock}) still runs with" in p.stderr, (p.stdout, p.stderr)
        else:
            assert p.returncode == 0, (p.stdout, p.stderr)
    finally:
        engine.stop()


def test_a_docker_info_with_server_errors_is_not_an_answer(tmp_path, bins, root_and_runc):
    """The docker CLI of Docker 22.06+ exits 0 when it cannot reach dockerd and puts the error in ServerErrors
    (docker info --format): install must not read that as a dockerd without shmkeeper (exit 3, "restart it"),
    but say what it applied and that it could not check it (exit 1). The CLI here is a stand-in printing the
    document such a CLI prints (tests/unit/fixtures/docker-info-unreachable.json) with exit 0; the dockerd
    whose config it edits is real."""
    require(shutil.which("dockerd") is not None, "dockerd (docker.io) is not installed")
    from harness import REPO, RUNTIME, PrivateDocker
    engine = PrivateDocker(tmp_path / "d").start()
    stub = tmp_path / "bin"
    stub.mkdir()
    fixture = REPO / "tests" / "unit" / "fixtures" / "docker-info-unreachable.json"
    (stub / "docker").write_text(f"#!/bin/sh\ncat {fixture}\necho 'Cannot connect to the Docker daemon' >&2\n")
    (stub / "docker").chmod(0o755)
    try:
        p = run([bins.CLI, "install", "docker", "--config", engine.daemon_json, "--runtime-path", RUNTIME],
                check=False, env=dict(os.environ, PATH=f"{stub}:{os.environ['PATH']}"))
        print("install:", p.returncode, p.stdout.strip(), p.stderr.strip())
        assert p.returncode == 1, (p.stdout, p.stderr)
        [line] = p.stderr.strip().splitlines()
        assert f'{engine.daemon_json} is updated: runtime "shmkeeper" added, and dockerd was sent SIGHUP' in line
        assert "Cannot connect to the Docker daemon at unix:///var/run/docker.sock" in line
        assert "still runs with" not in line and "restart dockerd" in line
        assert "shmkeeper" in json.loads(engine.daemon_json.read_text())["runtimes"]  # applied, and said so
    finally:
        engine.stop()
