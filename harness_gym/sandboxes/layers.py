"""Copy-on-write workspaces: the task's files shared read-only, only the agent's changes per episode.

A task's starting workspace is copied once per host into a *layer* (a root-owned folder on disk,
named by a signature of its sources, shared by every process and environment). An episode's
workspace is an overlay mount: the layer below, read-only, and an upper folder on the episode's
size-limited tmpfs above, so reset costs a few mounts whatever the workspace's size, RAM grows only
with what the agent writes, and the tmpfs size limit stays a limit on what the agent writes.
Graders mount the overlay itself, so they see exactly the agent's final view.

The sandbox runs as a dedicated host uid (see :mod:`.isolation`), which must own its workspace. The
layer is therefore shown through an *idmapped* mount that presents its root-owned files as owned by
that uid (kernel >= 5.19, root only); where any of this is unavailable the caller copies instead.

Layout of an episode folder ``D`` (a plain folder): ``D/scratch`` (the size-limited tmpfs, with
``upper`` and ``work``), ``D/<layer name>`` (the idmapped layer) and ``D/merged`` (the overlay, the
workspace). Once the overlay is mounted, the tmpfs and the idmapped layer are detached from the host's
tree (the overlay holds private clones of both), so a live episode is one host mount, not three:
every sandbox start copies the host's whole mount table into its new mount namespace and detaches it
again, about 40 us of CPU per host mount per start (measured, loaded 2-core host), so at 1,024
concurrent episodes the two extra mounts each cost ~80 ms per start. The idmapped layer's folder
keeps the layer's name, so the overlay's ``lowerdir`` in mountinfo still names the layer in use.
:func:`release` detaches whatever is still mounted in ``D`` and removes it.

The cache is bounded (:func:`reclaim_layers`, run through :func:`.isolation.reclaim_layer_cache` at
the first start of every process and by ``harness-gym doctor --clean``): each layer has a sidecar
``<layer>.meta.json`` with its sources,
its size and, as the file's mtime, its last use. A layer is removed when its sources are gone, when
it was unused for ``HARNESS_GYM_LAYER_MAX_AGE_H`` hours, or, least recently used first, while the
cache is above ``HARNESS_GYM_LAYER_CACHE_MB``; never while an episode uses it (it is mounted here,
or a live process's registry lists it) nor in the minute after its last use.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness_gym.paths import forget_folder, record_folder, temporary_folder

LAYER_PREFIX = "harness-gym-layer-"
MERGED = "merged"
SCRATCH = "scratch"  # the episode's size-limited tmpfs (upper and work), detached once the overlay is up
META_SUFFIX = ".meta.json"
CACHE_MB_VARIABLE = "HARNESS_GYM_LAYER_CACHE_MB"  # the cache's size cap (LRU beyond it)
MAX_AGE_VARIABLE = "HARNESS_GYM_LAYER_MAX_AGE_H"  # hours unused before a layer is removed
DEFAULT_CACHE_MB = 20_480
DEFAULT_MAX_AGE_H = 24.0
GRACE_S = 60.0  # a layer used this recently is never removed (it may be about to be mounted)
_TRANSIENT = ("staging-", "probe-")  # half-made layers of a killed process, removed after an hour

_CLONE_NEWUSER = 0x10000000
_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442
_OPEN_TREE_CLONE, _OPEN_TREE_CLOEXEC = 1, 0o2000000
_AT_FDCWD, _AT_EMPTY_PATH, _AT_RECURSIVE = -100, 0x1000, 0x8000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_IDMAP = 0x1, 0x00100000
_MNT_DETACH = 0x2


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> int:
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")
    return result


def _mount(source: str, target: str, kind: str, options: str) -> None:
    _check(_libc().mount(source.encode(), target.encode(), kind.encode(), 0, options.encode()), f"mount {kind}")


def _detach(path: str) -> None:
    _libc().umount2(path.encode(), _MNT_DETACH)


# ----------------------------------------------------------------------------- layers


def signature(sources: Sequence[Path]) -> str:
    """Names a layer by its sources' paths, sizes and modification times (cheap; no file is read)."""
    digest = hashlib.sha256()
    for source in sources:
        digest.update(f"\0{Path(source).resolve()}\0".encode())
        for current, dirs, files in os.walk(source):
            dirs.sort()
            for name in sorted(files) + dirs:
                info = os.lstat(os.path.join(current, name))
                digest.update(
                    f"{os.path.relpath(os.path.join(current, name), source)}|{info.st_size}|"
                    f"{info.st_mtime_ns}|{info.st_mode}\n".encode()
                )
    return digest.hexdigest()[:24]


_LAYERS: dict[tuple[str, ...], Path] = {}


def shared_layer(sources: Sequence[Path], fill: Callable[[Path], None]) -> Path:
    """The read-only layer for a workspace made by ``fill`` from ``sources``, made once per host.

    A process signs each set of sources once: task files are taken not to change while it runs.
    Every call records a use (the sidecar's mtime), so the cache's LRU sees the layer as live."""
    key = tuple(str(Path(s).resolve()) for s in sources)
    known = _LAYERS.get(key)
    if known is not None and known.is_dir():
        _record_use(known, key)
        return known
    target = Path(tempfile.gettempdir()) / f"{LAYER_PREFIX}{signature(sources)}"
    if target.is_dir():
        _LAYERS[key] = target
        _record_use(target, key)
        return target
    staging = temporary_folder(f"{LAYER_PREFIX}staging-")  # registered: no other process's reclaim removes it
    try:
        fill(staging)
        os.chmod(staging, 0o755)
        # the sidecar first: a layer without one reads as an older version's, idle since its files'
        # (copied) modification time, which another process's reclaim removed between the rename and
        # the sidecar (async vector environments: open_tree ENOENT)
        _record_use(target, key, _tree_bytes(staging))
        staging.rename(target)
    except OSError:
        if not target.is_dir():
            with contextlib.suppress(OSError):
                _meta_path(target).unlink()
            raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        forget_folder(staging)
    _LAYERS[key] = target
    _record_use(target, key)
    return target


def _meta_path(layer: Path) -> Path:
    return layer.with_name(layer.name + META_SUFFIX)


def _record_use(layer: Path, sources: Sequence[str], size: int | None = None) -> None:
    """Touch the layer's sidecar (its last use), writing it first where it is missing."""
    meta = _meta_path(layer)
    try:
        os.utime(meta)
        return
    except FileNotFoundError:
        pass
    except OSError:
        return
    record = {"sources": list(sources), "bytes": _tree_bytes(layer) if size is None else size}
    staging = meta.with_name(f"{meta.name}.{os.getpid()}.tmp")
    with contextlib.suppress(OSError):
        staging.write_text(json.dumps(record))
        staging.replace(meta)


def _tree_bytes(folder: Path) -> int:
    total = 0
    for current, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(current, name)).st_blocks * 512
    return total


@dataclass
class CachedLayer:
    """One layer of the cache, as :func:`reclaim_layers` sees it."""

    path: Path
    sources: list[str] | None  # None: made by an older version, which recorded none
    bytes: int
    last_used: float  # epoch seconds


def cached_layers(root: Path | None = None) -> list[CachedLayer]:
    """The layers in ``root`` (default: the temporary folder), least recently used first."""
    folder = Path(root) if root is not None else Path(tempfile.gettempdir())
    found = []
    for entry in folder.glob(f"{LAYER_PREFIX}*"):
        name = entry.name[len(LAYER_PREFIX) :]
        if name.endswith((META_SUFFIX, ".tmp")) or name.startswith(_TRANSIENT) or not entry.is_dir():
            continue
        meta = _meta_path(entry)
        try:
            record = json.loads(meta.read_text())
            found.append(CachedLayer(entry, list(record["sources"]), int(record["bytes"]), meta.stat().st_mtime))
        except (OSError, ValueError, KeyError, TypeError):
            with contextlib.suppress(OSError):
                found.append(CachedLayer(entry, None, _tree_bytes(entry), entry.stat().st_mtime))
    return sorted(found, key=lambda layer: layer.last_used)


def layers_in_use(registered: Iterable[str] = ()) -> set[str]:
    """Names of layers an episode uses: mounted in this mount namespace (an idmapped bind's root or an
    overlay's lowerdir), or in ``registered`` (what live processes' registries list; see
    :func:`.isolation.reclaim_layer_cache`)."""
    names: set[str] = set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            for word in line.replace(",", " ").replace(":", " ").replace("=", " ").split():
                if LAYER_PREFIX in word:
                    names.add(word.rstrip("/").rsplit("/", 1)[-1])
    names.update(Path(value).name for value in registered)
    return names


