"""The agent (the Debian 12 shmkeeperd, run in the engines' pid namespace with
a /proc of it: what a node agent on that host sees) listing the containers of
all three sid engines at once, Docker 28, podman 5 + crun 1.28 and a
containerd 2.1 CRI pod, with their size, usage and memory-cgroup shmem."""
import subprocess

import pytest

import sidroot
from engines_env import IMAGE, MiB, Pod
from harness import AGENTD, AgentProcess, wait_for

WRITE = "dd if=/dev/zero of=/dev/shm/{name} bs=1M count={mib} 2>/dev/null && exec sleep 600"


class NsAgent(AgentProcess):
    """AgentProcess started through SidNamespace.popen_host."""

    def __init__(self, ns, base, config_text):
        base.mkdir(parents=True, exist_ok=True)
        super().__init__(base, config_text)
        self.ns = ns

    def start(self, *args):
        self.proc = self.ns.popen_host([AGENTD, "--config", self.config, "--state-dir", self.base / "state", *args],
                                       self.log)
        sidroot.wait_up(self.proc, self.log, "shmkeeperd", 20,
                        lambda: self.sock.exists() and self.cli("status", check=False).returncode == 0)
        return self

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(15)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture
def workloads(ns, dockerd, podman, containerd):
    dockerd.docker("run", "-d", "--name", "sk-docker", "--network", "none", "-m", "512m", IMAGE,
                   "sh", "-c", WRITE.format(name="d", mib=30))
    podman.podman("--runtime", "crun", "run", "-d", "--name", "sk-podman", IMAGE,
                  "sh", "-c", WRITE.format(name="p", mib=20))
    pod = Pod(containerd, "sk-cri", annotations={"shmkeeper.io/shm-size": "1Gi"})
    pod.run()
    pod.container("w", "sh", "-c", WRITE.format(name="c", mib=10))
    try:
        yield pod
    finally:
        pod.remove()
        podman.podman("rm", "-f", "-t", "0", "sk-podman", check=False)
        dockerd.docker("rm", "-f", "sk-docker", check=False)


def test_the_agent_lists_all_three_engines_with_size_usage_and_memcg(ns, dockerd, podman, containerd, workloads):
    roots = [dockerd.exec_root / "runtime-shmkeeper" / "moby", dockerd.exec_root / "runtime-runc" / "moby",
             containerd.runc_root / "k8s.io", ns.run_dir / "crun", ns.run_dir / "runc"]
    base = ns.base / "agent"
    agent = NsAgent(ns, base, f"""
agent:
  socket: {base}/agent.sock
  eventSocket: ""
  metricsAddress: ""
  scanInterval: 1s
  runtimeRoots: [{", ".join(str(r) for r in roots if r.is_dir())}]
  dockerSocket: {dockerd.sock}
  criSocket: {containerd.sock}
""").start()
    want = {"sk-docker": (512 * MiB, 30 * MiB), "sk-podman": (256 * MiB, 20 * MiB), "sk-cri": (1 << 30, 10 * MiB)}

    def listing():
        rows = {p.get("name"): p for p in agent.json("pods").get("pods", [])}
        done = all(n in rows and int(rows[n]["shm"].get("usedBytes", 0)) >= used
                   and int(rows[n]["shm"].get("memcgShmemBytes", 0)) >= used for n, (_, used) in want.items())
        return rows if done else None
    try:
        rows = wait_for(listing, timeout=30, interval=0.5, what="the three engines' containers with usage and memcg")
        for name, (size, used) in want.items():
            shm = rows[name]["shm"]
            assert int(shm["sizeBytes"]) == size, (name, shm)
            assert abs(int(shm["usedBytes"]) - used) <= MiB, (name, shm)
            assert used <= int(shm["memcgShmemBytes"]) <= used + 4 * MiB, (name, shm)
        assert rows["sk-docker"]["kind"] == "POD_KIND_CONTAINER"
        assert rows["sk-cri"]["namespace"] == "default"
        table = agent.cli("pods").stdout
        assert all(n in table for n in want), table
        assert "holds no container state" not in agent.log.read_text(), agent.log.read_text()[-2000:]
    finally:
        agent.stop()
