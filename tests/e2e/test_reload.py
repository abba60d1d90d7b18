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


def test_every_key_read_only_at_start_is_named(tmp_path):
    """agent.observer and agent.stateDir (read once at start: the observer
    threads, the lock) are named; a policy key changed with them applies."""
    require(AGENTD.exists(), f"shmkeeperd not built at {AGENTD}")
    start = f"  stateDir: {tmp_path}/state\n  observer: fanotify\n"
    a = AgentProcess(tmp_path, config_text(tmp_path, extra=start)).start()
    try:
        a.config.write_text(config_text(tmp_path, scan="2s", extra=f"  stateDir: {tmp_path}/state2\n  observer: scan\n"))
        hup(a)
        line = wait_for(lambda: [l for l in log_lines(a) if l.get("needs_restart")], timeout=10,
                        what="the restart warning")[0]
        assert sorted(line["needs_restart"]) == ["agent.observer", "agent.stateDir"], line
        assert scan_interval(a) == "2s"  # applied (positive control: the reload ran)
        assert a.json("status")["node"]["policy"].get("observer", "fanotify") == "fanotify"  # still as it runs
    finally:
        a.stop()


def sighup_blocked(pid):
    """Whether SIGHUP is in the process's blocked set (/proc/<pid>/status SigBlk)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("SigBlk:"):
                    return int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)) != 0
    except FileNotFoundError:
        pass
    return False


def test_sighup_in_the_first_milliseconds_of_start_up(tmp_path):
    """SIGHUPs from the moment the process blocks them (the first thing main
    does, before flag parsing and the config file) until it serves: the agent
    comes up, keeps its pid, and reloads (the signals reached it)."""
    import subprocess
    require(AGENTD.exists(), f"shmkeeperd not built at {AGENTD}")
    a = AgentProcess(tmp_path, config_text(tmp_path))
    log = open(a.log, "a")
    t0 = time.monotonic()
    a.proc = subprocess.Popen([str(AGENTD), "--config", str(a.config), "--state-dir", str(tmp_path / "state")],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        pid = a.proc.pid
        while not sighup_blocked(pid):
            assert a.proc.poll() is None, "shmkeeperd exited before blocking SIGHUP:\n" + a.log.read_text()
        first = time.monotonic() - t0
        sent = 0
        deadline = time.time() + 20
        while not (a.sock.exists() and a.cli("status", check=False).returncode == 0):
            assert a.proc.poll() is None, f"shmkeeperd died after {sent} SIGHUPs:\n" + a.log.read_text()[-3000:]
            assert time.time() < deadline, "shmkeeperd did not come up"
            os.kill(pid, signal.SIGHUP)
            sent += 1
            time.sleep(0.001)
        print(f"first SIGHUP {first * 1000:.1f} ms after spawn; {sent} sent before it served")
        wait_for(lambda: any(l["msg"] == "SIGHUP: reloading the policy" for l in log_lines(a)), timeout=10,
                 what="a reload from the early SIGHUPs")
        assert a.proc.poll() is None and a.proc.pid == pid
        assert scan_interval(a) == "1s"
    finally:
        a.stop()


def test_sighup_while_start_up_reads_a_slow_config_file(tmp_path):
    """The config file is a FIFO: start-up blocks opening it (as on a slow or
    hung filesystem), SIGHUPs arrive then, and the agent still comes up with
    the file's policy once it is written, and reloads (the signals were kept
    pending, not lost). Before SIGHUP was blocked first thing in main, the
    default action killed it here."""
    import subprocess
    import threading
    require(AGENTD.exists(), f"shmkeeperd not built at {AGENTD}")
    a = AgentProcess(tmp_path, config_text(tmp_path))
    text = a.config.read_text()
    fifo = tmp_path / "agent.fifo.yaml"
    os.mkfifo(fifo)
    stop = threading.Event()

    def writer():  # serves every open of the file (start-up, reload, status's "file on disk")
        while not stop.is_set():
            try:
                with open(fifo, "w") as f:
                    if not stop.is_set():
                        f.write(text)
            except BrokenPipeError:  # the reader went away (the end of the test)
                pass
            time.sleep(0.3)  # the reader sees EOF before the next writer opens (else it reads the text twice)

    a.proc = subprocess.Popen([str(AGENTD), "--config", str(fifo), "--state-dir", str(tmp_path / "state")],
                              stdout=open(a.log, "a"), stderr=subprocess.STDOUT, start_new_session=True)
    t = threading.Thread(target=writer, daemon=True)
    try:
        pid = a.proc.pid
        # Blocked in open(2) of the FIFO (/proc/<pid>/syscall: openat is 257 on x86-64, 56 on arm64).
        wait_for(lambda: open(f"/proc/{pid}/syscall").read().split()[0] in ("257", "56"), timeout=10,
                 what="start-up blocked opening the config")
        for _ in range(3):
            os.kill(pid, signal.SIGHUP)
        time.sleep(0.3)
        assert a.proc.poll() is None, f"SIGHUP during start-up killed shmkeeperd (status {a.proc.returncode})"
        t.start()
        wait_for(lambda: a.sock.exists() and a.cli("status", check=False).returncode == 0, timeout=20,
                 what="shmkeeperd serving")
        wait_for(lambda: any(l["msg"] == "SIGHUP: reloading the policy" for l in log_lines(a)), timeout=10,
                 what="the pending SIGHUP handled as a reload")
        assert a.proc.poll() is None and a.proc.pid == pid
        start = next(l for l in log_lines(a) if l["msg"].startswith("starting shmkeeperd"))
        assert start["config"]["agent"]["scanInterval"] == "1000ms"  # started with the file's policy
    finally:
        a.stop()
        stop.set()
        if t.is_alive():
            os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # unblock the writer's open, if it waits
            t.join(timeout=5)
