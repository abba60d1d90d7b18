"""Fixtures of the integration tests that share them."""
import pytest

from harness import require
from reclaim_attack import HOLDERS, Tmpfs


@pytest.fixture
def shm(tmp_path, root_and_runc):
    """A private tmpfs (512 MiB) at tmp_path/shm, unmounted afterwards."""
    require(HOLDERS.exists(), f"holders not built at {HOLDERS}")
    fs = Tmpfs(tmp_path / "shm")
    yield fs.path
    fs.stop()
