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

from harness_gym.paths import forget_folder, temporary_folder

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
    try:
        _overlay(layer, scratch, folder, workspace, uid)
    finally:
        # the overlay keeps private clones of its layers: off the host's tree, one mount per episode
        # instead of three (each one is copied and detached again by every sandbox start on the host)
        _detach(str(scratch))


def _overlay(layer: Path, scratch: Path, lower_parent: Path, target: Path, uid: int | None) -> None:
    """The overlay at ``target``: ``layer`` below (idmapped to ``uid`` in ``lower_parent``, named as
    the layer so the overlay's lowerdir names the layer in use), ``scratch``'s upper and work above.
    The idmapped bind is detached once mounted: the overlay holds a private clone of it."""
    lower = layer
    if uid is not None:
        lower = lower_parent / layer.name
        lower.mkdir(exist_ok=True)
        _idmapped_bind(layer, lower, uid)
        os.chown(scratch / "upper", uid, uid)
    os.chmod(scratch / "upper", os.stat(layer).st_mode & 0o7777)
    options = f"lowerdir={lower},upperdir={scratch / 'upper'},workdir={scratch / 'work'}"
    try:
        _mount("overlay", str(target), "overlay", options)
    finally:
        if lower != layer:
            _detach(str(lower))


def is_layered(path: Path) -> bool:
    """Whether ``path`` is an episode workspace made by :func:`prepare` or :class:`EpisodeMounts`."""
    if Path(path) in _EPISODES:
        return True
    return path.name == MERGED and path.parent.name.startswith("harness-gym-ws-")


def release(workspace: Path) -> None:
    """Unmount an episode's overlay, idmapped layer and tmpfs at once, and remove its folder."""
    with _EPISODES_LOCK:
        episode = _EPISODES.pop(Path(workspace), None)
    if episode is not None:
        episode.close()
        return
    _release_folder(workspace.parent)


# ----------------------------------------------------------------------------- a mount namespace per episode

_CLONE_NEWNS, _CLONE_FS = 0x00020000, 0x00000200
_MS_REC, _MS_PRIVATE = 0x4000, 0x40000
_EPISODES: dict[Path, EpisodeMounts] = {}  # host view of the workspace -> its episode
_EPISODES_LOCK = threading.Lock()


def _in_namespace(namespace: int | None, work: Callable[[], None]) -> None:
    """Run ``work`` on a thread of its own in the mount namespace ``namespace`` (a descriptor), or
    in a new private copy of this one when None (then the thread opens it: ``work`` finds the
    descriptor in :data:`_MADE`). Only that thread changes namespace (it unshares its filesystem
    context first); the process and its other threads stay in the host's."""
    failure: list[BaseException] = []

    def run() -> None:
        libc = _libc()
        try:
            _check(libc.unshare(_CLONE_FS), "unshare(CLONE_FS)")
            if namespace is None:
                _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
                # nothing mounted here propagates to the host, nor the host's mounts here
                _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
            else:
                _check(libc.setns(namespace, _CLONE_NEWNS), "setns(CLONE_NEWNS)")
            work()
        except BaseException as exc:  # re-raised on the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="harness-gym-mountns", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


