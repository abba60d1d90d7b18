"""What the engines stage's tests share: the build's binaries used inside the
sid root, the image name, and the static CLI run there."""
from harness import BUILD

STATIC_CLI = BUILD / "plugin" / "shmkeeper-static"
RUNTIME = BUILD / "plugin" / "shmkeeper-runtime"
HOOK = BUILD / "plugin" / "shmkeeper-hook"
IMAGE = "localhost/shmk-busybox:engines"
MiB = 1 << 20


def shmkeeper(ns, *args, check=True):
    """The static CLI (the Debian 12 one does not start on sid) inside the sid root."""
    return ns.run([STATIC_CLI, *args], check=check)
