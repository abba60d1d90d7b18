"""Session fixtures of the deploy tests (see tests/lib/k8s_render.py)."""
import pytest

from k8s_render import install_k8s_models, k8s_tools


@pytest.fixture(scope="session")
def k8s_models():
    return install_k8s_models()


@pytest.fixture(scope="session")
def helm():
    return k8s_tools()["helm"]
