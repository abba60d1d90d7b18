"""Who may change the node (issue 36): a private shmkeeperd on a private tmpfs
holding torch_<deadpid>_* files (true leaks), real kernel, real gRPC and TLS.

- over TCP, ReclaimLeaks needs a client certificate verified against
  agent.tcp.clientCAFile: a plaintext listener (`insecure: true`) and a TLS
  listener without a client CA refuse it (PERMISSION_DENIED, one line,
  counted in shmkeeper_grpc_calls_denied_total, the files kept) and say so
  once at start-up, while read calls (`leaks`) are still served there; the
  same reclaim over mTLS is the positive control; the root-only unix socket
  keeps reclaiming on every listener setting;
- leaks.reclaim (off | report | auto) is the node's switch: a pod's
  annotation shmkeeper.io/reclaim: auto reclaims nothing on an `off` or
  `report` node (real runc containers, their leaks made inside them), a pod
  may opt out on an `auto` node; `shmkeeper reclaim --yes` is refused on an
  `off` node;
- /metrics of a host install (deploy/config/config.yaml) and of the built-in
  defaults listens on 127.0.0.1:9731 only.
"""
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harness import AGENTD, CLI, SHMTOOL, oci_bundle, require, run, wait_for
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


def runc_pod(tmp_path, rootfs, name, annotations):
    """A runc container `name` (sleep 600, its own /dev/shm, shmtool at /t/shmtool) with `annotations`, under the
    runc root it returns with its init pid; the caller deletes it."""
    require(SHMTOOL.exists(), f"shmtool not built at {SHMTOOL}")
    state = tmp_path / "runc-root"

    def edit(spec):
        spec["mounts"].append({"destination": "/t/shmtool", "type": "bind", "source": str(SHMTOOL),
                               "options": ["bind", "ro"]})

    bundle = oci_bundle(tmp_path / name, rootfs, ["sleep", "600"], edit=edit, annotations=annotations)
    subprocess.run(["runc", "--root", str(state), "run", "-d", "--bundle", str(bundle), name], check=True,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    return state, int(json.loads(run(["runc", "--root", state, "state", name]).stdout)["pid"])


def scans(agent):
    return sum(metric_values(scrape(agent), "shmkeeper_scans_total").values())


@pytest.mark.parametrize("node,pod", [("off", "auto"), ("report", "auto"), ("auto", "auto"), ("auto", "report")],
                         ids=["off-node-pod-auto", "report-node-pod-auto", "auto-node-pod-auto",
                              "auto-node-pod-report"])
def test_no_pod_annotation_reclaims_beyond_the_node(tmp_path, rootfs, root_and_runc, node, pod):
    """leaks.reclaim is the node's switch: a pod's shmkeeper.io/reclaim: auto auto-reclaims nothing on an `off` or
    `report` node; on an `auto` node it is reclaimed (the positive control), unless the pod opts out (`report`).
    `shmkeeper reclaim --yes` is refused in one line on an `off` node and reclaims on a `report` one (control)."""
    name = f"s9-reclaim-{node}-{pod}"
    state, pid = runc_pod(tmp_path, rootfs, name, {"shmkeeper.io/reclaim": pod})
    agent = None
    try:
        base = tmp_path / "agent"
        agent = start_agent(base, agent_config(base, [], reclaim=node, runtime_roots=[state]))
        out = run(["runc", "--root", state, "exec", name, "/t/shmtool", "torch-leak", "1"], check=False).stdout
        assert out.startswith("ready"), out
        (leak,) = [f for f in os.listdir(f"/proc/{pid}/root/dev/shm") if f.startswith("torch_")]
        on_host = Path(f"/proc/{pid}/root/dev/shm") / leak
        if node == "auto" and pod == "auto":  # positive control: the agent reclaims it by itself
            wait_for(lambda: not on_host.exists(), timeout=30, what="the leak auto-reclaimed on an auto node")
            return
        wait_reclaimable(agent.sock, [f"/dev/shm/{leak}"])
        first = scans(agent)
        wait_for(lambda: scans(agent) >= first + 3, timeout=30, what="3 scans after the leak was reclaimable")
        assert on_host.exists(), f"a pod's shmkeeper.io/reclaim: {pod} auto-reclaimed on a {node} node"
        if node == "auto":
            return
        p = agent.cli("reclaim", "--yes", check=False)
        if node == "off":
            assert p.returncode != 0 and len(p.stderr.strip().splitlines()) == 1, p.stdout + p.stderr
            assert "leaks.reclaim is off on this node" in p.stderr
            assert on_host.exists(), "reclaim --yes removed a leak on an off node"
        else:  # control: the same request on a report node reclaims
            assert p.returncode == 0 and "reclaimed 1 segment(s)" in p.stdout, p.stdout + p.stderr
            assert not on_host.exists()
    finally:
        run(["runc", "--root", state, "delete", "-f", name], check=False)
        if agent:
            agent.stop()


def listeners(pid):
    """(address, port) of every listening TCP socket in the network namespace of `pid`."""
    out = set()
    for name in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{name}").read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            if state != "0A":
                continue
            addr, port = local.split(":")
            if len(addr) == 8:
                ip = ".".join(str(int(addr[i:i + 2], 16)) for i in (6, 4, 2, 0))
            else:
                ip = "::" if int(addr, 16) == 0 else ("::1" if addr == "00000000000000000000000001000000" else addr)
            out.add((ip, int(port, 16)))
    return out


@pytest.mark.parametrize("config", ["host-install", "built-in", "exposed"])
def test_the_default_host_config_serves_metrics_on_loopback_only(tmp_path, root_and_runc, config):
    """The host install's policy (deploy/config/config.yaml, as the quick start copies it) and a node without a
    policy file (the built-in defaults) listen for /metrics on 127.0.0.1:9731 only; the agent runs in a network
    namespace of its own, so port 9731 is this test's. Control: `metricsAddress: 0.0.0.0:9731`, set by choice,
    is seen listening on the wildcard address."""
    import yaml
    repo = Path(__file__).resolve().parents[2]
    doc = yaml.safe_load((repo / "deploy/config/config.yaml").read_text()) if config == "host-install" else {}
    agent = doc.setdefault("agent", {})
    if config == "exposed":
        agent["metricsAddress"] = "0.0.0.0:9731"
    agent.update({"socket": f"{tmp_path}/agent.sock", "stateDir": f"{tmp_path}/state", "eventSocket": "",
                  "runtimeRoots": [f"{tmp_path}/no-runtime-root"], "dockerSocket": "", "hostShmDirs": [],
                  "criSocket": "none"})
    doc.setdefault("log", {})["path"] = f"{tmp_path}/runtime.log"
    cfg = tmp_path / "agent.yaml"
    cfg.write_text(yaml.safe_dump(doc))
    log = tmp_path / "agent.log"
    proc = subprocess.Popen(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" --config "$1"',
                             str(AGENTD), str(cfg)], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        wait_for(lambda: '"msg":"serving"' in log.read_text() or proc.poll() is not None, timeout=30,
                 what="the agent serving")
        assert proc.poll() is None, log.read_text()
        on_9731 = {a for a in listeners(proc.pid) if a[1] == 9731}
        if config == "exposed":
            assert on_9731 == {("0.0.0.0", 9731)}, on_9731
        else:
            assert on_9731 == {("127.0.0.1", 9731)}, f"/metrics of the {config} policy listens on {on_9731}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
