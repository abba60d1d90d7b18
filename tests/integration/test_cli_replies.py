"""The CLI's replies from the agent past gRPC's 4 MiB default: a real agent
watching a tmpfs of 20,000 leaked files (a `leaks` reply of ~5.8 MiB) and
the real CLI. Before the fix, `leaks` failed with "Received message larger
than max (5840000 vs. 4194304)"."""
import json

from harness import BULK_S, CLI, run, wait_for
from reclaim_attack import Tmpfs, agent_config, start_agent

FILES = 20_000
# Each step on the 20,000 files (the agent's start-up scan, after which it serves; one `leaks -o json`, 13.6 MB
# of JSON: measured 24 s of CPU for the sanitized CLI, 2.7 s for the release one; one `leaks` table) has
# harness.BULK_S: a bound on a hang, not a speed check.
STEP_S = BULK_S


def test_leaks_of_20000_files_exceed_4_mib_and_are_listed(tmp_path, root_and_runc):
    fs = Tmpfs(tmp_path / "shm")
    agent = None
    try:
        names = [f"psm_left_behind_by_a_dataloader_worker_{i:06d}" for i in range(FILES)]
        for n in names:
            (fs.path / n).write_bytes(b"x")
        # The start-up scan lists every file before the agent serves, and nothing changes after it: no
        # periodic scan is needed (at 1 s, each one re-lists 20,000 files: ~0.3 of a core for the sanitized
        # agent, taken from the CLI whose reply is under test).
        agent = start_agent(tmp_path / "agent", agent_config(tmp_path / "agent", [fs.path], grace="1h",
                                                                 max_files=2 * FILES, scan="600s"), timeout=STEP_S)

        def listed():
            p = run([CLI, "leaks", "-o", "json", "--agent", agent.sock], check=False, timeout=STEP_S)
            assert p.returncode == 0, p.stderr  # one clear line, never a truncated list
            return len(p.stdout) > 4 << 20 and json.loads(p.stdout)

        doc = wait_for(listed, timeout=STEP_S, interval=1, what="a leaks reply over 4 MiB")
        assert sorted(l["path"].rsplit("/", 1)[1] for l in doc["leaks"]) == names
        table = run([CLI, "leaks", "--agent", agent.sock], timeout=STEP_S).stdout
        assert names[-1] in table
    finally:
        if agent:
            agent.stop()
        fs.stop()
