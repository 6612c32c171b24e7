"""Where harness-gym keeps what it unpacks or builds once and reuses: one cache folder, and one way
to fill a folder of it so that concurrent processes never see (or delete) a half-built one."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

COMPLETE = ".complete"

# (add, discard) of a host folder in the crash-recovery registry, set by
# :mod:`harness_gym.sandboxes.isolation` (which sits above this module): every temporary folder a
# run makes is recorded there while it exists, so a kill -9 leaves a registry entry that the next
# start reclaims, never the folder
_TRACKER: list[Callable[[Path], None]] = [lambda path: None, lambda path: None]


def track_temporary_folders(add: Callable[[Path], None], discard: Callable[[Path], None]) -> None:
    """Have :func:`temporary_folder` and :func:`forget_folder` record folders with ``add``/``discard``."""
    _TRACKER[:] = [add, discard]


def temporary_folder(prefix: str, parent: str | Path | None = None) -> Path:
    """A fresh 0700 folder (like ``tempfile.mkdtemp``), recorded for crash recovery until
    :func:`forget_folder`. Recorded *before* it is made: a ``kill -9`` at any moment leaves a record
    (perhaps of a folder never made), never a folder without one (the 30-minute soak found 3 of
    29 kills landing between ``mkdtemp`` and the record)."""
    folder = Path(os.path.abspath(parent if parent is not None else tempfile.gettempdir()))  # as mkdtemp
    for _ in range(100):
        path = folder / f"{prefix}{secrets.token_hex(8)}"  # 64 random bits: another's name is never met
        _TRACKER[0](path)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            _TRACKER[1](path)
            continue
        except BaseException:
            _TRACKER[1](path)
            raise
        return path
    raise FileExistsError(f"no free name for a temporary folder {folder / prefix}*")


def record_folder(path: str | Path) -> None:
    """Record a folder made elsewhere (an episode's tmpfs) for crash recovery, like :func:`temporary_folder`."""
    _TRACKER[0](Path(path))


def forget_folder(path: str | Path) -> None:
    """``path`` is gone (removed or renamed into place): drop its crash-recovery record."""
    _TRACKER[1](Path(path))


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
    staging = temporary_folder(f".{folder.name}-", folder.parent)
    try:
        build(staging)
        (staging / COMPLETE).touch()
        if folder.exists() and not (folder / COMPLETE).exists():
            shutil.rmtree(folder, ignore_errors=True)  # left by a crash or an older version
        with contextlib.suppress(OSError):  # another process won the race; its folder is identical
            staging.rename(folder)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        forget_folder(staging)
    return folder
