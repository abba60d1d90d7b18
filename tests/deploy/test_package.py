"""The Debian package CPack makes from the build (CMakeLists.txt, `cpack` in the build directory), as a user
of Debian 12 gets it: its control fields and files, and `apt install ./shmkeeper_*.deb` in a fresh Debian 12
minbase root (debootstrap, cached by tests/peer/debian_rootfs.sh): apt resolves every Depends from the
mirror, and every binary starts there. The bare root has none of the shared libraries the CLI and the agent
link (the control: without a correct Depends they would not start)."""
import re
import shutil
import subprocess

import pytest

from harness import BUILD, REPO, require, run

VERSION = re.search(r"project\(shmkeeper VERSION ([0-9.]+)", (REPO / "CMakeLists.txt").read_text()).group(1)
BINARIES = ["shmkeeper", "shmkeeperd", "shmkeeper-runtime", "shmkeeper-hook", "shmkeeper-doctor",
            "shmkeeper-node-label"]


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    require(shutil.which("cpack") is not None and shutil.which("dpkg-shlibdeps") is not None,
            "cpack (cmake) and dpkg-shlibdeps (dpkg-dev) are needed")
    require(all((BUILD / "plugin" / b).exists() for b in BINARIES), f"the binaries are not all built in {BUILD}")
    out = tmp_path_factory.mktemp("deb")
    run(["cpack", "--config", BUILD / "CPackConfig.cmake", "-B", out], timeout=900, cwd=BUILD)
    [deb] = out.glob("shmkeeper_*.deb")
    return deb


def test_the_package_names_its_files_and_the_libraries_they_need(deb):
    assert deb.name == f"shmkeeper_{VERSION}_amd64.deb"
    info = run(["dpkg-deb", "-f", deb]).stdout
    fields = dict(line.split(": ", 1) for line in info.splitlines() if ": " in line and not line.startswith(" "))
    assert fields["Package"] == "shmkeeper" and fields["Version"] == VERSION and fields["Architecture"] == "amd64"
    depends = {d.split()[0] for d in fields["Depends"].split(", ")}
    # dpkg-shlibdeps names the packages of the build host's shared libraries (Debian 12: gRPC 1.51, protobuf 32,
    # abseil 20220623, cpp-httplib 0.11).
    assert {"libc6", "libstdc++6", "libgcc-s1"} <= depends, depends
    for lib in ["libgrpc++", "libprotobuf", "libabsl", "libcpp-httplib"]:
        assert any(d.startswith(lib) for d in depends), (lib, depends)
    files = run(["dpkg-deb", "-c", deb]).stdout
    for b in BINARIES:
        assert re.search(rf" \./usr/bin/{re.escape(b)}$", files, re.M), b
    assert "./usr/lib/shmkeeper/libshmkeeper-preload.so" in files
    assert "./usr/share/man/man1/shmkeeper.1" in files
    assert "./usr/local/" not in files and "/tests/" not in files


@pytest.fixture(scope="module")
def bookworm_root(tmp_path_factory):
    require(shutil.which("debootstrap") is not None, "debootstrap is not installed")
    built = subprocess.run([REPO / "tests" / "peer" / "debian_rootfs.sh", "apt"], capture_output=True, text=True,
                           timeout=1200)
    require(built.returncode == 0, "no Debian rootfs (debootstrap needs the Debian mirror): " + built.stderr[-500:])
    root = tmp_path_factory.mktemp("bookworm")
    run(["tar", "-C", root, "--numeric-owner", "-xf", built.stdout.strip().splitlines()[-1]])
    shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
    return root


def in_root(root, script, timeout=900):
    """`script` (sh) chrooted into `root`, in a mount namespace of its own with /proc and /dev."""
    setup = f"mount -t proc proc {root}/proc && mount --rbind /dev {root}/dev && exec chroot {root} sh -ec \"$0\""
    return run(["unshare", "--mount", "--propagation", "private", "--fork", "sh", "-ec", setup, script],
               check=False, timeout=timeout)


def test_apt_installs_it_on_a_fresh_debian_12_and_every_binary_starts(deb, bookworm_root):
    root = bookworm_root
    assert not list((root / "usr" / "lib" / "x86_64-linux-gnu").glob("libgrpc++.so.*"))  # the control
    shutil.copy(deb, root / "tmp" / deb.name)
    p = in_root(root, "apt-get -qq -o Acquire::Check-Valid-Until=false update && "
                      f"DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /tmp/{deb.name}")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    checks = ["shmkeeper version", "shmkeeperd --help", "shmkeeper-hook --help", "shmkeeper-doctor --help",
              "shmkeeper-node-label --help"]
    for c in checks:
        p = in_root(root, c + " >/dev/null", timeout=60)
        assert p.returncode == 0, (c, p.stdout[-2000:], p.stderr[-2000:])
    # The wrapper prints its own line, then execs the real runtime (none in this root: Recommends, not Depends).
    p = in_root(root, "shmkeeper-runtime --version || true", timeout=60)
    assert p.stdout.startswith(f"shmkeeper-runtime {VERSION} "), (p.stdout, p.stderr)
    assert (root / "usr" / "lib" / "shmkeeper" / "libshmkeeper-preload.so").exists()
    p = in_root(root, "dpkg -s shmkeeper | grep '^Status:'")
    assert p.stdout.strip() == "Status: install ok installed", p.stdout
