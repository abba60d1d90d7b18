"""The agent's surfaces against hostile neighbours (issue #25), on a private
shmkeeperd watching a host tmpfs of this test's own:

- the slow-header attack: 40 connections to the metrics port, each sending a
  partial request and then one header byte a second, some from one address
  (the per-client cap refuses them) and some from 20 others (admitted, then cut
  at the header deadline); throughout, `shmkeeperd --probe` (the DaemonSet's
  liveness probe) passes and /metrics answers a well-behaved client; the
  refusals and timeouts are counted on /metrics;
- a file name and a pod name with newline, ESC/OSC/CSI sequences and bytes
  that are not UTF-8: every table verb prints one escaped row and nothing a
  terminal would interpret; -o json keeps the exact name; `promtool check
  metrics` accepts the scrape;
- a datagram flood from 64 senders on the event socket: rate-limited, and
  every datagram is accounted for (handled or counted as rate_limited);
- HTTPS with client certificates and a bearer token on the metrics port;
- compose labels with quotes, backslashes, newlines, ESC and BEL on a
  container of a private dockerd: `promtool check metrics` accepts the scrape."""
import json
import os
import shutil
import socket
import statistics
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest

from harness import AGENTD, CLI, AgentProcess, HostTmpfs, read_until, require, wait_for

MiB = 1 << 20
HEADER_TIMEOUT = 2  # seconds (agent.metrics.headerTimeout in this test)
PER_CLIENT = 8
# The file name: a forged row for another pod, then OSC (window title) and CSI (erase line); plus a byte
# that is not UTF-8.
HOSTILE_FILE = b"torch_99995_0\ncoredns  dev-shm-forged-row  1GiB  held\x1b]0;PWNED\x07\x1b[2K\xff"
HOSTILE_FILE_SHOWN = b"torch_99995_0\\ncoredns  dev-shm-forged-row  1GiB  held\\x1b]0;PWNED\\a\\x1b[2K\\xff"
HOSTILE_DIR = "shm-\x1b]0;PWNED\x07\nforged-pod"  # the host tmpfs directory: the pod's name
HOSTILE_DIR_SHOWN = b"shm-\\x1b]0;PWNED\\a\\nforged-pod"


def metrics_text(port, source="127.0.0.1", timeout=5):
    """GET /metrics from `source`: (status, text, seconds)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0)) as s:
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body.decode(), time.monotonic() - t0


def series(text):
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


@pytest.fixture(scope="module")
def agent(tmp_path_factory):
    require(os.geteuid() == 0, "needs root (mounts a tmpfs)")
    require(AGENTD.exists(), f"shmkeeperd not built at {AGENTD}")
    base = tmp_path_factory.mktemp("surfaces")
    shm = HostTmpfs(base / HOSTILE_DIR, 16 * MiB)
    a = AgentProcess(base, "agent:\n")
    a.config.write_text(f"""
agent:
  socket: {base}/agent.sock
  eventSocket: {base}/events/events.sock
  metricsAddress: "127.0.0.1:0"
  scanInterval: 1s
  runtimeRoots: [{base}/no-runtime-root]
  dockerSocket: ""
  hostShmDirs: [{json.dumps(str(shm.path))}]
  metrics:
    headerTimeout: {HEADER_TIMEOUT}s
    maxConnectionsPerClient: {PER_CLIENT}
leaks:
  grace: 1s