def reclaim_layers(
    *,
    registered: Iterable[str],
    cache_mb: float | None = None,
    max_age_h: float | None = None,
    root: Path | None = None,
    now: float | None = None,
) -> list[str]:
    """Bound the layer cache; returns a line per layer removed. ``registered``: the layers live
    processes' registries list (in use). Limits default to the environment's
    ``HARNESS_GYM_LAYER_CACHE_MB`` and ``HARNESS_GYM_LAYER_MAX_AGE_H``."""
    cache_mb = _limit(CACHE_MB_VARIABLE, DEFAULT_CACHE_MB) if cache_mb is None else cache_mb
    max_age_h = _limit(MAX_AGE_VARIABLE, DEFAULT_MAX_AGE_H) if max_age_h is None else max_age_h
    now = time.time() if now is None else now
    folder = Path(root) if root is not None else Path(tempfile.gettempdir())
    in_use = layers_in_use(registered)
    done: list[str] = []
    for entry in folder.glob(f"{LAYER_PREFIX}*"):  # half-made layers of killed processes
        if entry.name in in_use:  # a live process is filling it (its mtime may be its sources')
            continue
        with contextlib.suppress(OSError):
            if entry.name[len(LAYER_PREFIX) :].startswith(_TRANSIENT) and now - entry.stat().st_mtime > 3600:
                shutil.rmtree(entry, ignore_errors=True)
                done.append(f"removed {entry} (unfinished layer)")
    kept: list[CachedLayer] = []
    for layer in cached_layers(folder):
        idle_s = now - layer.last_used
        reason = None
        if layer.path.name in in_use or idle_s < GRACE_S:
            reason = None
        elif layer.sources is None:
            reason = "made by an older version, sources unknown"
        elif not all(os.path.exists(source) for source in layer.sources):
            reason = "its sources are gone"
        elif idle_s > max_age_h * 3600:
            reason = f"unused for {idle_s / 3600:.1f} h"
        if reason is None:
            kept.append(layer)
        else:
            _remove(layer.path)
            done.append(f"removed layer {layer.path} ({reason})")
    total = sum(layer.bytes for layer in kept)
    for layer in kept:  # least recently used first
        if total <= cache_mb * (1 << 20):
            break
        if layer.path.name in in_use or now - layer.last_used < GRACE_S:
            continue
        _remove(layer.path)
        total -= layer.bytes
        done.append(f"removed layer {layer.path} (cache above {cache_mb:g} MB; least recently used)")
    return done


def _limit(variable: str, default: float) -> float:
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{variable} must be a number, got {text!r}") from None
    if not value >= 0:
        raise ValueError(f"{variable} must be >= 0, got {text!r}")
    return value


def _remove(layer: Path) -> None:
    """Rename first (a process that finds the name gone makes a fresh layer), then delete."""
    doomed = layer.with_name(f"{LAYER_PREFIX}staging-doomed-{os.getpid()}-{layer.name[len(LAYER_PREFIX) :]}")
    try:
        layer.rename(doomed)
    except OSError:
        doomed = layer
    shutil.rmtree(doomed, ignore_errors=True)
    with contextlib.suppress(OSError):
        _meta_path(layer).unlink()
    for key, path in list(_LAYERS.items()):
        if path == layer:
            del _LAYERS[key]


# ----------------------------------------------------------------------------- idmapped mounts

_USERNS: OrderedDict[int, int] = OrderedDict()  # uid -> user-namespace fd mapping 0 to it
_USERNS_KEEP = 64
_USERNS_LOCK = threading.Lock()


@contextlib.contextmanager
def _userns_for(uid: int) -> Iterator[int]:
    """A user namespace whose uid and gid 0 are ``uid`` (an idmapped mount's mapping), cached; the
    descriptor is the caller's own copy while the block runs (another thread's eviction closes
    only the cache's). Made outside the lock: 64 spares made at once queued behind each other."""
    with _USERNS_LOCK:
        known = _USERNS.get(uid)
        if known is not None:
            _USERNS.move_to_end(uid)
            held = os.dup(known)
    if known is None:
        made = _make_userns(uid)
        with _USERNS_LOCK:
            if uid in _USERNS:  # another thread made one meanwhile: keep the cache's
                os.close(made)
            else:
                _USERNS[uid] = made
                while len(_USERNS) > _USERNS_KEEP:
                    os.close(_USERNS.popitem(last=False)[1])
            held = os.dup(_USERNS[uid])
    try:
        yield held
    finally:
        os.close(held)


