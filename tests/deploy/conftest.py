"""Session fixtures of the deploy tests (see tests/lib/k8s_render.py)."""
import pytest

from k8s_render import build_helmrender, install_k8s_models


@pytest.fixture(scope="session")
def k8s_models():
    return install_k8s_models()


@pytest.fixture(scope="session")
def helmrender():
    return build_helmrender()
