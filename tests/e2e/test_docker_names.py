"""Docker's names for the containers the agent finds in a runtime root before
Docker has finished starting them (issue 35: a failure is retried, never
remembered as a mode). A private dockerd (tests/conftest.py) gets a second
runtime, `slowstart`: runc, whose `start` waits 4 s, so the container's
runtime state is there (created) for 4 s while Docker is still starting it.
The agent (scanning every second) finds it then, asks Docker for its name,
and must show the name once Docker has it, not the id for the container's
life. Seen under load as an unnamed pod in /metrics (test_reclaim_trust)."""
import json
import signal
import threading

import pytest

from harness import wait_for
from reclaim_attack import agent_config, start_agent

IMG = "shmk-busybox:test"
NAME = "slow-named"


@pytest.fixture
def slowstart(docker_engine, tmp_path):
    """docker_engine with the `slowstart` runtime added (daemon.json + SIGHUP, as `shmkeeper install` does)."""
    script = tmp_path / "slowstart"
    script.write_text('#!/bin/sh\nfor a; do [ "$a" = start ] && sleep 4; done\nexec runc "$@"\n')
    script.chmod(0o755)
    cfg = json.loads(docker_engine.daemon_json.read_text())
    cfg.setdefault("runtimes", {})["slowstart"] = {"path": str(script)}
    docker_engine.daemon_json.write_text(json.dumps(cfg) + "\n")
    docker_engine.proc.send_signal(signal.SIGHUP)
    wait_for(lambda: "slowstart" in docker_engine.docker("info", "--format", "{{json .Runtimes}}").stdout,
             timeout=30, what="dockerd to load the slowstart runtime")
    yield docker_engine
    docker_engine.docker("rm", "-f", NAME, check=False)


def test_a_container_found_while_docker_starts_it_gets_its_name(slowstart, tmp_path):
    engine = slowstart
    root = engine.exec_root / "runtime-runc" / "moby"  # Docker 20.10 keeps every runtime's state there
    agent = start_agent(tmp_path / "agent", agent_config(tmp_path / "agent", [], runtime_roots=[root],
                                                        docker_socket=engine.sock))
    try:
        started = {}
        runner = threading.Thread(target=lambda: started.setdefault("p", engine.docker(
            "run", "-d", "--runtime", "slowstart", "--name", NAME, IMG, "sleep", "600", check=False)))
        runner.start()
        try:
            # The agent lists the container while `runc start` still waits (Docker has not called it running).
            cid = wait_for(lambda: engine.docker("ps", "-aq", "--no-trunc", "--filter", f"name={NAME}").stdout.strip(),
                           timeout=30, what="Docker to create the container")

            def listed():
                return [p for p in agent.json("pods")["pods"] if p.get("uid") == cid or p.get("name") == NAME]
            early = wait_for(listed, timeout=30, interval=0.1, what="the agent to list the container")
            assert runner.is_alive(), "the container started before the agent listed it: the race was not set up"
        finally:
            runner.join(timeout=60)
        assert started["p"].returncode == 0, started["p"].stderr
        print(f"listed while starting as {early[0].get('name')!r}")
        # Once Docker has it running, the agent shows its name (the old agent kept the id for the container's life).
        named = wait_for(lambda: [p for p in listed() if p.get("name") == NAME], timeout=20,
                         what=f"the pod named {NAME}")
        assert named[0]["uid"] == cid, named
    finally:
        agent.stop()
