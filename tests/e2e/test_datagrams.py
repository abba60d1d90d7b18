"""Issue 23: datagrams never trigger a node-wide scan. A private agent in scan
mode (every scan walks /proc and counts in shmkeeper_proc_walks_total) with a
long scanInterval and an empty watched tmpfs: creator records (for files
that exist and files that do not) and older preloads' unlink and memfd
notices leave the walk count alone; the hook's poststop (the positive
control) still asks for one."""
import json
import os
import socket
import time

import pytest

from harness import AGENTD, AgentProcess, HostTmpfs, require, wait_for

MiB = 1 << 20


@pytest.fixture
def agent(tmp_path):
    require(os.geteuid() == 0, "needs root (mounts a tmpfs)")
    require(AGENTD.exists(), f"shmkeeperd not built at {AGENTD}")
    shm = HostTmpfs(tmp_path / "shm", 4 * MiB)
    a = AgentProcess(tmp_path, f"""
agent:
  socket: {tmp_path}/agent.sock
  eventSocket: {tmp_path}/events/events.sock
  metricsAddress: "127.0.0.1:0"
  scanInterval: 10m
  observer: scan
  runtimeRoots: []
  dockerSocket: ""
  hostShmDirs: [{shm.path}]
""").start()
    a.shm = shm.path
    try:
        yield a
    finally:
        a.stop()
        shm.umount()


def walks(agent):
    return sum(v for k, v in agent.metrics().items() if k.startswith("shmkeeper_proc_walks_total"))


def send(agent, doc):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        s.sendto(json.dumps(doc).encode(), str(agent.base / "events" / "events.sock"))
    finally:
        s.close()


def test_records_and_old_notices_never_ask_for_a_scan(agent):
    held = open(agent.shm / "seg", "w")  # created before the baseline: its inotify-driven scan is over
    try:
        time.sleep(1.5)
        before = walks(agent)
        for i in range(20):
            send(agent, {"type": "create", "path": "/dev/shm/gone-%d" % i, "fd": 3})
            send(agent, {"type": "unlink", "path": "/dev/shm/gone-%d" % i})
            send(agent, {"type": "memfd", "path": "x"})
        # more than the loop's one-second gap between poked scans
        time.sleep(2.5)
        assert walks(agent) == before
        # Positive control: the hook's poststop is heard and asks for a scan.
        send(agent, {"type": "stopped", "id": "c0ffee"})
        wait_for(lambda: walks(agent) > before, timeout=10, what="a scan after poststop")
    finally:
        held.close()
