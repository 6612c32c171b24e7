"""Host-side isolation helpers for local sandboxes: a dedicated host uid per sandbox, cgroup
limits, and size-limited workspaces. Each degrades gracefully where the host does not allow it
(not root, read-only cgroups, no mount permission); :func:`capabilities` says what is in force.

Why a dedicated uid: RLIMIT_NPROC never binds root, and it counts processes per user. Running each
sandbox as its own unprivileged host uid (it still appears as root inside its user namespace)
makes the process limit real and per sandbox.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

UID_BASE = 231_072  # above typical system and subordinate-id ranges
UID_COUNT = 4096
LOCK_DIR = Path(tempfile.gettempdir()) / "harness-gym-locks"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_PREFIX = "harness-gym-"


def is_root() -> bool:
    return os.geteuid() == 0


@dataclass
class UidLease:
    """Exclusive use of one host uid, held by an flock for the sandbox's lifetime (across processes)."""

    uid: int
    handle: int

    @classmethod
    def acquire(cls, start: int = 0) -> UidLease:
        LOCK_DIR.mkdir(mode=0o700, exist_ok=True)
        for offset in range(UID_COUNT):
            uid = UID_BASE + (start + offset) % UID_COUNT
            handle = os.open(LOCK_DIR / f"{uid}.lock", os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(handle)
                continue
            lease = cls(uid, handle)
            lease.reclaim()
            return lease
        raise RuntimeError(f"all {UID_COUNT} sandbox uids are in use")

    def record(self, **resources: str | None) -> None:
        """Remember what this lease created, so a later owner can clean up after a crash."""
        os.ftruncate(self.handle, 0)
        os.pwrite(self.handle, json.dumps(resources).encode(), 0)

    def reclaim(self) -> None:
        """Clean up what a crashed previous holder of this uid left behind."""
        try:
            data = json.loads(os.pread(self.handle, 65536, 0) or b"{}")
        except (OSError, ValueError):
            data = {}
        if not any(data.values()):
            return  # released cleanly
        kill_uid(self.uid)
        for key in ("cgroup_memory", "cgroup_pids"):
            if data.get(key):
                remove_cgroup(Path(data[key]))
        for key in ("workspace", "control"):
            if data.get(key):
                release_workspace(Path(data[key]))
        self.record()

    def release(self) -> None:
        with contextlib.suppress(OSError):
            self.record()
            os.close(self.handle)


def kill_uid(uid: int) -> None:
    """Kill every process of a sandbox uid (stragglers of a crashed owner)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        subprocess.run(["pkill", "-KILL", "-U", str(uid)], capture_output=True, timeout=10)


# ----------------------------------------------------------------------------- cgroups (v1)


@functools.cache
def _own_cgroup(controller: str) -> Path | None:
    """This process's cgroup folder for a v1 controller, if we may create children there."""
    base = CGROUP_ROOT / controller
    if not base.is_dir():
        return None
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controller in controllers.split(","):
                own = base / path.lstrip("/")
                probe = own / f"{CGROUP_PREFIX}probe-{os.getpid()}"
                probe.mkdir(exist_ok=True)
                probe.rmdir()
                return own
    except OSError:
        return None
    return None


def make_cgroup(controller: str, name: str, limits: dict[str, str]) -> Path | None:
    """Create ``<own cgroup>/harness-gym-<name>`` with the given limit files, or None if not allowed."""
    own = _own_cgroup(controller)
    if own is None:
        return None
    group = own / f"{CGROUP_PREFIX}{name}"
    try:
        group.mkdir(exist_ok=True)
        for key, value in limits.items():
            (group / key).write_text(value)
    except OSError:
        remove_cgroup(group)
        return None
    return group


def remove_cgroup(group: Path) -> None:
    """Kill what is left in a cgroup and remove it."""
    procs = group / "cgroup.procs"
    for _ in range(50):
        try:
            pids = [int(p) for p in procs.read_text().split()]
        except OSError:
            pids = []
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            import time

            time.sleep(0.02)


# ----------------------------------------------------------------------------- workspaces


def new_workspace(size_mb: int | None, root: str | Path | None = None) -> tuple[Path, bool]:
    """An empty folder for an episode; a size-limited tmpfs when we may mount one."""
    path = Path(tempfile.mkdtemp(prefix="harness-gym-ws-", dir=root))
    if size_mb and is_root():
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={int(size_mb)}m,mode=0755", "tmpfs", str(path)], capture_output=True
        )
        if result.returncode == 0:
            return path, True
    return path, False


def release_workspace(path: Path) -> None:
    """Unmount (if it is a mount) and delete a workspace or control folder."""
    from harness_gym.sandboxes import layers

    if layers.is_layered(path):  # a copy-on-write workspace: its whole episode folder goes
        layers.release(path)
        return
    if not path.exists():
        return
    if os.path.ismount(path):
        subprocess.run(["umount", "-l", str(path)], capture_output=True)
    from harness_gym.sandboxes.base import remove_tree

    remove_tree(path)


def chown_tree(path: Path, uid: int, gid: int) -> None:
    """Give a whole folder to the sandbox uid (it must write its workspace)."""
    os.chown(path, uid, gid)
    for current, dirs, files in os.walk(path):
        for name in dirs + files:
            with contextlib.suppress(OSError):
                os.lchown(os.path.join(current, name), uid, gid)


@dataclass(frozen=True)
class Capabilities:
    """What isolation this host allows."""

    dedicated_uid: bool
    cgroup_memory: bool
    cgroup_pids: bool
    tmpfs_workspace: bool


@functools.cache
def capabilities() -> Capabilities:
    mountable = False
    if is_root() and shutil.which("mount"):
        path, mounted = new_workspace(1)
        mountable = mounted
        release_workspace(path)
    return Capabilities(is_root(), _own_cgroup("memory") is not None, _own_cgroup("pids") is not None, mountable)