""")
    a.start()
    a.shm = shm
    try:
        yield a
    finally:
        a.stop()
        shm.umount()


def probe(agent):
    return subprocess.run([str(AGENTD), "--config", str(agent.config), "--probe"], capture_output=True, text=True,
                          timeout=30)


class SlowClients:
    """Connections that send a partial request and then one header byte a second, reconnecting whenever the
    agent closes one (as an attacker would); sources: (address, connections) pairs."""

    def __init__(self, port, sources):
        self.port, self.sources = port, sources
        self.stop = threading.Event()
        self.closed_by_agent = 0
        self.refused = 0
        self.thread = threading.Thread(target=self.run, daemon=True)

    def connect(self, source):
        s = socket.socket()
        s.bind((source, 0))
        s.settimeout(5)
        s.connect(("127.0.0.1", self.port))
        s.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\n")
        s.setblocking(False)
        return s

    def run(self):
        conns = [[src, None] for src, n in self.sources for _ in range(n)]
        while not self.stop.is_set():
            for c in conns:
                if c[1] is None:
                    try:
                        c[1] = self.connect(c[0])
                    except OSError:
                        continue
                try:
                    data = c[1].recv(4096)
                    if b" 503 " in data:
                        self.refused += 1
                    c[1].close()  # data or EOF: the agent answered (refused) or closed the connection
                    c[1] = None
                    self.closed_by_agent += 1
                    continue
                except BlockingIOError:
                    pass
                except OSError:
                    c[1].close()
                    c[1] = None
                    self.closed_by_agent += 1
                    continue
                try:
                    c[1].send(b"X")  # one more byte of a header line that never ends
                except OSError:
                    c[1].close()
                    c[1] = None
                    self.closed_by_agent += 1
            self.stop.wait(1.0)
        for c in conns:
            if c[1] is not None:
                c[1].close()

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=30)


def test_slow_header_attack_starves_neither_the_probe_nor_metrics(agent):
    port = agent.metrics_port()
    before = series(metrics_text(port)[1])
    # 20 connections from one neighbour (over the per-client cap of 8) and one each from 20 others.
    sources = [("127.0.0.2", 20)] + [(f"127.0.1.{i}", 1) for i in range(1, 21)]
    latencies, probes, open_seen = [], [], 0
    with SlowClients(port, sources) as attack:
        deadline = time.monotonic() + 3 * HEADER_TIMEOUT + 4
        while time.monotonic() < deadline:
            p = probe(agent)
            probes.append((p.returncode, p.stdout + p.stderr))
            status, text, seconds = metrics_text(port)
            assert status == 200, text
            latencies.append(seconds)
            open_seen = max(open_seen, series(text)["shmkeeper_http_connections_open"])
            time.sleep(0.3)
    after = series(metrics_text(port)[1])
    print(f"/metrics during the attack: {len(latencies)} scrapes, median {statistics.median(latencies) * 1000:.0f} ms,"
          f" max {max(latencies) * 1000:.0f} ms; {len(probes)} probes; open connections up to {open_seen:.0f};"
          f" the attacker saw {attack.closed_by_agent} closes, {attack.refused} refusals")
    # The attack reached its target: the agent held the admitted slow connections open.
    assert open_seen >= 20
    assert all(rc == 0 for rc, _ in probes), probes
    # The bar is 1 s; one scheduling hiccup on a loaded 2-core CI machine is tolerated, no more.
    assert statistics.median(latencies) < 1.0 and sorted(latencies)[-2] < 1.0, latencies
    refused = 'shmkeeper_http_connections_refused_total{reason="max_connections_per_client"}'
    timed_out = 'shmkeeper_http_connections_timed_out_total{phase="header"}'
    assert after[refused] - before[refused] >= 12  # at least the first 20 - 8 from 127.0.0.2
    assert after[timed_out] - before[timed_out] >= 20  # the admitted ones, cut at the header deadline
    assert attack.refused >= 12 and attack.closed_by_agent >= 32


def run_bytes(*args, timeout=60):
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, timeout=timeout)
    assert p.returncode in (0, 1), p.stderr
    return p.stdout


def assert_safe_table(out, marker, shown, what):
    """`out` has no byte a terminal interprets, is UTF-8, and shows `marker` in exactly one line, escaped."""
    assert b"\x1b" not in out and b"\x07" not in out and b"\r" not in out, (what, out)
    out.decode("utf-8")  # strict: nothing that is not UTF-8 reaches the terminal
    rows = [line for line in out.split(b"\n") if marker in line]
    assert len(rows) == 1, (what, out.decode())
    assert shown in rows[0], (what, rows[0])


def test_hostile_names_are_escaped_in_every_table_and_exact_in_json(agent):
    sock = agent.base / "agent.sock"
    shm = agent.shm.path
    watch = subprocess.Popen([str(CLI), "watch", "--agent", str(sock)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
    try:
        agent.wait_watching()
        with open(os.path.join(os.fsencode(shm), HOSTILE_FILE), "wb") as f:
            f.write(b"\xa5" * 4096)
        want_path = str(shm) + "/" + HOSTILE_FILE[:-1].decode() + "\\xff"  # the agent's JSON: bytes that are not UTF-8 as \xNN
        wait_for(lambda: any(l["path"] == want_path for l in json.loads(run_bytes(
            "leaks", "--agent", sock, "-o", "json")).get("leaks", [])), timeout=20, what="the hostile file as a leak")
        # The leak's event as watch prints it: the stream read with a deadline, not a second's sleep.
        seen = read_until(watch, lambda b: b"forged-pod" in b and b"\\x1b]0;PWNED" in b, timeout=60,
                          what="watch to print the hostile file's event")
    finally:
        watch.terminate()
        rest = watch.communicate(timeout=10)[0]
    watch_out = seen + rest
    # The gauge the wait above relies on goes back down when the client goes.
    wait_for(lambda: agent.metrics().get("shmkeeper_watch_streams") == 0, timeout=20, what="no watch stream")
    leaks = run_bytes("leaks", "--agent", sock)
    assert_safe_table(leaks, b"forged-row", HOSTILE_FILE_SHOWN, "leaks")
    assert_safe_table(leaks, b"forged-pod", HOSTILE_DIR_SHOWN, "leaks")
    assert_safe_table(run_bytes("reclaim", "--agent", sock), b"forged-row", HOSTILE_FILE_SHOWN, "reclaim")
    assert_safe_table(run_bytes("pods", "--agent", sock), b"forged-pod", HOSTILE_DIR_SHOWN, "pods")
    assert_safe_table(run_bytes("top", "--once", "--agent", sock), b"forged-pod", HOSTILE_DIR_SHOWN, "top")
    assert_safe_table(run_bytes("doctor", "--shm", shm), b"forged-row", HOSTILE_FILE_SHOWN, "doctor")
    assert b"\x1b" not in watch_out and b"\x07" not in watch_out, watch_out
    watch_out.decode("utf-8")
    assert b"forged-pod" in watch_out and b"\\x1b]0;PWNED" in watch_out, watch_out
    # -o json: protobuf's JSON, the exact name (control characters JSON-escaped, not shown escaped).
    raw = run_bytes("leaks", "--agent", sock, "-o", "json")
    assert b"\\n" in raw and b"\\u001b" in raw
    (leak,) = [l for l in json.loads(raw)["leaks"] if "forged-row" in l["path"]]
    assert leak["path"] == want_path and leak["pod"]["name"] == str(shm)
    # The pod's name, with its ESC, BEL and newline, is a valid Prometheus label value.
    if shutil.which("promtool"):
        status, text, _ = metrics_text(agent.metrics_port())
        assert status == 200 and "forged-pod" in text
        check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                               timeout=60)
        assert "error" not in (check.stdout + check.stderr).lower(), check.stdout + check.stderr


def test_a_datagram_flood_from_many_senders_is_rate_limited_and_counted(agent):
    events = str(agent.base / "events" / "events.sock")
    port = agent.metrics_port()
    before = series(metrics_text(port)[1])
    senders, per_sender, heavy = 63, 300, 5000
    pids = []
    for i in range(senders + 1):
        pid = os.fork()
        if pid == 0:  # a sender: blocking sends, so the kernel drops nothing; the agent accounts for every one
            try:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                for _ in range(heavy if i == 0 else per_sender):
                    s.sendto(b'{"type":"flood"}', events)
            finally:
                os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
    sent = heavy + senders * per_sender
    malformed = 'shmkeeper_event_datagrams_rejected_total{reason="malformed"}'
    limited = 'shmkeeper_event_datagrams_dropped_total{reason="rate_limited"}'

    def accounted():
        m = series(metrics_text(port)[1])
        return (m[malformed] - before[malformed]) + (m[limited] - before[limited]) == sent and m

    m = wait_for(accounted, timeout=30, what=f"all {sent} datagrams handled or counted")
    print(f"flood: {sent} datagrams from {senders + 1} senders; handled {m[malformed] - before[malformed]:.0f},"
          f" rate-limited {m[limited] - before[limited]:.0f}")
    assert m[limited] - before[limited] >= 1000  # the heavy sender alone is far over its bucket (1000 + 200/s)
    assert probe(agent).returncode == 0
    # Positive control: once the flood is over, a new sender is heard again.
    time.sleep(2)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.sendto(b'{"type":"flood"}', events)
    wait_for(lambda: series(metrics_text(port)[1])[malformed] == m[malformed] + 1, timeout=10,
             what="the next datagram handled")


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def test_https_with_client_certificates_and_a_bearer_token(tmp_path):
    """agent.metrics.certFile/keyFile/clientCAFile and bearerTokenFile: no client certificate, no TLS session; a
    certificate without the token, 401 for /metrics (counted) but /healthz answers; certificate and token, 200."""
    import ssl
    require(os.geteuid() == 0, "needs root (mounts a tmpfs)")
    require(shutil.which("openssl") is not None, "openssl is not installed")
    for name in ("ca", "other-ca"):
        openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
                "-days", "1", "-subj", f"/CN={name}", cwd=tmp_path)
    for name, ca in (("server", "ca"), ("client", "ca"), ("stranger", "other-ca")):
        openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj",
                f"/CN={name}", cwd=tmp_path)
        ext = tmp_path / f"{name}.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1\n")
        openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
                "-out", f"{name}.pem", "-days", "1", "-extfile", str(ext), cwd=tmp_path)
    (tmp_path / "token").write_text("s3cret-token\n")
    shm = HostTmpfs(tmp_path / "shm", 4 * MiB)
    a = AgentProcess(tmp_path, "agent:\n")
    a.config.write_text(f"""