def cached_uids() -> list[int]:
    """The uids whose idmapping namespace is cached, most recently used first (a sandbox that
    leases one of them mounts its workspace without making a namespace)."""
    with _USERNS_LOCK:
        return list(reversed(_USERNS))


# The namespace's holder is a fresh process, not a fork: a fork of a process whose libraries keep
# thread pools (torch's OpenMP after its first matrix product) can come up with a thread that an
# at-fork handler started, and a multithreaded process cannot unshare its user namespace (EINVAL).
# util-linux's ``unshare`` (a sh that says it runs, then waits) starts in ~6 ms; a Python holder,
# where ``unshare`` is missing, in ~35 ms, which was half of every sandbox start.
_USERNS_HOLDER = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    f"failed = libc.unshare({_CLONE_NEWUSER:#x})\n"
    "os.write(1, b'0 %d' % ctypes.get_errno() if failed else b'1')\n"
    "failed or os.read(0, 1)\n"
)


def _holder_argv() -> list[str]:
    """A process in a new user namespace that writes ``1`` and waits for its stdin to close."""
    unshare = shutil.which("unshare", path="/usr/bin:/bin")
    if unshare is not None:
        return [unshare, "--user", "/bin/sh", "-c", "echo 1 && read _"]
    return [sys.executable, "-I", "-S", "-c", _USERNS_HOLDER]


