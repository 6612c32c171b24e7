"""Where harness-gym keeps what it unpacks or builds once and reuses: one cache folder, and one way
to fill a folder of it so that concurrent processes never see (or delete) a half-built one."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

COMPLETE = ".complete"


def cache_dir() -> Path:
    """The cache root: ``HARNESS_GYM_CACHE``, default ``~/.cache/harness-gym`` (suites, images, worlds)."""
    return Path(os.environ.get("HARNESS_GYM_CACHE", Path.home() / ".cache" / "harness-gym"))


def build_once(folder: Path, build: Callable[[Path], None]) -> Path:
    """``folder``, built by ``build(staging)`` in a private staging folder and renamed into place
    whole, once: a later call (from any process) finds it complete and returns at once. Name the
    folder by a digest of everything it is built from, so changed inputs get a new folder."""
    if (folder / COMPLETE).exists():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=folder.parent))
    try:
        build(staging)
        (staging / COMPLETE).touch()
        if folder.exists() and not (folder / COMPLETE).exists():
            shutil.rmtree(folder, ignore_errors=True)  # left by a crash or an older version
        with contextlib.suppress(OSError):  # another process won the race; its folder is identical
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder
