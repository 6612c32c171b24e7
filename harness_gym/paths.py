"""Where harness-gym keeps what it unpacks or builds once and reuses: one cache folder, and one way
to fill a folder of it so that concurrent processes never see (or delete) a half-built one."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

COMPLETE = ".complete"
MANIFEST = ".manifest.json"  # what build_verified checks: every file's size and sha256

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


def build_verified(folder: Path, build: Callable[[Path], None]) -> Path:
    """:func:`build_once`, for a folder whose files a later reader cannot check itself (a converted
    model, whose damaged weights would load as a silently different model): the build records every
    file's size and sha256, and each call checks them. A damaged entry (a file truncated, altered,
    removed or added after it was complete) is moved aside and built again; one still damaged after
    its rebuild raises."""

    def build_with_manifest(staging: Path) -> None:
        build(staging)
        (staging / MANIFEST).write_text(json.dumps(_file_digests(staging), indent=1, sort_keys=True), "utf-8")

    for attempt in range(2):
        build_once(folder, build_with_manifest)
        checked = _inode(folder)
        problem = manifest_problem(folder)
        if problem is None:
            return folder
        if attempt == 0:
            _discard(folder, checked)
    raise RuntimeError(f"{folder} is damaged right after it was built ({problem}); is its disk failing?")


def manifest_problem(folder: Path) -> str | None:
    """Why ``folder`` does not match the manifest :func:`build_verified` wrote, or None when it does."""
    try:
        recorded = json.loads((folder / MANIFEST).read_text("utf-8"))
    except (OSError, ValueError) as exc:
        return f"no readable manifest: {exc}"
    try:
        found = _file_digests(folder)
    except OSError as exc:  # a file vanished while it was read (another process discarding it)
        return f"unreadable: {exc}"
    if found == recorded:
        return None
    changed = sorted(name for name in recorded.keys() | found.keys() if recorded.get(name) != found.get(name))
    return f"files that differ from the manifest: {', '.join(changed)}"


def _file_digests(folder: Path) -> dict[str, list[int | str]]:
    """[size, sha256] of every file under ``folder`` (the markers aside), by relative path."""
    digests: dict[str, list[int | str]] = {}
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(parent) / name
            relative = path.relative_to(folder).as_posix()
            if relative not in (COMPLETE, MANIFEST):
                digests[relative] = [path.stat().st_size, file_sha256(path)]
    return digests


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in blocks (model weights are hundreds of MiB)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _inode(folder: Path) -> int | None:
    with contextlib.suppress(OSError):
        return folder.stat().st_ino
    return None


def _discard(folder: Path, checked: int | None) -> None:
    """Move ``folder`` aside under a fresh name (recorded for crash recovery) and delete it: readers
    never meet a half-deleted entry, and a concurrent builder finds the name free. Only the folder
    that was checked (by inode): one another process has rebuilt meanwhile stays."""
    aside = folder.parent / f".{folder.name}-damaged-{secrets.token_hex(8)}"
    record_folder(aside)
    try:
        if checked is not None and _inode(folder) == checked:
            with contextlib.suppress(OSError):  # moved aside by another process first
                folder.rename(aside)
        shutil.rmtree(aside, ignore_errors=True)
    finally:
        forget_folder(aside)


def remove_path(path: Path) -> None:
    """Delete a file, a symbolic link or a whole folder; nothing when it is not there."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def make_writable(folder: Path) -> None:
    """Give the owner write access to ``folder`` and every folder under it (read-only trees, such
    as worlds and CLI installs, cannot be deleted or rebuilt otherwise); links are left alone."""
    for path in _folders(folder):
        with contextlib.suppress(OSError):
            if not path.is_symlink():
                path.chmod(path.stat().st_mode | 0o700)


def _folders(folder: Path) -> Iterator[Path]:
    if not folder.exists():
        return
    yield folder
    for parent, dirs, _files in os.walk(folder):
        for name in dirs:
            yield Path(parent) / name


def size_mb(folder: Path) -> float:
    """The bytes of the files under ``folder`` (links counted as themselves), in MiB to 0.1."""
    total = 0
    for parent, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(parent, name)).st_size
    return round(total / (1 << 20), 1)
