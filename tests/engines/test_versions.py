"""docs/engines.md's tables of the sid (and trixie) engines name the versions the cached
root holds (its stamp, written by tests/engines/root.sh): a root built on a
later day with newer packages fails here until the table is checked again."""
import re
from pathlib import Path

import sidroot

DOC = Path(__file__).parents[2] / "docs" / "engines.md"
PACKAGES = {"dockerd (docker.io)": "docker.io", "docker-cli": "docker-cli", "containerd": "containerd",
            "podman": "podman", "crun": "crun", "runc": "runc",
            "docker-compose (compose v2, CLI plugin)": "docker-compose"}


TRIXIE_PACKAGES = {"dockerd (docker.io)": "docker.io", "docker-cli": "docker-cli", "containerd": "containerd",
                   "runc": "runc"}


def doc_versions(title="### Debian sid", packages=None):
    packages = packages or PACKAGES
    section = DOC.read_text().split(title, 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] in packages:
            rows[packages[cells[0]]] = cells[1]
    return rows


def upstream(version):
    """2.1.9+ds1-5 -> 2.1.9, 1.28-1 -> 1.28."""
    return re.split(r"[+~-]", version.split(":")[-1], maxsplit=1)[0]


def test_the_root_holds_the_versions_this_table_names(sid_root):
    held = {pkg: upstream(v) for pkg, v in sidroot.root_versions(sid_root).items()}
    assert doc_versions() == {pkg: held[pkg] for pkg in PACKAGES.values()}, (doc_versions(), held)


def test_the_trixie_root_holds_the_versions_its_table_names(trixie_root):
    held = {pkg: upstream(v) for pkg, v in sidroot.root_versions(trixie_root).items()}
    doc = doc_versions("### Debian trixie", TRIXIE_PACKAGES)
    assert doc == {pkg: held[pkg] for pkg in TRIXIE_PACKAGES.values()}, (doc, held)
