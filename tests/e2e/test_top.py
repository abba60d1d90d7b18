"""`shmkeeper top` in a real terminal: tmux (a private server on its own
socket) runs it against a private agent watching two host tmpfs directories
whose usage the test changes; the test reads the screen with capture-pane and
types with send-keys."""
import os
import re
import shutil
import subprocess

import pytest

from harness import AGENTD, CLI, AgentProcess, HostTmpfs, require, run, wait_for

MiB = 1 << 20


class Tmux:
    def __init__(self, sock):
        self.sock = sock

    def __call__(self, *args, check=True):
        return run(["tmux", "-S", self.sock, *args], check=check, timeout=30)

    def screen(self):
        return self("capture-pane", "-p", "-t", "top").stdout

    def row(self, name):
        """The screen line of the pod whose name ends in `name`, or None."""
        return next((l for l in self.screen().splitlines() if l.split(" ", 1)[0].endswith(name)), None)

    def wait(self, fn, what, timeout=15):
        try:
            return wait_for(fn, timeout=timeout, interval=0.2, what=what)
        except AssertionError as e:
            raise AssertionError(f"{e}\nscreen:\n{self.screen()}") from None


def start_top(tmux, agent, tmp_path):
    # tmux does not always record a dead pane's exit status: the shell writes it down.
    tmux.exit_file = tmp_path / "top.exit"
    tmux("-f", "/dev/null", "new-session", "-d", "-s", "top", "-x", "150", "-y", "30",
         f"{CLI} top --agent {agent.sock} --interval 0.5; echo $? > {tmux.exit_file}; sleep 600")


def exited(tmux, status):
    return tmux.exit_file.exists() and tmux.exit_file.read_text() == f"{status}\n"


@pytest.fixture
def setup(tmp_path):
    require(os.geteuid() == 0, "needs root (mounts a tmpfs)")
    require(shutil.which("tmux") is not None, "tmux is not installed")
    require(AGENTD.exists() and CLI.exists(), "shmkeeperd and shmkeeper not built")
    small, big = HostTmpfs(tmp_path / "small", 16 * MiB), HostTmpfs(tmp_path / "big", 64 * MiB)
    agent = tmux = None
    try:
        agent = AgentProcess.watching(tmp_path, [small.path, big.path]).start()
        tmux = Tmux(tmp_path / "tmux.sock")
        start_top(tmux, agent, tmp_path)
        yield tmux, small, big
    finally:
        if tmux:
            tmux("kill-server", check=False)
        if agent:
            agent.stop()
        small.umount()
        big.umount()


def percent(line):
    return int(re.search(r"\]\s+(\d+)%", line).group(1))


def test_top_follows_usage_sorts_and_quits(setup):
    tmux, small, big = setup
    s, b = "/small", "/big"
    tmux.wait(lambda: tmux.row(s) and tmux.row(b), "both pods on screen")
    assert "sort: use" in tmux.screen() and "SIZED BY" in tmux.screen()
    assert percent(tmux.row(s)) == 0 and "16MiB" in tmux.row(s) and "64MiB" in tmux.row(b)

    # small: 13 of 16 MiB (81%, crosses 80%: a Watch event); big: 16 of 64 MiB (25%). The view follows by itself.
    small.fill("data", 13 * MiB)
    big.fill("data", 16 * MiB)
    tmux.wait(lambda: percent(tmux.row(s)) == 81 and percent(tmux.row(b)) == 25, "the new usage")
    row = tmux.row(s)
    assert "[################....]" in row and "13MiB" in row  # 81% of a 20-character bar
    lines = tmux.screen().splitlines()
    assert lines.index(tmux.row(s)) < lines.index(tmux.row(b))  # sorted by use: 81% above 25%
    tmux.wait(lambda: re.search(rf"USAGE_HIGH\s+{re.escape(str(small.path))}\s+/dev/shm 80% full", tmux.screen()),
              "the agent's usage event under events:")

    tmux("send-keys", "-t", "top", "s")  # use -> used: 16 MiB above 13 MiB
    tmux.wait(lambda: "sort: used" in tmux.screen(), "sort: used")
    lines = tmux.screen().splitlines()
    assert lines.index(tmux.row(b)) < lines.index(tmux.row(s))

    small.remove("data")
    tmux.wait(lambda: percent(tmux.row(s)) == 0, "small back to 0%")

    tmux("send-keys", "-t", "top", "q")
    tmux.wait(lambda: exited(tmux, 0), "top to exit 0 on q")
    assert "sort:" not in tmux.screen()  # the alternate screen is gone: the shell's screen is back


def test_top_quits_on_ctrl_c(setup):
    tmux = setup[0]
    tmux.wait(lambda: tmux.row("/small"), "the view")
    tmux("send-keys", "-t", "top", "C-c")
    tmux.wait(lambda: exited(tmux, 0), "top to exit 0 on Ctrl-C")
    assert "sort:" not in tmux.screen()


def test_top_without_a_terminal_or_agent_says_so_in_one_line(tmp_path):
    require(CLI.exists(), "shmkeeper not built")
    p = subprocess.run([str(CLI), "top", "--agent", str(tmp_path / "none.sock")], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 2
    assert p.stderr == "shmkeeper: top needs a terminal on stdin and stdout (--once prints one frame)\n"
    p = run([CLI, "top", "--once", "--agent", tmp_path / "none.sock"], check=False)
    assert p.returncode == 1 and p.stderr.count("\n") == 1
    assert p.stderr.startswith("shmkeeper: cannot reach the agent at ")
    p = run([CLI, "top", "--once", "--sort", "fast", "--agent", tmp_path / "none.sock"], check=False)
    assert p.returncode == 2 and "--sort \"fast\"" in p.stderr
