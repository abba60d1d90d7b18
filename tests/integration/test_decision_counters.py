"""The runtime wrapper's decisions on the agent's /metrics (issue 36): a
private shmkeeperd whose policy names a private decision log (log.path), and
the real shmkeeper-runtime in front of the real runc on busybox bundles,
sharing that policy. After a refused container (an annotation that is no
size), a passthrough (a config.json that is not JSON: an internal error, the
spec handed to runc untouched) and an applied one (resized; the busybox image
has no glibc, so its preload is skipped), the agent's
shmkeeper_container_decisions_total{by,action} and
shmkeeper_preload_skipped_total say exactly that, and agree with the log's
lines; a rotation of the log between two scrapes loses no decision."""
import json
import subprocess

import pytest

from harness import AGENTD, RUNTIME, AgentProcess, oci_bundle, require, run, runc_dirs, wait_for
from reclaim_attack import metric_values

PROBE = "true"


@pytest.fixture
def env(tmp_path, rootfs, root_and_runc):
    require(AGENTD.exists() and RUNTIME.exists(), f"shmkeeperd and shmkeeper-runtime not built in {AGENTD.parent}")
    e = runc_dirs(tmp_path, "decisions.log")
    e.rootfs = rootfs
    base = tmp_path / "agent"
    base.mkdir()
    e.config.write_text(f"""
shm:
  default: 128Mi
  max: 1Gi
log:
  path: {e.log}
  level: info
  maxSize: 2Ki
  maxFiles: 2
agent:
  socket: {base}/agent.sock
  eventSocket: ""
  metricsAddress: "127.0.0.1:0"
  scanInterval: 1s
  runtimeRoots: [{base}/no-runtime-root]
  dockerSocket: ""
  hostShmDirs: []
""")
    e.agent = AgentProcess(base, e.config.read_text())
    # Started by hand, waiting on its "serving" line: this test needs no CLI.
    e.agent.proc = subprocess.Popen([str(AGENTD), "--config", str(e.config), "--state-dir", str(base / "state")],
                                    stdout=open(e.agent.log, "a"), stderr=subprocess.STDOUT, start_new_session=True)
    wait_for(lambda: '"msg":"serving"' in e.agent.log.read_text() or e.agent.proc.poll() is not None, timeout=30,
             what="the agent serving")
    assert e.agent.proc.poll() is None, e.agent.log.read_text()
    yield e
    e.agent.stop()
    run(["runc", "--root", e.state, "delete", "-f", "s9-applied"], check=False)


def wrapper_run(env, bundle, cid):
    return run([str(RUNTIME), "--config", env.config, "--root", env.state, "run",
                "--bundle", bundle, cid], check=False, timeout=60)


def counters(env):
    text = env.agent.metrics_text()
    d = metric_values(text, "shmkeeper_container_decisions_total")
    return ({k: v for k, v in d.items() if v}, metric_values(text, "shmkeeper_preload_skipped_total").get(""),
            metric_values(text, "shmkeeper_decision_log_readable").get(""))


def logged(env):
    lines = []
    for p in (env.log.with_name(env.log.name + ".1"), env.log):
        if p.exists():
            lines += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return lines


def test_refused_passthrough_and_applied_decisions_are_counted(env):
    assert counters(env)[0] == {}  # nothing before the first decision (the log does not exist yet)
    refused = oci_bundle(env.tmp / "refused", env.rootfs, [PROBE], annotations={"shmkeeper.io/shm-size": "lots"})
    p = wrapper_run(env, refused, "s9-refused")
    assert p.returncode != 0 and 'invalid size "lots"' in p.stderr, p.stderr
    broken = oci_bundle(env.tmp / "broken", env.rootfs, [PROBE])
    (broken / "config.json").write_text("{not json")
    p = wrapper_run(env, broken, "s9-passthrough")
    assert "passing the spec through untouched" in p.stderr, p.stderr  # runc then fails on it: not ours to judge
    applied = oci_bundle(env.tmp / "applied", env.rootfs, [PROBE])
    p = wrapper_run(env, applied, "s9-applied")
    assert p.returncode == 0, p.stderr
    lines = logged(env)
    # Positive control: the log holds exactly these decisions.
    assert [(r["by"], r["action"]) for r in lines] == [("runtime", "refuse"), ("runtime", "passthrough"),
                                                      ("runtime", "resize")], lines
    assert lines[-1]["preload"].startswith("skip"), lines[-1]
    decisions, skipped, readable = counters(env)
    assert decisions == {'{by="runtime",action="refuse"}': 1, '{by="runtime",action="passthrough"}': 1,
                         '{by="runtime",action="resize"}': 1}
    assert skipped == 1 and readable == 1
    # Rotation (log.maxSize 2Ki) between two scrapes loses nothing: more refusals until the log rotated.
    def inode():
        return env.log.stat().st_ino if env.log.exists() else None

    first, n = inode(), 0
    while inode() == first and n < 50:
        n += 1
        assert wrapper_run(env, refused, f"s9-refused-{n}").returncode != 0
    assert inode() != first, "the log never rotated"
    decisions, _, _ = counters(env)
    assert decisions['{by="runtime",action="refuse"}'] == 1 + n, decisions
