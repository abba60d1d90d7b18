"""Docker 28 (sid's docker.io dockerd and docker-cli) with shmkeeper-runtime as
its default runtime, installed by the static CLI inside the sid root: what
/dev/shm is inside the container for each way of asking, and a refusal.
The sizing checks also run against trixie's Docker 26.1 (any_dockerd's
docker26: SHMKEEPER_ENGINES_TRIXIE=1)."""
import json

from engines_env import IMAGE, RUNTIME, shmkeeper
from harness import df_kib, host_ram_bytes, kib

MiB = 1 << 20
PROBE = ["sh", "-c", "df -k /dev/shm"]


def shm(dockerd, *flags):
    p = dockerd.docker("run", "--rm", "--network", "none", *flags, IMAGE, *PROBE)
    return df_kib(p.stdout)


def test_the_engine_is_docker_28_with_shmkeeper_as_default(dockerd):
    info = dockerd.info()
    assert info["ServerVersion"].startswith("28."), info["ServerVersion"]
    assert info["DefaultRuntime"] == "shmkeeper" and "shmkeeper" in info["Runtimes"]
    assert dockerd.docker("version", "--format", "{{.Client.Version}}").stdout.startswith("28.")


def test_default_size_is_the_policy(any_dockerd):
    # shm.default auto: no memory limit, so half of the host's RAM (the kernel rounds to pages)
    assert abs(shm(any_dockerd) - kib(host_ram_bytes() // 2)) <= 4


def test_plain_runc_keeps_docker_64m(any_dockerd):
    assert shm(any_dockerd, "--runtime", "runc") == kib(64 * MiB)


def test_annotation_sizes(any_dockerd):
    # Docker >= 24 passes --annotation into the OCI spec
    assert shm(any_dockerd, "--annotation", "shmkeeper.io/shm-size=300m") == kib(300 * MiB)


def test_env_sizes(any_dockerd):
    assert shm(any_dockerd, "-e", "SHMKEEPER_SHM_SIZE=96m") == kib(96 * MiB)


def test_explicit_shm_size_is_kept(any_dockerd):
    assert shm(any_dockerd, "--shm-size", "128m") == kib(128 * MiB)


def test_memory_limit_sizes_auto(any_dockerd):
    assert shm(any_dockerd, "-m", "300m") == kib(300 * MiB)


def test_trixie_engine_is_docker_26_with_shmkeeper_as_default(trixie_dockerd):
    info = trixie_dockerd.info()
    assert info["ServerVersion"].startswith("26.1."), info["ServerVersion"]
    assert info["DefaultRuntime"] == "shmkeeper" and "shmkeeper" in info["Runtimes"]


def ids(dockerd):
    return set(dockerd.docker("ps", "-aq", "--no-trunc").stdout.split())


def test_a_bad_size_is_refused_in_one_line_and_leaves_no_container(dockerd):
    before = ids(dockerd)
    p = dockerd.docker("run", "--network", "none", "--annotation", "shmkeeper.io/shm-size=lots", IMAGE, *PROBE,
                       check=False)
    assert p.returncode != 0
    lines = [line for line in p.stderr.splitlines() if "shmkeeper" in line]
    assert len(lines) == 1 and 'invalid size "lots"' in lines[0], p.stderr
    print("docker 28 refusal:", lines[0])
    # `docker run` without --rm keeps a created container when create fails; it is Created, never started
    left = ids(dockerd) - before
    for cid in left:
        state = json.loads(dockerd.docker("inspect", cid).stdout)[0]["State"]
        assert state["Status"] == "created" and state["Pid"] == 0, state
        dockerd.docker("rm", cid)
    p = dockerd.docker("run", "--rm", "--network", "none", "-e", "SHMKEEPER_SHM_SIZE=100000Gi", IMAGE, *PROBE,
                       check=False)
    assert p.returncode != 0 and "is over the node's shm.max" in p.stderr, p.stderr
    assert ids(dockerd) == before


def test_each_decision_is_logged(dockerd, ns):
    shm(dockerd, "-e", "SHMKEEPER_SHM_SIZE=97m")
    rec = json.loads(ns.runtime_log.read_text().splitlines()[-1])
    assert rec["source"] == "env:SHMKEEPER_SHM_SIZE" and rec["new_bytes"] == 97 * MiB, rec


def test_install_and_uninstall_docker_against_docker_28(dockerd, ns):
    """A second runtime name installed and removed on the live Docker 28: the
    live check sees it (sid's CLI exits 0 with ServerErrors when it cannot
    connect: not the case here), and the file comes back byte for byte."""
    before = dockerd.daemon_json.read_bytes()
    shmkeeper(ns, "install", "docker", "--config", dockerd.daemon_json, "--runtime-name", "shmk2",
              "--runtime-path", RUNTIME)
    assert "shmk2" in dockerd.info()["Runtimes"]
    p = shmkeeper(ns, "uninstall", "docker", "--config", dockerd.daemon_json, "--runtime-name", "shmk2", check=False)
    assert dockerd.daemon_json.read_bytes() == before
    assert p.returncode == 0, p.stdout + p.stderr  # Docker 28 drops a removed runtime on reload
    assert "shmk2" not in dockerd.info()["Runtimes"]


def test_what_sid_docker_cli_prints_when_it_cannot_connect(ns, dockerd):
    """What install docker's rule reads, from the real 28.5 CLI: `docker info`
    against no daemon prints a document without a ServerVersion (no answer,
    whatever the exit status: 28.5.2 exits 1 and has no ServerErrors; the
    CLIs issue 37 saw exit 0 with ServerErrors)."""
    p = ns.run(["docker", "-H", f"unix://{ns.base}/no-such.sock", "info", "--format", "{{json .}}"], check=False)
    info = json.loads(p.stdout)
    print("docker-cli 28.5.2 without a daemon: exit", p.returncode, "ServerErrors", info.get("ServerErrors"))
    assert not info.get("ServerVersion"), (p.returncode, info)


def test_install_docker_finds_the_socket_in_daemon_json_hosts(ns):
    """A Docker 28 whose API socket is only in daemon.json's "hosts": install
    and uninstall reach it there (they asked /var/run/docker.sock before).
    Uninstalling the file's last runtime removes the "runtimes" key, and
    Docker 28 reloads only the keys a file has: it keeps the runtime until it
    restarts, and the uninstall says so (exit 3), the file restored."""
    import sidroot
    engine = sidroot.SidDocker(ns, ns.base / "docker-hosts", hosts_in_config=True).start()
    try:
        before = engine.daemon_json.read_bytes()
        p = shmkeeper(ns, "install", "docker", "--config", engine.daemon_json, "--runtime-path", RUNTIME, check=False)
        assert p.returncode == 0 and "dockerd reloaded" in p.stdout, p.stdout + p.stderr
        assert "shmkeeper" in engine.info()["Runtimes"]
        p = shmkeeper(ns, "uninstall", "docker", "--config", engine.daemon_json, check=False)
        assert engine.daemon_json.read_bytes() == before
        assert p.returncode == 3 and len(p.stderr.strip().splitlines()) == 1, (p.returncode, p.stdout, p.stderr)
        assert f"{engine.sock}) still runs" in p.stderr and "runtimes io.containerd.runc.v2, runc, shmkeeper" \
            in p.stderr, p.stderr
        assert "shmkeeper" in engine.info()["Runtimes"]
        # The socket gone (dockerd still runs): the check cannot be made after the write, and the
        # install says in one line what it applied (exit 1), never "restart it" (exit 3).
        engine.sock.unlink()
        p = shmkeeper(ns, "install", "docker", "--config", engine.daemon_json, "--runtime-path", RUNTIME, check=False)
        print("install docker, dockerd unreachable:", p.returncode, p.stderr.strip())
        assert p.returncode == 1 and len(p.stderr.strip().splitlines()) == 1, (p.returncode, p.stdout, p.stderr)
        assert "is updated" in p.stderr and "could not be checked" in p.stderr, p.stderr
    finally:
        engine.stop()
