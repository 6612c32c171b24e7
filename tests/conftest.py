import os
import shutil

import pytest

import harness_gym  # noqa: F401  (registers the environments)

requires_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """HARNESS_GYM_SLOW=1 runs the slow checks too (same as `pytest -m slow` plus the rest)."""
    if os.environ.get("HARNESS_GYM_SLOW") == "1":
        for item in items:
            item.own_markers = [m for m in item.own_markers if m.name != "slow"]


@pytest.fixture(scope="session")
def docker_engine():
    """A Docker engine and a locally built image: the engine at DOCKER_HOST if it answers, else a
    private dockerd the fixture starts and stops. Skipped when neither is possible, or when
    HARNESS_GYM_DOCKER=0."""
    from harness_gym.sandboxes.base import SandboxError
    from harness_gym.sandboxes.docker_support import local_docker

    if os.environ.get("HARNESS_GYM_DOCKER") == "0":
        pytest.skip("Docker tests disabled by HARNESS_GYM_DOCKER=0")
    if shutil.which("docker") is None:
        pytest.skip("the docker client is not installed")
    try:
        import docker  # noqa: F401
    except ImportError:
        pytest.skip("the docker SDK is not installed (pip install 'harness-gym[docker]')")
    context = local_docker("harness-gym-test:latest")
    try:
        host, image = context.__enter__()
    except SandboxError as exc:
        pytest.skip(f"no Docker engine: {exc}")
    yield host, image
    context.__exit__(None, None, None)
