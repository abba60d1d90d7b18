"""Reloading the policy: SIGHUP to a private shmkeeperd re-reads its config
file. A valid change (scanInterval) shows in `shmkeeper status` and the pid
stays; an invalid file keeps the running policy, logs exactly one line naming
file:line, sets shmkeeper_config_valid 0 and shows in status as "file on
disk: invalid"; a burst of SIGHUPs never kills the agent; a key read only at
start is named as needing a restart."""
import json
import os
import signal
import time

import pytest

from harness import AGENTD, AgentProcess, require, wait_for


def config_text(base, scan="1s", extra=""):
    return f"""agent:
  socket: {base}/agent.sock
  eventSocket: ""
  metricsAddress: "127.0.0.1:0"
  scanInterval: {scan}
  runtimeRoots: [{base}/no-runtime-root]
  dockerSocket: ""
{extra}"""


def log_lines(agent):
    return [json.loads(l) for l in agent.log.read_text().splitlines() if l.startswith("{")]


def scan_interval(agent):
    return agent.json("status")["node"]["policy"]["scanInterval"]


def status_rows(agent):
    return {l.split("  ")[0]: l.split("  ", 1)[1].strip() for l in agent.cli("status").stdout.splitlines() if "  " in l}


@pytest.fixture
def agent(tmp_path):
    require(AGENTD.exists(), f"shmkeeperd not built at {AGENTD}")
    a = AgentProcess(tmp_path, config_text(tmp_path)).start()
    yield a
    a.stop()


def hup(agent):
    os.kill(agent.proc.pid, signal.SIGHUP)


def test_valid_change_applies_and_pid_stays(agent, tmp_path):
    pid = agent.proc.pid
    assert scan_interval(agent) == "1s"
    assert status_rows(agent)["file on disk"] == "same as running"
    agent.config.write_text(config_text(tmp_path, scan="3s"))
    assert status_rows(agent)["file on disk"].startswith("changed, not loaded yet")
    hup(agent)
    wait_for(lambda: scan_interval(agent) == "3s", timeout=10, what="the new scanInterval in status")
    rows = status_rows(agent)
    assert rows["scan interval"] == "3000ms" and rows["file on disk"] == "same as running", rows
    assert any(l["msg"] == "config reloaded" for l in log_lines(agent))
    assert agent.metrics()["shmkeeper_config_valid"] == 1
    assert agent.proc.poll() is None and agent.proc.pid == pid


def test_invalid_file_keeps_the_policy_one_line_metric_zero(agent, tmp_path):
    pid = agent.proc.pid
    before = len(log_lines(agent))
    text = config_text(tmp_path) + "leaks:\n  grace: 30s\n  reclam: auto\n"  # a typo on line 11
    bad_line = text.splitlines().index("  reclam: auto") + 1
    agent.config.write_text(text)
    hup(agent)
    wait_for(lambda: agent.metrics()["shmkeeper_config_valid"] == 0, timeout=10, what="shmkeeper_config_valid 0")
    time.sleep(0.5)  # a second line, if any, would be written by now
    new = log_lines(agent)[before:]
    errors = [l for l in new if l["level"] == "error"]
    assert len(errors) == 1, new
    assert f"{agent.config}:{bad_line}:" in errors[0]["msg"] and "reclam" in errors[0]["msg"], errors
    assert scan_interval(agent) == "1s"  # the running policy is kept
    status = agent.json("status")["node"]["configFile"]
    assert status["reloadFailed"] is True and status["onDisk"] == "invalid"
    assert f"{agent.config}:{bad_line}:" in status["onDiskError"]
    rows = status_rows(agent)
    assert rows["file on disk"].startswith(f"invalid: {agent.config}:{bad_line}:"), rows
    assert "the last reload was refused" in rows["running policy"], rows
    # Fixed: the next SIGHUP loads it and the metric returns to 1.
    agent.config.write_text(config_text(tmp_path, scan="2s"))
    hup(agent)
    wait_for(lambda: scan_interval(agent) == "2s", timeout=10, what="the fixed file loaded")
    assert agent.metrics()["shmkeeper_config_valid"] == 1
    assert agent.proc.poll() is None and agent.proc.pid == pid


def test_a_burst_of_sighups_never_kills_the_agent(agent):
    pid = agent.proc.pid
    for _ in range(50):
        hup(agent)
    wait_for(lambda: sum(1 for l in log_lines(agent) if l["msg"] == "config reloaded") >= 1, timeout=10,
             what="a reload")
    time.sleep(0.5)
    assert agent.proc.poll() is None and agent.proc.pid == pid
    assert agent.cli("status", check=False).returncode == 0


def test_a_key_read_at_start_is_named_as_needing_a_restart(agent, tmp_path):
    agent.config.write_text(config_text(tmp_path).replace('metricsAddress: "127.0.0.1:0"', 'metricsAddress: ""'))
    hup(agent)
    line = wait_for(lambda: [l for l in log_lines(agent) if l.get("needs_restart")], timeout=10,
                    what="the restart warning")[0]
    assert line["level"] == "warning" and line["needs_restart"] == ["agent.metricsAddress"], line
    assert agent.metrics()["shmkeeper_config_valid"] == 1  # still served where it was