agent:
  socket: {tmp_path}/agent.sock
  eventSocket: ""
  metricsAddress: "127.0.0.1:0"
  scanInterval: 1s
  runtimeRoots: [{tmp_path}/no-runtime-root]
  dockerSocket: ""
  hostShmDirs: [{shm.path}]
  metrics:
    certFile: {tmp_path}/server.pem
    keyFile: {tmp_path}/server.key
    clientCAFile: {tmp_path}/ca.pem
    bearerTokenFile: {tmp_path}/token
""")
    try:
        a.start()
        port = a.metrics_port()

        def get(path, cert=None, token=None):
            ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.pem"))
            if cert:
                ctx.load_cert_chain(str(tmp_path / f"{cert}.pem"), str(tmp_path / f"{cert}.key"))
            req = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
            if token:
                req.add_header("Authorization", f"Bearer {token}")
            try:
                with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
                    return r.status, r.read().decode()
            except urllib.error.HTTPError as e:
                return e.code, e.read().decode()

        for cert in (None, "stranger"):  # no certificate, or one another CA signed: no session
            with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
                get("/metrics", cert=cert, token="s3cret-token")
        assert get("/metrics", cert="client")[0] == 401
        assert get("/metrics", cert="client", token="wrong-token")[0] == 401
        assert get("/healthz", cert="client")[0] == 200
        status, text = get("/metrics", cert="client", token="s3cret-token")
        assert status == 200 and series(text)["shmkeeper_http_requests_unauthorized_total"] == 2
        assert probe(a).returncode == 0  # the liveness probe needs neither: it asks over the unix socket
    finally:
        a.stop()
        shm.umount()


def test_hostile_container_labels_are_valid_exposition_text(docker_engine, tmp_path):
    """Compose labels (the pod's namespace) with a quote, a backslash, a newline, ESC and BEL, on a container of a
    private dockerd: the scrape passes `promtool check metrics`, the label reads back exactly, `pods` shows it
    escaped on one row."""
    require(shutil.which("promtool") is not None, "promtool (prometheus) is not installed")
    project = 'evil"ns\\x\nforged-ns\x1b]0;PWNED\x07'
    name = "shmk-hostile-labels"
    docker_engine.docker("rm", "-f", name, check=False)
    docker_engine.docker("run", "-d", "--name", name, "--label", f"com.docker.compose.project={project}",
                         "--label", "com.docker.compose.service=svc\x1b[2K", "shmk-busybox:test", "sleep", "600")
    a = AgentProcess(tmp_path, f"""
agent:
  socket: {tmp_path}/agent.sock
  eventSocket: ""
  metricsAddress: "127.0.0.1:0"
  scanInterval: 1s
  runtimeRoots: [{docker_engine.exec_root}/runtime-runc/moby]
  dockerSocket: {docker_engine.sock}
""")
    try:
        a.start()
        port = a.metrics_port()
        text = wait_for(lambda: (t := metrics_text(port)[1]) and "forged-ns" in t and t, timeout=20,
                        what="the container's pod in /metrics")
        check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                               timeout=60)
        assert "error" not in (check.stdout + check.stderr).lower(), check.stdout + check.stderr
        line = next(l for l in text.splitlines() if l.startswith("shmkeeper_pod_shm_size_bytes{") and "forged-ns" in l)
        assert 'namespace="evil\\"ns\\\\x\\nforged-ns\x1b]0;PWNED\x07"' in line, line
        pods = run_bytes("pods", "--agent", tmp_path / "agent.sock")
        assert_safe_table(pods, b"forged-ns", b'evil"ns\\x\\nforged-ns\\x1b]0;PWNED\\a', "pods")
    finally:
        a.stop()
        docker_engine.docker("rm", "-f", name, check=False)
