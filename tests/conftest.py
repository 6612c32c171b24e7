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