def _make_userns(uid: int) -> int:
    """A new user namespace mapping 0 to ``uid``: a descriptor the caller owns."""
    holder = subprocess.Popen(
        _holder_argv(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=True,
    )
    assert holder.stdin is not None and holder.stdout is not None and holder.stderr is not None
    try:
        answer = holder.stdout.read(1)
        if answer != b"1":
            code = (answer + holder.stdout.read()).decode(errors="replace").strip().removeprefix("0 ")
            said = holder.stderr.read().decode(errors="replace").strip()
            reason = os.strerror(int(code)) if code.isdigit() else said or "the helper process failed"
            raise OSError(f"could not create a user namespace: {reason}")
        for name, text in (("uid_map", f"0 {uid} 1\n"), ("setgroups", "deny"), ("gid_map", f"0 {uid} 1\n")):
            with open(f"/proc/{holder.pid}/{name}", "w") as handle:
                handle.write(text)
        return os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.stdin.close()
        holder.stdout.close()
        holder.stderr.close()
        holder.wait()


def _idmapped_bind(source: Path, target: Path, uid: int) -> None:
    """Mount ``source`` at ``target`` read-only, its root-owned files shown as owned by ``uid``."""
    libc = _libc()
    tree = _check(
        libc.syscall(
            _SYS_OPEN_TREE, _AT_FDCWD, str(source).encode(), _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE
        ),
        "open_tree",
    )
    try:
        with _userns_for(uid) as userns:
            attributes = _MountAttr(_MOUNT_ATTR_IDMAP | _MOUNT_ATTR_RDONLY, 0, 0, userns)
            flags = _AT_EMPTY_PATH | _AT_RECURSIVE
            setattr_ = libc.syscall(
                _SYS_MOUNT_SETATTR, tree, b"", flags, ctypes.byref(attributes), ctypes.sizeof(attributes)
            )
            _check(setattr_, "mount_setattr")
        _check(
            libc.syscall(_SYS_MOVE_MOUNT, tree, b"", _AT_FDCWD, str(target).encode(), _MOVE_MOUNT_F_EMPTY_PATH),
            "move_mount",
        )
    finally:
        os.close(tree)


# ----------------------------------------------------------------------------- episode workspaces


def prepare(size_mb: int | None, root: str | Path | None = None) -> Path:
    """An episode folder on a size-limited tmpfs; returns the (not yet mounted) workspace path in it."""
    # recorded before it exists (the caller records the workspace in it once it returns): a kill -9
    # while its tmpfs is mounted leaves a record, never an unrecorded folder
    folder = temporary_folder("harness-gym-ws-", root)
    try:
        folder.chmod(0o755)  # the sandbox uid starts bwrap and must reach merged/ (as under the tmpfs before)
        (folder / SCRATCH).mkdir(mode=0o700)
        (folder / MERGED).mkdir()
        _mount("tmpfs", str(folder / SCRATCH), "tmpfs", f"size={int(size_mb or 1024)}m,mode=0700")
        for name in ("upper", "work"):
            (folder / SCRATCH / name).mkdir()
    except OSError:
        _release_folder(folder)
        raise
    return folder / MERGED


def mount(workspace: Path, layer: Path, uid: int | None) -> None:
    """Mount the overlay at ``workspace`` (from :func:`prepare`): ``layer`` below, owned by ``uid``."""
    folder = workspace.parent
    scratch = folder / SCRATCH
    if not os.path.ismount(scratch):  # detached by an earlier mount: upper must never land on the host's disk
        raise OSError(f"{scratch} is not the episode's tmpfs (the workspace was mounted once already)")
    lower = layer
    if uid is not None:
        lower = folder / layer.name  # named as the layer: the overlay's lowerdir then names the layer in use
        lower.mkdir(exist_ok=True)
        _idmapped_bind(layer, lower, uid)
        os.chown(scratch / "upper", uid, uid)
    os.chmod(scratch / "upper", os.stat(layer).st_mode & 0o7777)
    options = f"lowerdir={lower},upperdir={scratch / 'upper'},workdir={scratch / 'work'}"
    try:
        _mount("overlay", str(workspace), "overlay", options)
    finally:
        # the overlay keeps private clones of its layers: off the host's tree, one mount per episode
        # instead of three (each one is copied and detached again by every sandbox start on the host)
        if lower != layer:
            _detach(str(lower))
        _detach(str(scratch))


def is_layered(path: Path) -> bool:
    """Whether ``path`` is an episode workspace made by :func:`prepare`."""
    return path.name == MERGED and path.parent.name.startswith("harness-gym-ws-")


def release(workspace: Path) -> None:
    """Unmount an episode's overlay, idmapped layer and tmpfs at once, and remove its folder."""
    _release_folder(workspace.parent)


def detach_episode_mounts(folder: Path) -> None:
    """Detach every mount still in an episode folder (the overlay; after a crash mid-start also the
    tmpfs and the idmapped layer; a folder of the older layout is itself a tmpfs). Anything else is
    left alone: a plain workspace is no episode folder (it has no ``merged`` folder of ours)."""
    if not folder.name.startswith("harness-gym-ws-"):
        return
    if (folder / MERGED).is_dir() and not (folder / MERGED).is_symlink():
        with contextlib.suppress(OSError):
            for entry in os.listdir(folder):
                if os.path.ismount(folder / entry):
                    _detach(str(folder / entry))  # lazy and recursive
    if os.path.ismount(folder):
        _detach(str(folder))


def _release_folder(folder: Path) -> None:
    """Detach an episode folder's mounts, then remove it; nothing is removed below a mount that
    could not be detached (it may be a shared layer)."""
    detach_episode_mounts(folder)
    with contextlib.suppress(OSError):
        folder.rmdir()
    if folder.exists() and not os.path.ismount(folder):
        with contextlib.suppress(OSError):
            if any(os.path.ismount(folder / entry) for entry in os.listdir(folder)):
                return
        shutil.rmtree(folder, ignore_errors=True)
    if not os.path.lexists(folder):
        forget_folder(folder)


@functools.cache
def available() -> bool:
    """Whether this host can make layered workspaces (root, overlayfs, idmapped mounts)."""
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/filesystems") as handle:
            if "overlay" not in handle.read():
                return False
        source = temporary_folder(f"{LAYER_PREFIX}probe-")
        try:
            (source / "probe").write_text("x")
            workspace = prepare(1)
            record_folder(workspace)
            try:
                mount(workspace, source, 65_534)
                return (workspace / "probe").stat().st_uid == 65_534
            finally:
                release(workspace)
                forget_folder(workspace)
        finally:
            shutil.rmtree(source, ignore_errors=True)
            forget_folder(source)
    except OSError:
        return False
