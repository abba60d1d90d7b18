"""The CLI's replies from the agent past gRPC's 4 MiB default: a real agent
watching a tmpfs of 20,000 leaked files (a `leaks` reply of ~5.8 MiB) and
the real CLI. Before the fix, `leaks` failed with "Received message larger
than max (5840000 vs. 4194304)"."""
import json

from harness import CLI, run, wait_for
from reclaim_attack import Tmpfs, agent_config, start_agent

FILES = 20_000


def test_leaks_of_20000_files_exceed_4_mib_and_are_listed(tmp_path, root_and_runc):
    fs = Tmpfs(tmp_path / "shm")
    agent = None
    try:
        names = [f"psm_left_behind_by_a_dataloader_worker_{i:06d}" for i in range(FILES)]
        for n in names:
            (fs.path / n).write_bytes(b"x")
        agent = start_agent(tmp_path / "agent", agent_config(tmp_path / "agent", [fs.path], grace="1h",
                                                                 max_files=2 * FILES))

        def listed():
            p = run([CLI, "leaks", "-o", "json", "--agent", agent.sock], check=False, timeout=120)
            assert p.returncode == 0, p.stderr  # one clear line, never a truncated list
            return len(p.stdout) > 4 << 20 and json.loads(p.stdout)

        doc = wait_for(listed, timeout=120, interval=1, what="a leaks reply over 4 MiB")
        assert sorted(l["path"].rsplit("/", 1)[1] for l in doc["leaks"]) == names
        table = run([CLI, "leaks", "--agent", agent.sock], timeout=120).stdout
        assert names[-1] in table
    finally:
        if agent:
            agent.stop()
        fs.stop()
