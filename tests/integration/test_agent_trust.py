"""Who may change the node (issue 36): a private shmkeeperd on a private tmpfs
holding torch_<deadpid>_* files (true leaks), real kernel, real gRPC and TLS.

- over TCP, ReclaimLeaks needs a client certificate verified against
  agent.tcp.clientCAFile: a plaintext listener (`insecure: true`) and a TLS
  listener without a client CA refuse it (PERMISSION_DENIED, one line,
  counted in shmkeeper_grpc_calls_denied_total, the files kept) and say so
  once at start-up, while read calls (`leaks`) are still served there; the
  same reclaim over mTLS is the positive control; the root-only unix socket
  keeps reclaiming on every listener setting.
"""
import json
import shutil
import subprocess

import pytest

from harness import CLI, require, run
from reclaim_attack import (HOLDERS, Tmpfs, agent_config, make_leaks, metric_values, scrape, start_agent,
                            wait_reclaimable)

READ_ONLY_NOTE = "serves read-only calls only"
DENIED = "needs a client certificate verified against agent.tcp.clientCAFile"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, both signed by it."""
    require(shutil.which("openssl") is not None, "openssl is not installed")
    d = tmp_path_factory.mktemp("s9-auth-certs")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
            "-subj", "/CN=shmkeeper-test-ca", cwd=d)
    for name in ("server", "client"):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
                f"/CN={name}", cwd=d)
        (d / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "1", "-extfile", f"{name}.ext", cwd=d)
    return d


def tcp_settings(mode, certs):
    """(the agent.tcp block, the CLI's flags) of a listener `mode`."""
    tls = f"    certFile: {certs}/server.pem\n    keyFile: {certs}/server.key\n"
    if mode == "insecure":
        return "    insecure: true\n", ["--insecure"]
    if mode == "tls-without-ca":
        return tls, ["--tls-ca", f"{certs}/ca.pem"]
    return (tls + f"    clientCAFile: {certs}/ca.pem\n",
            ["--tls-ca", f"{certs}/ca.pem", "--tls-cert", f"{certs}/client.pem", "--tls-key", f"{certs}/client.key"])


def tcp_port(agent):
    """The TCP port of the agent's "serving" log line."""
    for line in agent.log.read_text().splitlines():
        if line.startswith("{") and json.loads(line).get("msg") == "serving":
            return json.loads(line)["tcp_port"]
    raise AssertionError("no serving line in the agent log:\n" + agent.log.read_text()[-2000:])


def denied_total(agent):
    return metric_values(scrape(agent), "shmkeeper_grpc_calls_denied_total").get('{method="ReclaimLeaks"}')


@pytest.mark.parametrize("mode", ["insecure", "tls-without-ca", "mtls"])
def test_reclaim_over_tcp_needs_a_verified_client_certificate(tmp_path, root_and_runc, certs, mode):
    require(HOLDERS.exists(), f"holders not built at {HOLDERS}")
    shm = Tmpfs(tmp_path / "shm", size="16m")
    agent = None
    try:
        base = tmp_path / "agent"
        block, flags = tcp_settings(mode, certs)
        text = agent_config(base, [shm.path]).replace("agent:\n", "agent:\n  tcp:\n    address: 127.0.0.1:0\n"
                                                      + block, 1)
        agent = start_agent(base, text)
        _, paths = make_leaks(shm.path, 2, "tcp")
        wait_reclaimable(agent.sock, paths)
        addr = f"127.0.0.1:{tcp_port(agent)}"
        # Reads are served on every listener.
        listed = json.loads(run([CLI, "leaks", "-o", "json", "--agent", addr, *flags]).stdout)
        assert {str(p) for p in paths} <= {l.get("path") for l in listed.get("leaks", [])}
        p = run([CLI, "reclaim", "--yes", "--agent", addr, *flags], check=False)
        notes = [line for line in agent.log.read_text().splitlines() if READ_ONLY_NOTE in line]
        if mode == "mtls":  # positive control: an authenticated caller reclaims over TCP
            assert p.returncode == 0 and "reclaimed 2 segment(s)" in p.stdout, p.stdout + p.stderr
            assert not any(x.exists() for x in paths)
            assert denied_total(agent) == 0 and not notes
            return
        problems = []
        if p.returncode == 0 or DENIED not in p.stderr or len(p.stderr.strip().splitlines()) != 1:
            problems.append(f"reclaim over {mode} TCP was not refused in one line: rc={p.returncode} "
                            f"stdout={p.stdout!r} stderr={p.stderr!r}")
        if not all(x.exists() for x in paths):
            problems.append(f"reclaim over {mode} TCP removed files")
        if denied_total(agent) != 1:
            problems.append(f"shmkeeper_grpc_calls_denied_total is {denied_total(agent)}, not 1")
        if len(notes) != 1:
            problems.append(f"the start-up log says {len(notes)} times that the listener is read-only")
        assert not problems, "\n".join(problems)
        # The root-only unix socket keeps its behaviour.
        assert "reclaimed 2 segment(s)" in agent.cli("reclaim", "--yes").stdout
        assert not any(x.exists() for x in paths)
    finally:
        if agent:
            agent.stop()
        shm.stop()

