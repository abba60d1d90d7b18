"""Which of this build's binaries start on Debian sid (issue 37, item 6): the
static ones (the CLI as shmkeeper-static, the runtime wrapper, the hook, the
doctor) do, which is why the stage runs them inside the sid root; the
Debian 12 CLI and agent stop at the loader (bookworm's sonames), as
docs/install.md says."""
import pytest

from engines_env import HOOK, RUNTIME, STATIC_CLI
from harness import AGENTD, BUILD, CLI


@pytest.mark.parametrize("binary,args,says", [
    (STATIC_CLI, ["--version"], "shmkeeper "),
    (RUNTIME, ["--version"], "runc version 1.3.6"),  # the wrapper's own line, then the real runc's
    (HOOK, ["--help"], "shmkeeper-hook"),
    (BUILD / "plugin" / "shmkeeper-doctor", ["--version"], "shmkeeper-doctor "),
], ids=["cli-static", "runtime", "hook", "doctor"])
def test_the_static_binaries_start_in_the_sid_root(ns, binary, args, says):
    p = ns.run([binary, *args], check=False)
    assert p.returncode == 0 and says in p.stdout, (p.returncode, p.stdout, p.stderr)


@pytest.mark.parametrize("binary", [CLI, AGENTD], ids=["cli", "agent"])
def test_the_debian_12_cli_and_agent_do_not(ns, binary):
    p = ns.run([binary, "--version"], check=False)
    assert p.returncode == 127 and "error while loading shared libraries" in p.stderr, (p.returncode, p.stderr)