class EpisodeMounts:
    """An episode's workspace mounted in a mount namespace of its own, never in the host's.

    Every sandbox start copies its caller's whole mount table and detaches it again; with each
    live episode's overlay on the host, a start cost grew with the episodes running beside it
    (measured: bwrap's own start 8 ms beside no sandbox, 23-35 ms beside 128, and 8-10 ms beside
    the same 128 once their overlays were out of its namespace). Here the episode's tmpfs and
    overlay live in a private copy of the host's namespace made for this episode alone (held by
    a descriptor, no process), which the sandbox's launcher enters (:meth:`enter_argv`) before
    bwrap: a start copies the host's own mounts and this episode's two, whatever runs beside it.
    The host reaches the files through ``/proc/<pid>/fd/<n>/merged-<token>`` (:attr:`workspace`), a path
    of this process's descriptor on the tmpfs; on the host's own tree the folder is empty, so a
    path resolved there names nothing (never the wrong files). When the owner dies, even by
    ``kill -9``, its descriptors close and the kernel unmounts everything once the sandbox's
    processes are gone (the uid reclaim kills them); only the empty, registered folder is left.

    Layout, in the namespace: ``D/scratch`` the size-limited tmpfs holding ``upper``, ``work``,
    ``merged-<D's token>`` (the overlay, the workspace: a released episode's view names nothing
    in a later one's tmpfs) and ``<layer name>`` (the idmapped layer, detached once the overlay
    holds it). ``D`` is a registered folder on the host's disk.
    """

    def __init__(self, size_mb: int | None, root: str | Path | None = None) -> None:
        self.folder = temporary_folder("harness-gym-ws-", root)  # recorded before it exists
        # the workspace's path in the namespace, named by the folder: a released episode's view names
        # nothing even where a later episode's descriptor reuses its number
        self.inside = self.folder / SCRATCH / f"{MERGED}-{self.folder.name.rsplit('-', 1)[-1]}"
        self._namespace = self._scratch = -1
        self.mounted = False
        opened: list[int] = []

        def make() -> None:
            scratch = self.folder / SCRATCH
            scratch.mkdir(mode=0o755)
            _mount("tmpfs", str(scratch), "tmpfs", f"size={int(size_mb or 1024)}m,mode=0755")
            self.inside.mkdir()
            (scratch / "upper").mkdir()
            (scratch / "work").mkdir(mode=0o700)
            opened.append(os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC))
            opened.append(os.open(scratch, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC))

        try:
            self.folder.chmod(0o755)  # the sandbox uid starts bwrap and must reach merged/
            _in_namespace(None, make)
        except BaseException:
            for fd in opened:
                os.close(fd)
            _release_folder(self.folder)
            raise
        self._namespace, self._scratch = opened
        self.workspace = Path(f"/proc/{os.getpid()}/fd/{self._scratch}/{self.inside.name}")
        with _EPISODES_LOCK:
            _EPISODES[self.workspace] = self

    def mount(self, layer: Path, uid: int | None) -> None:
        """Mount the overlay: ``layer`` below (shown as owned by ``uid``), the tmpfs above. Once."""
        if self.mounted:
            raise OSError(f"{self.workspace} is mounted already (its upper layer holds the last episode)")
        scratch = self.folder / SCRATCH

        _in_namespace(self._namespace, lambda: _overlay(layer, scratch, scratch, self.inside, uid))
        self.mounted = True

    def enter_argv(self) -> list[str]:
        """A command prefix that runs the rest in this episode's namespace (util-linux ``nsenter``,
        as root: the sandbox's launcher, before it drops to the sandbox uid). It opens the namespace
        through this process's descriptor, so no descriptor of it reaches the sandbox."""
        return [_nsenter(), f"--mount=/proc/{os.getpid()}/fd/{self._namespace}", "--"]

    def close(self) -> None:
        """Drop the namespace (the kernel unmounts its tmpfs and overlay) and remove the folder."""
        for fd in (self._scratch, self._namespace):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._namespace = self._scratch = -1
        _release_folder(self.folder)


def _forget_in_child() -> None:
    """In a forked child: close its copies of the episodes' descriptors, which would otherwise keep
    each namespace (its tmpfs and overlay, the agent's files in RAM) alive after the owner released
    it, for as long as the child (a process-pool worker) lives. The child never owns them."""
    for episode in _EPISODES.values():
        for fd in (episode._scratch, episode._namespace):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        episode._namespace = episode._scratch = -1
    _EPISODES.clear()


os.register_at_fork(after_in_child=_forget_in_child)


def episode_for(workspace: Path | None) -> EpisodeMounts | None:
    """The :class:`EpisodeMounts` whose host view is ``workspace``, if any."""
    return None if workspace is None else _EPISODES.get(Path(workspace))


@functools.cache
def _nsenter() -> str:
    found = shutil.which("nsenter", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if found is None:
        raise OSError("util-linux nsenter is missing")
    return found


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
    """Whether this host can make layered workspaces (root, overlayfs, idmapped mounts, a mount
    namespace per episode entered by ``nsenter``)."""
    if os.geteuid() != 0:
        return False
    try:
        with open("/proc/filesystems") as handle:
            if "overlay" not in handle.read():
                return False
        _nsenter()
        source = temporary_folder(f"{LAYER_PREFIX}probe-")
        try:
            (source / "probe").write_text("x")
            episode = EpisodeMounts(1)
            try:
                episode.mount(source, 65_534)
                return (episode.workspace / "probe").stat().st_uid == 65_534
            finally:
                release(episode.workspace)
        finally:
            shutil.rmtree(source, ignore_errors=True)
            forget_folder(source)
    except OSError:
        return False
