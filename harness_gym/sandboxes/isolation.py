"""Host-side isolation helpers for local sandboxes: a dedicated host uid per sandbox (as root),
cgroup limits (v1 controllers or a delegated v2 subtree), size-limited workspaces, host-wide
leases and a registry of what each process owns so that the next start reclaims what a killed one
left behind. Each degrades where the host does not allow it, and :class:`LimitReport` says which
limits hold and which do not (never silently).

Why a dedicated uid: RLIMIT_NPROC never binds root, and it counts processes per user. Running each
sandbox as its own unprivileged host uid (it still appears as root inside its user namespace)
makes the process limit real and per sandbox.

Why a fixed state folder: uids and cgroups are host-wide, so their locks must be too; a lock under
``$TMPDIR`` (which Slurm sets per job) would let two jobs lease the same uid.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import fcntl
import functools
import itertools
import json
import os
import resource
import secrets
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_gym.paths import temporary_folder, track_temporary_folders
from harness_gym.sandboxes import layers

UID_BASE_VARIABLE = "HARNESS_GYM_UID_BASE"  # the first sandbox uid
UID_COUNT_VARIABLE = "HARNESS_GYM_UID_COUNT"  # how many sandbox uids (a live sandbox and its spare hold one each)
DEFAULT_UID_BASE = 231_072  # above typical system and subordinate-id ranges
DEFAULT_UID_COUNT = 32_768  # 10,000 sandboxes on one node, each with a warm spare, and room to spare
CGROUP_PREFIX = "harness-gym-"
STATE_DIR_VARIABLE = "HARNESS_GYM_STATE_DIR"  # override of the host-wide state folder
CGROUP_ROOT_VARIABLE = "HARNESS_GYM_CGROUP_ROOT"  # where the cgroup filesystem is mounted
CGROUP_VARIABLE = "HARNESS_GYM_CGROUP"  # a delegated v2 cgroup to create sandbox groups under
CGROUP_ROOT = Path(os.environ.get(CGROUP_ROOT_VARIABLE, "/sys/fs/cgroup"))
CPU_PERIOD_US = 100_000


def is_root() -> bool:
    return os.geteuid() == 0


# ----------------------------------------------------------------------------- host-wide state


def state_dir() -> Path:
    """The host-wide folder for leases and the ownership registry; independent of ``TMPDIR``.

    Root uses ``/run/harness-gym`` (else ``/dev/shm/harness-gym``); another user a private
    ``/dev/shm/harness-gym-<uid>`` (else ``/tmp/...``): fixed paths every process of the host agrees on.
    """
    override = os.environ.get(STATE_DIR_VARIABLE)
    candidates = [Path(override)] if override else []
    if is_root():
        candidates += [Path("/run/harness-gym"), Path("/dev/shm/harness-gym"), Path("/tmp/harness-gym-0")]
    else:
        candidates += [Path(f"/dev/shm/harness-gym-{os.geteuid()}"), Path(f"/tmp/harness-gym-{os.geteuid()}")]
    for path in candidates:
        with contextlib.suppress(OSError):
            return _private_dir(path)
    raise RuntimeError(f"no usable host-wide state folder among {[str(p) for p in candidates]}")


def _private_dir(path: Path) -> Path:
    """Create ``path`` (0700) or accept an existing one only if it is ours and not a symbolic link
    (another user could otherwise plant it in a world-writable /dev/shm)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise PermissionError(f"{path} is not a private folder of this user")
    return path


def shared_temp_dir() -> Path:
    """Where workspaces, control folders and tool scripts go: the temp folder, unless (as root) a
    sandbox uid could not reach into it (a per-job ``TMPDIR`` under a private folder); then
    ``/var/tmp/harness-gym`` (0711: others may traverse it, not list it)."""
    temp = Path(tempfile.gettempdir())
    if not is_root() or _traversable(temp):
        return temp
    path = Path("/var/tmp/harness-gym")
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o711, parents=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise PermissionError(f"{path} is not a folder of root's that others cannot write")
    os.chmod(path, 0o711)
    return path


def _traversable(path: Path) -> bool:
    """Every folder from / to ``path`` lets others search it."""
    current = path.resolve()
    for folder in (current, *current.parents):
        try:
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def lock_dir() -> Path:
    path = state_dir() / "uids"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


# ----------------------------------------------------------------------------- ownership registry


