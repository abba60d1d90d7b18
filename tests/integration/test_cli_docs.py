"""Man pages and shell completion (`shmkeeper man`, `shmkeeper completion`):
generated from the binaries' CLI11 definitions. Checked against what the
binaries themselves say in --help (CLI11's own formatter, not the generator),
rendered by man/groff, and sourced into a real bash and a real zsh (compinit,
zpty) that complete words."""
import re
import shutil
import subprocess

import pytest

from harness import BUILD, CLI, require

BINARIES = ["shmkeeper", "shmkeeperd", "shmkeeper-runtime", "shmkeeper-hook", "shmkeeper-doctor"]
# Each command here is short, but beside a CPU hog on the shared 2 cores `shmkeeper completion zsh` (ASan)
# and zsh's compinit each took over 30 s: a bound on a hang, not a speed check.
STEP_S = 120


def out(*argv):
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=STEP_S)
    assert p.returncode == 0, (argv, p.stdout, p.stderr)
    return p.stdout


def help_section(text, title):
    """Names in a CLI11 --help section ("Subcommands:", "Options:")."""
    names, inside = [], False
    for line in text.splitlines():
        if line.endswith(":") and not line.startswith(" "):
            inside = line == title + ":"
            continue
        m = re.match(r"  (\S+)", line)
        if inside and m:
            names.append(m.group(1))
    return names


def subcommand_paths(words=()):
    """Every subcommand path of the CLI, from --help at each level."""
    paths = []
    for sub in help_section(out(CLI, *words, "--help"), "Subcommands"):
        paths.append(words + (sub,))
        paths += subcommand_paths(words + (sub,))
    return paths


def long_options(binary, words=()):
    text = out(BUILD / "plugin" / binary, *words, "--help")
    return sorted({o for o in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text)})


@pytest.mark.parametrize("binary", BINARIES)
def test_man_page_renders_cleanly(binary, tmp_path):
    page = out(CLI, "man", binary)
    assert page.startswith(".\\\"") and ".TH " + binary.upper().replace("-", "\\-") + " 1" in page
    path = tmp_path / f"{binary}.1"
    path.write_text(page)
    g = subprocess.run(["groff", "-man", "-ww", "-z", str(path)], capture_output=True, text=True, timeout=STEP_S)
    assert g.returncode == 0 and g.stderr == "", g.stderr
    if shutil.which("man"):
        m = subprocess.run(["man", "--warnings", "-l", str(path)], capture_output=True, text=True, timeout=STEP_S,
                           env={"MANWIDTH": "100", "MANPAGER": "cat", "PATH": "/usr/bin:/bin"})
        assert m.returncode == 0 and m.stderr == "", m.stderr
        assert "NAME" in m.stdout and "OPTIONS" in m.stdout
    # The build generated the same page for installation.
    assert (BUILD / "plugin" / "doc" / "man1" / f"{binary}.1").read_text() == page


def test_every_subcommand_and_option_is_in_the_man_pages():
    page = out(CLI, "man")
    paths = subcommand_paths()
    assert ("install", "docker") in paths and ("man",) in paths  # positive control: --help was parsed
    for p in paths:
        assert f'.SS "shmkeeper {" ".join(p)}"' in page, p
        for opt in long_options("shmkeeper", p):
            assert "\\-\\-" + opt[2:].replace("-", "\\-") in page, (p, opt)
    for binary in ["shmkeeperd", "shmkeeper-hook", "shmkeeper-doctor"]:
        other = out(CLI, "man", binary)
        opts = long_options(binary)
        assert "--config" in opts or "--output" in opts
        for opt in opts:
            assert "\\-\\-" + opt[2:].replace("-", "\\-") in other, (binary, opt)


def complete(script, line):
    """What bash completes for `line` (words split on spaces; the last one is
    the word being completed) with the generated script sourced."""
    words = line.split(" ")
    fn = "_" + words[0].replace("-", "_")
    prog = (f"source {script}\n"
            f"complete -p {words[0]} >/dev/null || exit 3\n"
            f"COMP_WORDS=({' '.join(repr(w) for w in words)}); COMP_CWORD={len(words) - 1}\n"
            f"{fn}; printf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", prog], capture_output=True, text=True, timeout=STEP_S)
    assert p.returncode == 0, (line, p.stdout, p.stderr)
    return [w for w in p.stdout.splitlines() if w]


