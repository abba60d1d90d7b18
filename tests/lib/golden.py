"""Golden JSON documents for the CLIs' `-o json`: the output, normalised so
that it is the same on every run and machine, compared byte for byte with a
file under a test directory's golden/ (tests/e2e/golden/README.md says what is
normalised and how to regenerate: SHMKEEPER_UPDATE_GOLDEN=1)."""
import difflib
import json
import os
from pathlib import Path

UPDATE = os.environ.get("SHMKEEPER_UPDATE_GOLDEN") == "1"
# Keys whose values depend on the clock, the host or the run: replaced by
# "<type>" (the type is kept and checked).
VOLATILE = {"pid", "time", "lastScanTime", "loadedTime", "lastScanDuration", "scans", "age", "unheldFor", "hostname",
            "hostShmSizeBytes", "hostShmUsedBytes", "shmMaxBytes", "agentVersion", "creatorPid", "lastHolderPid"}


def type_name(v):
    return {bool: "bool", int: "int", float: "float", str: "string", type(None): "null"}.get(type(v), "?")


def shape(v):
    """Keys and types; a list is "<list>" (how many, and whether any, depends on the host)."""
    if isinstance(v, dict):
        return {k: shape(x) for k, x in v.items()}
    if isinstance(v, list):
        return "<list>"
    return f"<{type_name(v)}>"


def normalise(v, base, host_keys=frozenset()):
    """The document with volatile values replaced by their type, the values of
    `host_keys` (a description of the machine) by their shape, and the test's
    temporary directory `base` by <base>; everything else as printed."""
    if isinstance(v, dict):
        out = {}
        for k, x in v.items():
            if k in host_keys:
                out[k] = shape(x)
            elif k in VOLATILE and not isinstance(x, (dict, list)):
                out[k] = f"<{type_name(x)}>"
            else:
                out[k] = normalise(x, base, host_keys)
        return out
    if isinstance(v, list):
        return [normalise(x, base, host_keys) for x in v]
    if isinstance(v, str) and base:
        return v.replace(str(base), "<base>")
    return v


def check_golden(golden_dir: Path, name, doc, base=None, host_keys=frozenset()):
    """Compares the normalised document with golden_dir/<name>.json; a
    difference fails with a unified diff (golden vs. now).
    SHMKEEPER_UPDATE_GOLDEN=1 rewrites the file instead."""
    text = json.dumps(normalise(doc, base, host_keys), indent=2) + "\n"
    path = golden_dir / f"{name}.json"
    if UPDATE:
        golden_dir.mkdir(exist_ok=True)
        path.write_text(text)
        return
    how = "tests/e2e/golden/README.md"
    assert path.exists(), f"no golden file {path}: run with SHMKEEPER_UPDATE_GOLDEN=1 (see {how})"
    want = path.read_text()
    if text != want:
        diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), f"golden/{name}.json",
                                            "shmkeeper output (normalised)"))
        raise AssertionError(f"`-o json` differs from {path} (a key renamed, removed, retyped or reordered, or a "
                             f"value changed; if intended, regenerate and review: {how}):\n{diff}")
