"""Where harness-gym keeps what it unpacks or builds once and reuses: one cache folder."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The cache root: ``HARNESS_GYM_CACHE``, default ``~/.cache/harness-gym`` (suites, images, worlds)."""
    return Path(os.environ.get("HARNESS_GYM_CACHE", Path.home() / ".cache" / "harness-gym"))