def process_start_time(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (with the pid, an identity that survives pid reuse)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    try:
        return int(raw[raw.rindex(")") + 2 :].split()[19])
    except (ValueError, IndexError):
        return None


def owner_alive(pid: int, start_time: int | None) -> bool:
    """Whether the process that wrote a registry is still running. A zombie is not: a killed owner
    whose parent died too stays one until an init reaps it, which some hosts' init never does."""
    if start_time is None or process_start_time(pid) != start_time:
        return False
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return raw[raw.rindex(")") + 2 :].split()[0] not in ("Z", "X")


class Registry:
    """What this process created on the host (workspaces, control and grader folders, cgroups, uids), in ``<state>/owners/<pid>-<start>.log``: an append-only log of ``+kind value``
    and ``-kind value`` lines (one ``write`` each; compacted when it grows), so that a ``kill -9``
    leaves an exact list that :func:`reclaim_dead_owners` cleans up at the next start."""

    # Docker containers: labelled with their owner (docker.py). "layer": a shared copy-on-write layer
    # an episode uses (never reclaimed with its owner; the layer cache must not remove it meanwhile)
    KINDS = ("dir", "cgroup", "uid", "layer")
    COMPACT_BYTES = 1 << 16

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.start_time = process_start_time(self.pid)
        folder = state_dir() / "owners"
        folder.mkdir(mode=0o700, exist_ok=True)
        self.path = folder / f"{self.pid}-{self.start_time}.log"
        # a multiset per kind (a shared layer is held once per episode using it): O(1) add and
        # discard at 10,000 live sandboxes, where a list's scan made each discard O(n) under the lock
        self._items: dict[str, Counter[str]] = {kind: Counter() for kind in self.KINDS}
        self._lock = threading.Lock()
        self._handle: int | None = None
        self._size = 0

    def add(self, kind: str, value: str | int | Path) -> None:
        with self._lock:
            self._items[kind][str(value)] += 1
            self._append(f"+{kind} {value}\n")

    def discard(self, kind: str, value: str | int | Path) -> None:
        with self._lock:
            held = self._items[kind]
            key = str(value)
            if key not in held:
                return
            held[key] -= 1
            if not held[key]:
                del held[key]
            self._append(f"-{kind} {value}\n")

    def _append(self, line: str) -> None:
        if self._handle is not None and self._size > self.COMPACT_BYTES:  # rewrite the live entries (rare)
            content = "".join(f"+{k} {v}\n" for k, values in self._items.items() for v in values.elements())
            staging = self.path.with_suffix(".compact")
            staging.write_bytes(content.encode("utf-8", "surrogateescape"))
            staging.replace(self.path)
            os.close(self._handle)
            self._handle = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            self._size = len(content)
            return
        if self._handle is None:
            self._handle = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        data = line.encode("utf-8", "surrogateescape")
        os.write(self._handle, data)
        self._size += len(data)

    def close(self) -> None:
        """At a clean exit: drop the log if nothing is left to reclaim."""
        with self._lock:
            if self.pid == os.getpid() and not any(self._items.values()):
                with contextlib.suppress(OSError):
                    self.path.unlink()


def read_registry(text: str) -> dict[str, list[str]]:
    """Replay a registry log into the live entries (a torn last line from a crash is ignored)."""
    items: dict[str, Counter[str]] = {kind: Counter() for kind in Registry.KINDS}
    for line in text.splitlines():
        sign, kind, value = line[:1], line[1:].partition(" ")[0], line[1:].partition(" ")[2]
        if kind not in items or not value:
            continue
        if sign == "+":
            items[kind][value] += 1
        elif sign == "-" and items[kind][value] > 0:
            items[kind][value] -= 1
    return {kind: list(held.elements()) for kind, held in items.items()}


_registry: Registry | None = None
# reentrant: the first call's recovery pass releases a dead owner's folders, which records through registry()
_registry_lock = threading.RLock()


def registry() -> Registry:
    """This process's registry (a forked child gets its own: it never cleans up the parent's things)."""
    global _registry
    with _registry_lock:
        if _registry is None or _registry.pid != os.getpid():
            _registry = Registry()
            atexit.register(_registry.close)
            _reclaim_once()
        return _registry


@contextlib.contextmanager
def owned(kind: str, value: str | int) -> Iterator[None]:
    """Register a resource for the duration of a block."""
    registry().add(kind, value)
    try:
        yield
    finally:
        registry().discard(kind, value)


_reclaimed_in: int | None = None


def _reclaim_once() -> None:
    global _reclaimed_in
    if _reclaimed_in != os.getpid():
        _reclaimed_in = os.getpid()
        with contextlib.suppress(Exception):  # recovery must never stop a start
            reclaim_dead_owners()
        with contextlib.suppress(Exception):
            reclaim_layer_cache()


def reclaim_layer_cache(**limits: Any) -> list[str]:
    """Bound the copy-on-write layer cache (:func:`.layers.reclaim_layers`), sparing every layer a
    live process's registry lists. Returns a line per layer removed."""
    in_use = live_registry_values("layer") + live_registry_values("dir")  # layers, and staging being filled
    return layers.reclaim_layers(registered=in_use, **limits)


def live_registry_values(kind: str) -> list[str]:
    """The ``kind`` entries in the registries of harness-gym processes still running (this one too)."""
    values: list[str] = []
    folder = state_dir() / "owners"
    for entry in sorted(folder.glob("*.log")) if folder.is_dir() else []:
        pid, _, start = entry.stem.partition("-")
        if not pid.isdigit() or not owner_alive(int(pid), int(start) if start.isdigit() else None):
            continue
        with contextlib.suppress(OSError):
            values += read_registry(entry.read_text("utf-8", "surrogateescape")).get(kind, [])
    return values


def reclaim_dead_owners() -> list[str]:
    """Clean up everything registered by harness-gym processes that are no longer running.
    Returns a line per resource reclaimed."""
    done: list[str] = []
    for entry in dead_owner_logs():
        pid = entry.stem.partition("-")[0]
        try:
            handle = os.open(entry, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another process is reclaiming it
            except BlockingIOError:
                continue
            items = read_registry(entry.read_text("utf-8", "surrogateescape"))
            done += [f"{line} (owner pid {pid})" for line in reclaim(items)]
            # uids outside this process's pool (another HARNESS_GYM_UID_BASE/COUNT, another release)
            # stay in the log for a process that can reclaim them: dropping the log lost them for good
            foreign = [v for v in items.get("uid", []) if v.partition(":")[0].isdigit() and not _in_pool(v)]
            if foreign:
                entry.write_text("".join(f"+uid {value}\n" for value in foreign), "utf-8", "surrogateescape")
                continue
            with contextlib.suppress(FileNotFoundError):
                entry.unlink()
        finally:
            os.close(handle)
    return done


def dead_owner_logs() -> list[Path]:
    """Registry logs of harness-gym processes that are no longer running."""
    folder = state_dir() / "owners"
    dead = []
    for entry in sorted(folder.glob("*.log")) if folder.is_dir() else []:
        pid, _, start = entry.stem.partition("-")
        if pid.isdigit() and not owner_alive(int(pid), int(start) if start.isdigit() else None):
            dead.append(entry)
    return dead


def reclaim(items: Mapping[str, list[str]]) -> list[str]:
    """Kill, remove and unmount the recorded resources of a dead owner."""
    done = []
    for entry in items.get("uid", []):
        done += reclaim_uid(entry)
    for group in items.get("cgroup", []):
        if Path(group).exists():
            remove_cgroup(Path(group))
            done.append(f"removed cgroup {group}")
    for folder in items.get("dir", []):
        if Path(folder).exists() or os.path.ismount(folder):
            release_workspace(Path(folder))
            done.append(f"removed {folder}")
    return done


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (``PR_SET_PDEATHSIG``): an
    initializer for process-pool workers, so that a ``kill -9`` of the parent leaves no worker."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)


# ----------------------------------------------------------------------------- descriptors

DESCRIPTORS_PER_SANDBOX = 8  # what an owner keeps open per live sandbox: uid lock, output pipe, status
# socket, command pipe, tool-server request and reply pipes (measured 6; a warm spare holds as many), and
# a copy-on-write workspace's mount namespace and tmpfs (layers.EpisodeMounts)


def raise_descriptor_limit() -> int:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit and return it: an owner keeps
    :data:`DESCRIPTORS_PER_SANDBOX` open per sandbox, and the usual soft limit of 1,024 stops one
    process near 80 environments with their spares, long before the hard limit would."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):  # RLIM_INFINITY may be refused: keep the soft limit
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft


def out_of_descriptors(exc: OSError) -> str | None:
    """What to tell the caller when starting a sandbox ran out of descriptors (None: another error)."""
    if exc.errno not in (errno.EMFILE, errno.ENFILE):
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        held = len(os.listdir("/proc/self/fd"))
    except OSError:
        held = -1
    where = "this host's fs.file-max" if exc.errno == errno.ENFILE else f"RLIMIT_NOFILE {soft} (hard {hard})"
    return (
        f"out of file descriptors ({exc.strerror}): this process holds {held}, the limit is {where}; each "
        f"sandbox keeps {DESCRIPTORS_PER_SANDBOX} open in its owner (a warm spare as many): raise the hard "
        "limit (ulimit -Hn, LimitNOFILE= in systemd, nofile in limits.conf) or spread the environments over "
        "more processes; `harness-gym doctor --sandboxes N` checks a target"
    )


# ----------------------------------------------------------------------------- uid leases


def uid_pool() -> range:
    """The host uids sandboxes lease: ``HARNESS_GYM_UID_BASE`` and ``HARNESS_GYM_UID_COUNT``
    (defaults 231,072 and 32,768). Every process of a host must agree on it (leases are per uid)."""
    base = _whole_number(UID_BASE_VARIABLE, DEFAULT_UID_BASE, 1000)
    count = _whole_number(UID_COUNT_VARIABLE, DEFAULT_UID_COUNT, 1)
    if base + count > 0xFFFF_FFFE:  # (uid_t)-1 and beyond are not uids
        raise ValueError(f"{UID_BASE_VARIABLE} + {UID_COUNT_VARIABLE} = {base + count} is past the last uid 4294967294")
    return range(base, base + count)


def _whole_number(variable: str, default: int, least: int) -> int:
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < least:
        raise ValueError(f"{variable} must be a whole number of at least {least}, got {text!r}")
    return int(text)


_acquire_failures: list[str] = []  # uids whose previous holder's leftovers could not be reclaimed (for doctor)
# uids this process holds now: a lease search skips them without opening their lock file (at 10,000
# sandboxes in one process, a search from a cursor that wrapped around opened every held uid's file)
_held: set[int] = set()
_held_lock = threading.Lock()
lock_files_tried = 0  # lock files opened by lease searches in this process (tests count them)
# where this process's next search starts: random, so processes rarely contend, and moved past each
# uid found (a cursor moved by one per lease rescanned another process's whole run of leases each time)
_uid_cursor = int.from_bytes(os.urandom(2), "big")


@dataclass
class UidLease:
    """Exclusive use of one host uid, held by an flock in the host-wide state folder for the
    sandbox's lifetime (across processes, whatever their ``TMPDIR``).

    Each acquisition mints a ``generation`` written into the lock file; the owner's registry records
    ``uid:generation`` (:attr:`token`), so a crash-recovery pass kills a uid's processes only while
    the lock file still names the dead owner's generation and nobody holds the lock: a uid leased
    again since by a live process is never touched."""

    uid: int
    handle: int
    generation: str = ""

    @classmethod
    def acquire(cls, start: int | None = None, prefer: Iterable[int] = ()) -> UidLease:
        """The first free uid of ``prefer`` (those in the pool), else of the pool from offset ``start``
        on (None: from this process's cursor, which then moves past the uid found). Uids this process
        holds are skipped unopened; only other processes' leases cost a lock file tried each."""
        global lock_files_tried, _uid_cursor
        folder = lock_dir()
        pool = uid_pool()
        begin = _uid_cursor if start is None else start
        preferred: Iterable[tuple[int, int | None]] = ((uid, None) for uid in prefer if uid in pool)
        scanned = ((pool[(begin + offset) % len(pool)], (begin + offset) % len(pool)) for offset in range(len(pool)))
        for uid, position in itertools.chain(preferred, scanned):
            with _held_lock:
                if uid in _held:
                    continue
                _held.add(uid)  # claimed by this thread while it tries the lock
                lock_files_tried += 1
            try:
                handle = os.open(folder / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            except BaseException:
                _forget_held(uid)
                raise
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(handle)
                _forget_held(uid)
                continue
            lease = cls(uid, handle)
            try:
                lease.reclaim()
                lease.generation = secrets.token_hex(8)
                lease.record()
            except BaseException as exc:  # never keep the lock of a lease not handed out (it leaked)
                os.close(handle)
                _forget_held(uid)
                if isinstance(exc, Exception):
                    _acquire_failures.append(f"uid {uid}: {type(exc).__name__}: {exc}")
                    continue
                raise
            if start is None and position is not None:
                with _held_lock:
                    _uid_cursor = (position + 1) % len(pool)
            return lease
        raise RuntimeError(
            f"all {len(pool)} sandbox uids ({pool.start}-{pool.stop - 1}) are in use; "
            f"set {UID_COUNT_VARIABLE} (and {UID_BASE_VARIABLE}) for a larger pool"
        )

    @property
    def token(self) -> str:
        """What the owner's registry records for this lease: ``uid:generation``."""
        return f"{self.uid}:{self.generation}"

    def record(self, **resources: str | list[str] | None) -> None:
        """Remember what this lease created, so a later owner can clean up after a crash. Written over
        the old record, then cut to its length: a truncation to 0 first freed the file's block and
        the write allocated it again, an ext4 journal transaction each that stalled behind other
        I/O (the record: p50 6.8 ms of a sandbox start on a busy host; 8 us this way)."""
        data = json.dumps({"generation": self.generation, **resources}).encode()
        os.pwrite(self.handle, data, 0)
        os.ftruncate(self.handle, len(data))

    def recorded(self) -> dict[str, Any]:
        """What the lock file says (the last holder's generation and resources)."""
        try:
            data = json.loads(os.pread(self.handle, 65536, 0) or b"{}")
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def reclaim(self) -> list[str]:
        """Clean up what a crashed previous holder of this uid left behind; a line per thing done."""
        data = self.recorded()
        if not any(value for key, value in data.items() if key != "generation"):
            if data.get("generation"):  # its owner died before it started anything: only the name goes
                self.generation = ""
                self.record()
            return []  # released cleanly
        kill_uid(self.uid)
        done = [f"killed what was left of uid {self.uid}"]
        for group in data.get("cgroups") or []:
            if Path(group).exists():
                remove_cgroup(Path(group))
                done.append(f"removed cgroup {group}")
        for key in ("workspace", "control"):
            if data.get(key) and (Path(data[key]).exists() or os.path.ismount(data[key])):
                release_workspace(Path(data[key]))
                done.append(f"removed {data[key]}")
        self.generation = ""
        self.record()
        return done

    def release(self) -> None:
        if self.handle < 0:
            return  # released already: the uid may be another lease's of this process by now
        with contextlib.suppress(OSError):
            self.generation = ""
            self.record()
            os.close(self.handle)
        self.handle = -1
        _forget_held(self.uid)


def _forget_held(uid: int) -> None:
    with _held_lock:
        _held.discard(uid)


def _in_pool(entry: str) -> bool:
    """Whether a registry ``uid`` entry names a uid of this process's pool."""
    number = entry.partition(":")[0]
    return number.isdigit() and int(number) in uid_pool()


def reclaim_uid(entry: str) -> list[str]:
    """Reclaim one ``uid`` registry entry of a dead owner (``uid:generation``; a bare ``uid`` from an
    older release), keyed to the lease generation: nothing is killed unless the uid's lock is free
    and its file still names that generation with resources unreleased. Returns what was done."""
    number, _, generation = entry.partition(":")
    if not _in_pool(entry):
        return [f"skipped a uid entry this release cannot read or that is outside its pool: {entry!r}"]
    uid = int(number)
    try:
        handle = os.open(lock_dir() / f"{uid}.lock", os.O_RDWR)
    except FileNotFoundError:
        return []
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return []  # leased again by a live process: its lease, not ours to reclaim
        lease = UidLease(uid, handle)
        data = lease.recorded()
        if generation and data.get("generation") != generation:
            return []  # leased (and released or crashed) by someone else since: their registry covers it
        lease.generation = str(data.get("generation") or "")
        return lease.reclaim()
    finally:
        os.close(handle)


def kill_uid(uid: int) -> None:
    """Kill every process of a sandbox uid (stragglers of a crashed owner)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["pkill", "-KILL", "-U", str(uid)], capture_output=True, timeout=10)


# ----------------------------------------------------------------------------- cgroups


@dataclass
class LimitReport:
    """Which of a sandbox's limits hold and how, and which do not and why (``info["sandbox_limits"]``)."""

    enforced: dict[str, str] = field(default_factory=dict)
    not_enforced: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, dict[str, str]]:
        return {"enforced": dict(self.enforced), "not_enforced": dict(self.not_enforced)}

    def summary(self) -> str:
        return "; ".join(f"{name}: {why}" for name, why in self.not_enforced.items())


@dataclass(frozen=True)
class CgroupRequest:
    """The cgroup-backed limits a sandbox asks for (None: not asked)."""

    memory_mb: int | None = None
    max_processes: int | None = None
    cpus: float | None = None


# controller -> (limit name, v1 files, v2 files) for one request
def _v1_files(request: CgroupRequest) -> dict[str, tuple[str, dict[str, str]]]:
    files: dict[str, tuple[str, dict[str, str]]] = {}
    if request.memory_mb is not None:
        files["memory"] = ("memory", {"memory.limit_in_bytes": str(request.memory_mb << 20)})
    if request.max_processes is not None:
        files["pids"] = ("processes", {"pids.max": str(request.max_processes)})
    if request.cpus is not None:
        files["cpu"] = (
            "cpu",
            {"cpu.cfs_period_us": str(CPU_PERIOD_US), "cpu.cfs_quota_us": str(int(request.cpus * CPU_PERIOD_US))},
        )
    return files


def _v2_files(request: CgroupRequest) -> dict[str, tuple[str, dict[str, str]]]:
    files: dict[str, tuple[str, dict[str, str]]] = {}
    if request.memory_mb is not None:
        files["memory"] = ("memory", {"memory.max": str(request.memory_mb << 20)})
    if request.max_processes is not None:
        files["pids"] = ("processes", {"pids.max": str(request.max_processes)})
    if request.cpus is not None:
        files["cpu"] = ("cpu", {"cpu.max": f"{int(request.cpus * CPU_PERIOD_US)} {CPU_PERIOD_US}"})
    return files


def cgroup_version(root: Path | None = None) -> int:
    """2 on a unified (v2-only) host, 1 on a v1 or hybrid host (controllers bound to v1), 0 without cgroups."""
    root = root or CGROUP_ROOT
    if (root / "cgroup.controllers").exists():
        return 2
    return 1 if root.is_dir() and any((root / c).is_dir() for c in ("memory", "pids", "cpu")) else 0


def _probe(folder: Path) -> bool:
    probe = folder / f"{CGROUP_PREFIX}probe-{os.getpid()}-{threading.get_ident()}"
    try:
        probe.mkdir(exist_ok=True)
        probe.rmdir()
        return True
    except OSError:
        return False


def _own_path(hierarchy: str) -> str | None:
    """This process's cgroup path in a v1 controller's hierarchy ('' for v2's unified one)."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            number, controllers, path = line.split(":", 2)
            if (hierarchy == "" and number == "0" and controllers == "") or (
                hierarchy and hierarchy in controllers.split(",")
            ):
                return path
    except OSError:
        return None
    return None


@functools.cache
def _own_cgroup(controller: str) -> Path | None:
    """This process's cgroup folder for a v1 controller, if we may create children there."""
    base = CGROUP_ROOT / controller
    path = _own_path(controller)
    if not base.is_dir() or path is None:
        return None
    own = base / path.lstrip("/")
    return own if _probe(own) else None


_v2_base_lock = threading.Lock()
_v2_base_cache: dict[tuple[Path, str, int], tuple[Path | None, str]] = {}


def delegated_v2_base(root: Path | None = None) -> tuple[Path | None, str]:
    """The v2 cgroup under which sandbox groups are created, with the controllers enabled for
    children, or None and why not.

    It is ``$HARNESS_GYM_CGROUP`` (a delegated cgroup, e.g. of ``systemd-run --user --scope -p
    Delegate=yes``) or this process's own cgroup. The v2 rule "no processes in a cgroup that hands
    controllers to children" is met by moving this process into a ``harness-gym-host`` leaf, as
    systemd's delegation guide asks, when it is the only process there.
    """
    root = root or CGROUP_ROOT
    key = (root, os.environ.get(CGROUP_VARIABLE, ""), os.getpid())
    with _v2_base_lock:
        if key not in _v2_base_cache:
            _v2_base_cache[key] = _find_v2_base(root)
        return _v2_base_cache[key]


def _find_v2_base(root: Path) -> tuple[Path | None, str]:
    named = os.environ.get(CGROUP_VARIABLE)
    if named:
        base = (
            Path(named) if Path(named).is_absolute() and Path(named).is_relative_to(root) else root / named.lstrip("/")
        )
    else:
        own = _own_path("")
        if own is None:
            return None, "this process has no cgroup v2 membership"
        base = root / own.lstrip("/")
        if base.name == f"{CGROUP_PREFIX}host":  # moved there by an earlier call (or a parent)
            base = base.parent
    if not _probe(base):
        return None, (
            f"cgroup {base} is not delegated to this user (not writable); run under "
            f"`systemd-run --user --scope -p Delegate=yes` or set {CGROUP_VARIABLE} to a delegated cgroup"
        )
    return base, ""


def _enable_controllers(base: Path, wanted: set[str]) -> set[str]:
    """Enable ``wanted`` controllers for ``base``'s children; returns those that are enabled."""

    def enabled() -> set[str]:
        with contextlib.suppress(OSError):
            return {c.lstrip("+") for c in (base / "cgroup.subtree_control").read_text().split()}
        return set()

    try:
        available = set((base / "cgroup.controllers").read_text().split())
    except OSError:
        return set()
    missing = (wanted & available) - enabled()
    if not missing:
        return wanted & enabled()
    text = " ".join(f"+{c}" for c in sorted(missing))
    try:
        (base / "cgroup.subtree_control").write_text(text)
    except OSError as exc:
        if exc.errno != errno.EBUSY:
            return wanted & enabled()
        # processes live in base: move ourselves into a leaf if we are the only one, then retry
        try:
            members = {int(p) for p in (base / "cgroup.procs").read_text().split()}
        except (OSError, ValueError):
            return wanted & enabled()
        if members - {os.getpid()}:
            return wanted & enabled()
        with contextlib.suppress(OSError):
            leaf = base / f"{CGROUP_PREFIX}host"
            leaf.mkdir(exist_ok=True)
            (leaf / "cgroup.procs").write_text(str(os.getpid()))
            (base / "cgroup.subtree_control").write_text(text)
    return wanted & enabled()


@dataclass
class SandboxCgroups:
    """The cgroups one sandbox joins (one per v1 controller, or one v2 group) and the report."""

    groups: list[Path]
    report: LimitReport


def make_sandbox_cgroups(name: str, request: CgroupRequest, root: Path | None = None) -> SandboxCgroups:
    """Create the cgroups for a sandbox named ``name`` with the requested limits, where the host allows."""
    root = root or CGROUP_ROOT
    version = cgroup_version(root)
    report = LimitReport()
    groups: list[Path] = []
    if version == 2:
        files = _v2_files(request)
        base, why = delegated_v2_base(root)
        if base is None:
            report.not_enforced.update({limit: why for limit, _ in files.values()})
            return SandboxCgroups(groups, report)
        enabled = _enable_controllers(base, set(files))
        group = base / f"{CGROUP_PREFIX}{name}"
        try:
            group.mkdir(exist_ok=True)
        except OSError as exc:
            report.not_enforced.update({limit: f"cannot create {group}: {exc.strerror}" for limit, _ in files.values()})
            return SandboxCgroups(groups, report)
        groups.append(group)
        for controller, (limit, values) in files.items():
            if controller not in enabled:
                report.not_enforced[limit] = (
                    f"the {controller} controller is not available in cgroup v2 {base} "
                    f"(available: {_read(base / 'cgroup.controllers') or 'none'})"
                )
                continue
            if _write_all(group, values):
                report.enforced[limit] = "cgroup v2 " + ", ".join(f"{k}={v}" for k, v in values.items())
                if controller == "memory":
                    with contextlib.suppress(OSError):
                        (group / "memory.swap.max").write_text("0")
            else:
                report.not_enforced[limit] = f"cannot write the {controller} limit in {group}"
        return SandboxCgroups(groups, report)
    for controller, (limit, values) in _v1_files(request).items():
        own = _own_cgroup(controller) if version == 1 else None
        if own is None:
            report.not_enforced[limit] = f"no writable cgroup v1 {controller} controller on this host"
            continue
        group = own / f"{CGROUP_PREFIX}{name}"
        try:
            group.mkdir(exist_ok=True)
        except OSError as exc:
            report.not_enforced[limit] = f"cannot create {group}: {exc.strerror}"
            continue
        if _write_all(group, values):
            groups.append(group)
            report.enforced[limit] = "cgroup v1 " + ", ".join(f"{k}={v}" for k, v in values.items())
        else:
            remove_cgroup(group)
            report.not_enforced[limit] = f"cannot write the {controller} limit in {group}"
    freezer = make_freezer_group(name, root) if version == 1 else None
    return SandboxCgroups(groups + ([freezer] if freezer is not None else []), report)


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def _write_all(group: Path, values: Mapping[str, str]) -> bool:
    try:
        for key, value in values.items():
            (group / key).write_text(value)
    except OSError:
        return False
    return True


def _make_child(own: Path | None, name: str) -> Path | None:
    """``<own>/harness-gym-<name>``, made if missing; None where there is no ``own`` or it may not be made."""
    if own is None:
        return None
    group = own / f"{CGROUP_PREFIX}{name}"
    try:
        group.mkdir(exist_ok=True)
    except OSError:
        return None
    return group


def make_cgroup(controller: str, name: str, limits: dict[str, str]) -> Path | None:
    """Create ``<own v1 cgroup>/harness-gym-<name>`` with the given limit files, or None if not allowed."""
    group = _make_child(_own_cgroup(controller), name)
    if group is None:
        return None
    if not _write_all(group, limits):
        remove_cgroup(group)
        return None
    return group


@functools.cache
def _own_unified(root: Path) -> Path | None:
    """This process's cgroup in a hybrid host's cgroup2 hierarchy (``<root>/unified``), if we may
    create children there."""
    unified = root / "unified"
    path = _own_path("")
    if path is None or not (unified / "cgroup.controllers").exists():
        return None
    own = unified / path.lstrip("/")
    return own if _probe(own) else None


def make_freezer_group(name: str, root: Path | None = None) -> Path | None:
    """On a hybrid host (v1 controllers, cgroup2 mounted at ``<root>/unified``): a v2 group with no
    controllers that the sandbox joins only for v2's ``cgroup.freeze`` (its limits stay in v1), so
    that a reset can stop every process of it at once (:func:`kill_frozen`). None where there is none."""
    group = _make_child(_own_unified(root or CGROUP_ROOT), name)
    if group is None:
        return None
    if not (group / "cgroup.freeze").exists():  # a kernel before 5.2: no v2 freezer
        remove_cgroup(group)
        return None
    return group


def freezable(group: Path) -> bool:
    """Whether ``group`` is a v2 cgroup with a freezer (a real one: not a plain folder)."""
    return (group / "cgroup.freeze").exists()


FREEZE_TIMEOUT_S = 0.5  # how long kill_frozen waits for a group to freeze before the caller falls back


def kill_frozen(group: Path, keep: int, timeout_s: float | None = None) -> bool:
    """Stop every process of the v2 cgroup ``group`` but ``keep`` for good, without waiting for
    their exit: freeze the group, SIGKILL each member but ``keep`` while it is frozen, thaw it.

    True: when this returns, none of them can run user code again; each is dead or has SIGKILL
    pending (a frozen task leaves the freezer only to die). The list of members is complete: a group
    reads frozen only when every task is, and a frozen task is not inside fork(2), so no child is
    between its creation and its joining the group (a kill without the freeze could miss one; a
    vfork parent and a stopped or traced task count as frozen). ``keep`` is the sandbox's host-side
    bwrap: it reaps the rest once thawed (killed too, the pid namespace's init would be left a
    zombie to a host init that may never reap it). False: it could not be shown (the group did not
    freeze within ``timeout_s`` (default :data:`FREEZE_TIMEOUT_S`), a task stuck in the kernel; no freezer; a member that could not be
    signalled); the group is thawed and the caller must kill and wait as before."""
    try:
        events = os.open(group / "cgroup.events", os.O_RDONLY)
    except OSError:
        return False
    try:
        if not _write_control(group / "cgroup.freeze", "1"):
            return False
        try:
            return _frozen(events, FREEZE_TIMEOUT_S if timeout_s is None else timeout_s) and _kill_members(group, keep)
        finally:
            _write_control(group / "cgroup.freeze", "0")
    finally:
        os.close(events)


def _write_control(path: Path, value: str) -> bool:
    try:
        handle = os.open(path, os.O_WRONLY)
    except OSError:
        return False
    try:
        os.write(handle, value.encode())
        return True
    except OSError:
        return False
    finally:
        os.close(handle)


def _frozen(events: int, timeout_s: float) -> bool:
    """Wait until ``cgroup.events`` (open as ``events``) says frozen or empty; the kernel wakes a
    poll for POLLPRI at each change (a 10 ms timeout is only a safety net)."""
    deadline = time.monotonic() + timeout_s
    poller = select.poll()
    poller.register(events, select.POLLPRI)
    while True:
        try:
            text = os.pread(events, 512, 0).decode()
        except OSError:
            return False
        state = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
        if state.get("frozen") == "1" or state.get("populated") == "0":
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        poller.poll(min(remaining, 0.01) * 1000)


def _kill_members(group: Path, keep: int) -> bool:
    """SIGKILL every process of a frozen ``group`` but ``keep``, each through a pidfd (it pins the
    pid: a member that exited meanwhile cannot be confused with a new process given its number)."""
    try:
        pids = [int(p) for p in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return False
    for pid in pids:
        if pid == keep:
            continue
        try:
            handle = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # gone already
        except OSError:
            return False
        try:
            if _in_group(pid, group.name):
                signal.pidfd_send_signal(handle, signal.SIGKILL)
        except ProcessLookupError:
            continue
        except OSError:
            return False
        finally:
            os.close(handle)
    return True


def _in_group(pid: int, name: str) -> bool:
    """Whether process ``pid`` is in the v2 cgroup named ``name`` (sandbox group names are unique)."""
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return False
    return any(line.startswith("0::") and line.endswith("/" + name) for line in lines)


def remove_cgroup(group: Path) -> None:
    """Kill what is left in a cgroup and remove it."""
    with contextlib.suppress(OSError):
        (group / "cgroup.kill").write_text("1")  # v2: kills the whole group atomically
    procs = group / "cgroup.procs"
    for _ in range(50):
        try:
            pids = [int(p) for p in procs.read_text().split()]
        except (OSError, ValueError):
            pids = []
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if exc.errno != errno.EBUSY:
                return  # not a cgroup filesystem (or not ours): nothing a retry would change
            time.sleep(0.02)


# ----------------------------------------------------------------------------- workspaces


def new_workspace(size_mb: int | None, root: str | Path | None = None) -> tuple[Path, bool]:
    """An empty folder for an episode; a size-limited tmpfs when we may mount one. Registered as
    owned by this process (the caller calls :func:`release_workspace`)."""
    path = temporary_folder("harness-gym-ws-", root or shared_temp_dir())  # recorded before it exists
    if size_mb and is_root():
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={int(size_mb)}m,mode=0755", "tmpfs", str(path)], capture_output=True
        )
        if result.returncode == 0:
            return path, True
    return path, False


def private_folder(prefix: str, parent: str | Path | None = None) -> Path:
    """A 0700 temporary folder owned (registered) by this process: control and grader folders,
    grading payloads, layer staging. Every host folder a run makes goes through here (or
    :func:`registered_folder`), so a ``kill -9`` leaves a registry entry, never the folder."""
    return temporary_folder(prefix, parent or shared_temp_dir())  # recorded (registered) before it exists


@contextlib.contextmanager
def registered_folder(prefix: str, parent: str | Path | None = None) -> Iterator[Path]:
    """A :func:`private_folder` for the duration of a block, removed (and unregistered) after it."""
    path = private_folder(prefix, parent)
    try:
        yield path
    finally:
        release_workspace(path)


@contextlib.contextmanager
def grader_folder() -> Iterator[str]:
    """A private folder for grader files, registered so that a crash mid-grading leaves nothing."""
    with registered_folder("harness-gym-grader-") as path:
        yield str(path)


def release_workspace(path: Path) -> None:
    """Unmount (if it is a mount) and delete a workspace or control folder."""
    if layers.is_layered(path):  # a copy-on-write workspace: its whole episode folder goes
        layers.release(path)
    else:
        # the episode folder of a layered workspace (recorded before the workspace in it): its overlay
        # is a mount below it, detached first, or removing the folder would stop at it
        layers.detach_episode_mounts(path)
        if os.path.ismount(path):
            subprocess.run(["umount", "-l", str(path)], capture_output=True)
        if path.exists():
            remove_tree(path)
    if _registry is not None and _registry.pid == os.getpid():
        _registry.discard("dir", path)


track_temporary_folders(lambda path: registry().add("dir", path), lambda path: registry().discard("dir", path))


def chown_tree(path: Path, uid: int, gid: int) -> None:
    """Give a whole folder to the sandbox uid (it must write its workspace)."""
    os.chown(path, uid, gid)
    for current, dirs, files in os.walk(path):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                os.lchown(os.path.join(current, name), uid, gid)


# ----------------------------------------------------------------------------- what this host allows


@functools.cache
def user_namespaces() -> tuple[bool, str]:
    """Whether bubblewrap can make a user namespace here (unprivileged users need the kernel to allow it)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False, "bubblewrap is not installed"
    argv = [bwrap, "--unshare-user", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--", "/bin/true"]
    try:
        result = subprocess.run(argv, capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, str(exc)
    if result.returncode != 0:
        return False, result.stderr.decode(errors="replace").strip() or f"bwrap exited {result.returncode}"
    return True, ""


@dataclass(frozen=True)
class Capabilities:
    """What isolation this host allows."""

    dedicated_uid: bool
    cgroup_memory: bool
    cgroup_pids: bool
    tmpfs_workspace: bool
    cgroup_version: int = 1
    cgroup_cpu: bool = False


@functools.cache
def capabilities() -> Capabilities:
    mountable = False
    if is_root() and shutil.which("mount"):
        path, mounted = new_workspace(1)
        mountable = mounted
        release_workspace(path)
    probe = make_sandbox_cgroups(f"probe-{os.getpid()}", CgroupRequest(memory_mb=64, max_processes=64, cpus=1.0))
    for group in probe.groups:
        remove_cgroup(group)
    held = probe.report.enforced
    return Capabilities(is_root(), "memory" in held, "processes" in held, mountable, cgroup_version(), "cpu" in held)


def remove_tree(path: Path) -> None:
    """Delete a workspace even where the agent removed write or search permissions."""

    def make_writable_and_retry(function: Any, target: str, _exc: Any) -> None:
        parent = os.path.dirname(target)
        for item in (parent, target):
            with contextlib.suppress(OSError):
                os.chmod(item, os.stat(item).st_mode | stat.S_IRWXU)
        function(target)

    try:
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=make_writable_and_retry)
        else:
            shutil.rmtree(path, onerror=make_writable_and_retry)
    except OSError:
        shutil.rmtree(path, ignore_errors=True)