def test_bash_completion_completes_verbs_options_and_values(tmp_path):
    script = tmp_path / "shmkeeper.bash"
    script.write_text(out(CLI, "completion", "bash"))
    assert script.read_text() == (BUILD / "plugin" / "doc" / "bash-completion" / "shmkeeper").read_text()
    p = subprocess.run(["bash", "--norc", "-c", f"source {script}; complete -p"], capture_output=True, text=True)
    for binary in BINARIES:
        assert f" {binary}\n" in p.stdout + "\n", p.stdout
    assert complete(script, "shmkeeper re") == ["reclaim"]
    assert set(complete(script, "shmkeeper ")) >= {s[0] for s in subcommand_paths() if len(s) == 1}
    assert set(complete(script, "shmkeeper install ")) >= {"docker", "containerd", "crio", "podman"}
    assert "--dry-run" in complete(script, "shmkeeper install docker --")
    assert complete(script, "shmkeeper-doctor -o ") == ["table", "json"]
    assert set(complete(script, "shmkeeper-hook ")) >= {"createRuntime", "prestart", "poststop", "--config"}
    assert complete(script, "shmkeeperd --check") == ["--check-config"]
    assert "create" in complete(script, "shmkeeper-runtime cr")
    # An option's value is not taken for a subcommand: files are offered.
    (tmp_path / "daemon.json").write_text("{}")
    assert complete(script, f"shmkeeper install docker --config {tmp_path}/dae") == [f"{tmp_path}/daemon.json"]


ZSH_DRIVER = r"""
zmodload zsh/zpty
zpty z 'zsh -f -i'
zpty -w z "PS1='PR''OMPT> '; PATH=$1:\$PATH; fpath=($2 \$fpath); autoload -U compinit; compinit -u -d $2/.zcompdump; LISTMAX=1000"
zpty -r z chunk '*PROMPT> '
for line in "${@[3,-1]}"; do
  zpty -w -n z "$line"$'\t'
  zpty -w -n z $'\C-e\C-u'
  zpty -w z "print DO''NE"
  all=
  zpty -r z all '*DONE*PROMPT> '
  print -r -- "$all"
  print -r -- '=====shmkeeper-test====='
done
zpty -d z
"""


def zsh_complete(fn_dir, lines):
    """What a real interactive zsh (compinit, the completion system) shows
    after TAB for each line, the generated _shmkeeper in its fpath: the screen
    text without escape sequences, one string per line. Each line is typed
    once zle shows its prompt (keys typed before are echoed by the tty, not
    completed); zle handles keys in order, so the line is cleared and
    `print DONE` runs only after the completion has been shown: the driver
    reads up to that output and the next prompt (no sleep; the subprocess's
    timeout is the deadline)."""
    driver = fn_dir.parent / "driver.zsh"
    driver.write_text(ZSH_DRIVER)
    p = subprocess.run(["zsh", "-f", str(driver), str(BUILD / "plugin"), str(fn_dir), *lines], capture_output=True,
                       text=True, timeout=STEP_S)
    assert p.returncode == 0, p.stderr
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]|[\r\x07\x08]", "", p.stdout)
    screens = plain.split("=====shmkeeper-test=====")[:-1]
    assert len(screens) == len(lines), plain
    return screens


def test_zsh_completion_parses_and_completes(tmp_path):
    text = out(CLI, "completion", "zsh")
    assert text.startswith("#compdef " + " ".join(BINARIES))
    assert text == (BUILD / "plugin" / "doc" / "zsh" / "_shmkeeper").read_text()
    # A skip where zsh is missing, a failure where skips are forbidden (SHMKEEPER_NO_SKIP=1: CI).
    require(shutil.which("zsh") is not None, "zsh not installed (deploy/install-deps.sh test installs it): not checked")
    p = subprocess.run(["zsh", "-n", "-c", text], capture_output=True, text=True, timeout=STEP_S)
    assert p.returncode == 0, p.stderr
    fn = tmp_path / "functions"
    fn.mkdir()
    (fn / "_shmkeeper").write_text(text)
    # compinit registers the function for all five binaries from its #compdef line.
    p = subprocess.run(["zsh", "-f", "-c", f"fpath=({fn} $fpath); autoload -U compinit; compinit -u -d {fn}/.d; "
                        "for b in " + " ".join(BINARIES) + "; do print -r -- $b=$_comps[$b]; done"],
                       capture_output=True, text=True, timeout=STEP_S)
    assert p.stdout.split() == [f"{b}=_shmkeeper" for b in BINARIES], (p.stdout, p.stderr)
    install, rec, check, doctor, hook = zsh_complete(fn, ["shmkeeper install ", "shmkeeper recl", "shmkeeperd --check",
                                                          "shmkeeper-doctor -o ", "shmkeeper-hook "])
    for engine in ("docker", "containerd", "crio", "podman"):
        assert re.search(rf"^{engine}\s+-- ", install, re.M), install
    assert "uninstall" not in install  # positive control: the listing is install's, not the top level's
    assert "shmkeeper reclaim" in rec, rec  # a unique match is inserted
    assert "shmkeeperd --check-config" in check, check
    assert re.search(r"\btable\b", doctor) and re.search(r"\bjson\b", doctor), doctor
    assert "createRuntime" in hook and "poststop" in hook, hook


def test_bad_arguments_exit_2():
    for argv in (["man", "runc"], ["completion", "fish"], ["completion"]):
        p = subprocess.run([str(CLI), *argv], capture_output=True, text=True, timeout=STEP_S)
        assert p.returncode == 2 and p.stdout == "" and p.stderr.startswith("shmkeeper: "), (argv, p)
