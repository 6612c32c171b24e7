"""``harness-gym doctor``: can this machine run sandboxed episodes, and which limits hold here?

Each check gives ``ok``, ``warn`` (runs, but something is weaker than asked) or ``fail`` (a run
would break). The trainer's launcher runs the same checks on every Ray node before training
(:func:`trainers.launch_plan.check_nodes`). ``--clean`` first reclaims what killed harness-gym
processes left behind (workspaces, control and grader folders, cgroups, containers).
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import socket
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from harness_gym.external.install import list_installs
from harness_gym.sandboxes import isolation, spare
from harness_gym.sandboxes.base import SandboxError
from harness_gym.sandboxes.bubblewrap import BubblewrapSandbox
from harness_gym.sandboxes.docker import remove_orphaned_containers
from harness_gym.sandboxes.docker_support import docker_client
from harness_gym.sandboxes.options import DEFAULTS
from harness_gym.worlds import list_worlds

OK, WARN, FAIL = "ok", "warn", "fail"
MIN_MEMORY_PER_WORKER_MB = 256  # below this a typical episode (python, git, a test run) does not fit
# an environment holds its sandbox and a warm spare; measured on an idle sandbox (bwrap, its init,
# bash, the tool server): its processes, and the descriptors its owner process keeps open for it
SANDBOXES_PER_ENVIRONMENT = 2
IDLE_PROCESSES_PER_SANDBOX = 5  # measured 4: bwrap, its init, bash, the tool server
FDS_PER_SANDBOX = isolation.DESCRIPTORS_PER_SANDBOX + 2  # in the owner process (measured 6), with room
HOST_FDS_PER_SANDBOX = 32  # host-wide (fs.file-max): the owner's and the sandbox processes' own (measured 28)
IDLE_MEMORY_MB_PER_SANDBOX = (
    10  # measured 9.0 charged to its cgroup, 8.4 PSS, at 512 idle (benchmarks/idle_sandboxes.py)
)
NAMESPACES_PER_SANDBOX = 1  # of each kind (user, mount, pid, net, ipc, uts, cgroup)
HOST_MOUNTS_PER_SANDBOX = 2  # as root: a plain tmpfs workspace is 1 host mount; copy-on-write ones 0 (own namespace)


@dataclass(frozen=True)
class Check:
    name: str
    status: str
    detail: str


def run_checks(
    workers: int = 1, docker: bool | None = None, clean: bool = False, sandboxes: int | None = None
) -> list[Check]:
    """Every check, for ``workers`` sandboxes at once. ``docker``: True requires an engine, None
    reports it, False skips it. ``sandboxes``: a target number of concurrent environments the
    capacity check must reach (fail below it)."""
    checks: list[Check] = []
    if clean:
        checks.append(_clean())
    checks += [_state_folder(), _leftovers(), _bubblewrap()]
    checks += _sandbox_and_limits()
    checks += [_disk(workers), _memory(workers), _processes(workers), _uid_pool(workers), _file_descriptors(workers)]
    checks.append(_guard("capacity", lambda: capacity_check(read_host_limits(), sandboxes)))
    checks += [_worlds(), _external()]
    if docker is not False:
        checks.append(_docker(required=bool(docker)))
    return checks


def _guard(name: str, check: Callable[[], Check]) -> Check:
    try:
        return check()
    except Exception as exc:  # a check must report, not crash the doctor
        return Check(name, FAIL, f"{type(exc).__name__}: {exc}")


def _clean() -> Check:
    def run() -> Check:
        done = isolation.reclaim_dead_owners() + isolation.reclaim_layer_cache()
        removed = _orphaned_containers()
        lines = done + ([f"removed {removed} orphaned container(s)"] if removed else [])
        return Check("clean", OK, "; ".join(lines) if lines else "nothing left behind by dead processes")

    return _guard("clean", run)


def _orphaned_containers() -> int:
    try:
        return remove_orphaned_containers(docker_client(os.environ.get("DOCKER_HOST")))
    except Exception:
        return 0


def _state_folder() -> Check:
    def run() -> Check:
        folder = isolation.state_dir()
        return Check("host-wide state", OK, f"{folder} (leases and the ownership registry, whatever TMPDIR)")

    return _guard("host-wide state", run)


def _leftovers() -> Check:
    def run() -> Check:
        dead = [
            entry.stem.partition("-")[0]
            for entry in isolation.dead_owner_logs()
            if any(isolation.read_registry(entry.read_text("utf-8", "surrogateescape")).values())
        ]
        if dead:
            return Check("leftovers", WARN, f"dead processes {dead} left resources; `harness-gym doctor --clean`")
        return Check("leftovers", OK, "none")

    return _guard("leftovers", run)


def _bubblewrap() -> Check:
    def run() -> Check:
        path = shutil.which("bwrap")
        if path is None:
            return Check("bubblewrap", FAIL, "bwrap is not on PATH: apt-get install bubblewrap (or use Docker)")
        works, why = isolation.user_namespaces()
        if not works:
            return Check(
                "user namespaces",
                FAIL,
                f"bwrap cannot create a user namespace: {why} (enable kernel.unprivileged_userns_clone / "
                "user.max_user_namespaces, or allow bwrap in AppArmor)",
            )
        who = "root: a dedicated host uid per sandbox" if isolation.is_root() else f"uid {os.geteuid()}, unprivileged"
        return Check("bubblewrap", OK, f"{path}; user namespaces work ({who})")

    return _guard("bubblewrap", run)


def _sandbox_and_limits() -> list[Check]:
    """Start one real sandbox with the default limits: does it answer, and which limits hold?"""
    version = isolation.cgroup_version()
    cgroups = Check("cgroups", OK, {0: "none found", 1: "v1 (or hybrid)", 2: "v2 (unified)"}[version])
    if shutil.which("bwrap") is None:
        return [cgroups]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with BubblewrapSandbox(cpus=1.0) as box:
                box.start(box.new_workspace(), "/workspace")
                answer = box.run("echo sandbox-ok").output.strip()
                limits = box.limits
    except Exception as exc:
        return [cgroups, Check("sandbox", FAIL, f"a bubblewrap sandbox does not start: {exc}")]
    if answer != "sandbox-ok":
        return [cgroups, Check("sandbox", FAIL, f"the sandbox answered {answer!r}")]
    out = [cgroups, Check("sandbox", OK, "a bubblewrap sandbox starts and runs commands")]
    for name, how in limits.enforced.items():
        out.append(Check(f"limit: {name}", OK, how))
    for name, why in limits.not_enforced.items():
        out.append(Check(f"limit: {name}", WARN, f"NOT ENFORCED: {why}"))
    return out


def _disk(workers: int) -> Check:
    def run() -> Check:
        folder = isolation.shared_temp_dir()
        stats = os.statvfs(folder)
        free_mb = stats.f_bavail * stats.f_frsize >> 20
        need_mb = workers * DEFAULTS.workspace_size_mb
        status = OK if free_mb >= need_mb else FAIL if free_mb < workers * 64 else WARN
        return Check(
            "disk", status, f"{free_mb} MiB free in {folder}; {workers} workspaces may use up to {need_mb} MiB"
        )

    return _guard("disk", run)


def _memory(workers: int) -> Check:
    def run() -> Check:
        info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        available_mb = int(info["MemAvailable"].split()[0]) >> 10
        floor_mb = workers * MIN_MEMORY_PER_WORKER_MB
        ceiling_mb = workers * DEFAULTS.memory_mb
        status = FAIL if available_mb < floor_mb else OK if available_mb >= ceiling_mb else WARN
        return Check(
            "memory",
            status,
            f"{available_mb} MiB available; {workers} sandboxes need at least {floor_mb} MiB and may use up to "
            f"{ceiling_mb} MiB (memory_mb={DEFAULTS.memory_mb} each)",
        )

    return _guard("memory", run)


def _processes(workers: int) -> Check:
    def run() -> Check:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
        threads_max = int(Path("/proc/sys/kernel/threads-max").read_text())
        idle = workers * SANDBOXES_PER_ENVIRONMENT * IDLE_PROCESSES_PER_SANDBOX
        need = workers * DEFAULTS.max_processes
        limit = min(pid_max, threads_max)
        status = FAIL if idle >= limit else OK if need < limit // 2 else WARN
        return Check(
            "processes",
            status,
            f"kernel.pid_max {pid_max}, threads-max {threads_max}; {workers} environments hold about {idle} "
            f"processes idle (sandbox and spare) and may start up to {need}"
            + ("; raise kernel.pid_max (sysctl -w kernel.pid_max=4194304)" if status != OK else ""),
        )

    return _guard("processes", run)


def _uid_pool(workers: int) -> Check:
    """Each sandbox (and each warm spare) holds a uid of the pool while it lives."""

    def run() -> Check:
        pool = isolation.uid_pool()
        need = workers * SANDBOXES_PER_ENVIRONMENT
        where = f"uids {pool.start}-{pool.stop - 1} ({len(pool)})"
        if not isolation.is_root():
            return Check("uid pool", OK, f"not root: sandboxes run as the caller, the pool ({where}) is unused")
        clashes = _id_ranges_overlapping(pool)
        if need > len(pool):
            return Check(
                "uid pool",
                FAIL,
                f"{where}; {workers} environments need {need} (a sandbox and a spare each): set "
                f"{isolation.UID_COUNT_VARIABLE}",
            )
        if clashes:
            return Check("uid pool", WARN, f"{where} overlaps {', '.join(clashes)}: set {isolation.UID_BASE_VARIABLE}")
        return Check("uid pool", OK, f"{where}; {workers} environments need {need}")

    return _guard("uid pool", run)


def _id_ranges_overlapping(pool: range) -> list[str]:
    """Accounts and subordinate-id ranges of this host that fall inside the sandbox uid pool."""
    found = []
    for path in ("/etc/subuid", "/etc/subgid"):
        with contextlib.suppress(OSError):
            for line in Path(path).read_text().splitlines():
                parts = line.split(":")
                if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
                    first, count = int(parts[1]), int(parts[2])
                    if first < pool.stop and pool.start < first + count:
                        found.append(f"{path} range of {parts[0]}")
    with contextlib.suppress(OSError):
        for line in Path("/etc/passwd").read_text().splitlines():
            parts = line.split(":")
            if len(parts) > 2 and parts[2].isdigit() and int(parts[2]) in pool:
                found.append(f"user {parts[0]}")
    return found


def _file_descriptors(workers: int) -> Check:
    """The descriptors the owning process keeps per sandbox (pipes, status socket, uid lock)."""

    def run() -> Check:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        need = workers * SANDBOXES_PER_ENVIRONMENT * FDS_PER_SANDBOX + 256
        file_max = int(Path("/proc/sys/fs/file-max").read_text())
        detail = f"RLIMIT_NOFILE {soft} (hard {hard}), fs.file-max {file_max}; {workers} environments in one process need about {need}"
        if need > min(hard, file_max):
            return Check("file descriptors", FAIL, detail + ": raise the hard limit (ulimit -Hn) or fs.file-max")
        if need > soft:  # the first sandbox raises the soft limit to the hard one
            return Check("file descriptors", OK, detail + f" (the soft limit is raised to {hard} at the first sandbox)")
        return Check("file descriptors", OK, detail)

    return _guard("file descriptors", run)


# ----------------------------------------------------------------------------- capacity


@dataclass(frozen=True)
class HostLimits:
    """The host limits concurrent sandboxes consume, each as headroom left now (what already runs
    is subtracted). ``None``: no such limit here (or it does not bind this caller)."""

    pid_max: int | None
    threads_max: int | None
    cgroup_pids: tuple[str, int] | None  # (the cgroup, pids.max - pids.current) of this process
    nproc: int | None  # RLIMIT_NPROC headroom (binds only when not root: every sandbox runs as the caller)
    descriptors: int  # RLIMIT_NOFILE hard headroom of one owner process
    file_max: int | None
    memory_mb: int
    uid_pool: int | None  # sandbox uids (root only)
    user_namespaces: int | None  # per-user limit (binds when not root: every sandbox's namespace is the caller's)
    mounts: int | None  # fs.mount-max less this mount namespace's mounts (root: workspaces are host mounts)
    root: bool
    spares: bool


def _number(path: str) -> int | None:
    try:
        text = Path(path).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None


def _own_cgroup_pids() -> tuple[str, int] | None:
    """The tightest pids.max (less pids.current) over this process's cgroup and its ancestors, v1 or v2."""
    best: tuple[str, int] | None = None
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                mount = isolation.CGROUP_ROOT
            elif "pids" in controllers.split(","):
                mount = isolation.CGROUP_ROOT / "pids"
            else:
                continue
            folder = mount / path.lstrip("/")
            while folder != mount.parent:
                limit, current = _number(str(folder / "pids.max")), _number(str(folder / "pids.current"))
                if limit is not None and current is not None and (best is None or limit - current < best[1]):
                    best = (str(folder), limit - current)
                if folder == mount:
                    break
                folder = folder.parent
    return best


def read_host_limits() -> HostLimits:
    """This host's limits, as headroom for new sandboxes."""
    # every thread holds a pid too: field 4 of loadavg is running/total threads (processes if unreadable)
    threads = sum(entry.isdigit() for entry in os.listdir("/proc"))
    with contextlib.suppress(OSError, IndexError, ValueError):
        threads = int(Path("/proc/loadavg").read_text().split()[3].partition("/")[2])
    pid_max, threads_max = _number("/proc/sys/kernel/pid_max"), _number("/proc/sys/kernel/threads-max")
    root = isolation.is_root()
    nproc = None
    if not root:
        soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        if soft != resource.RLIM_INFINITY:
            mine = sum(1 for entry in Path("/proc").iterdir() if entry.name.isdigit() and _owned(entry))
            nproc = soft - mine
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nr_open = _number("/proc/sys/fs/nr_open") or 1_048_576
    per_process = nr_open if hard == resource.RLIM_INFINITY else min(hard, nr_open)
    file_nr = Path("/proc/sys/fs/file-nr").read_text().split() if Path("/proc/sys/fs/file-nr").exists() else []
    file_max = int(file_nr[2]) - int(file_nr[0]) if len(file_nr) == 3 else _number("/proc/sys/fs/file-max")
    info = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
    user_ns = _number("/proc/sys/user/max_user_namespaces")
    return HostLimits(
        pid_max=None if pid_max is None else pid_max - threads,
        threads_max=None if threads_max is None else threads_max - threads,
        cgroup_pids=_own_cgroup_pids(),
        nproc=nproc,
        descriptors=per_process - len(os.listdir("/proc/self/fd")),
        file_max=file_max,
        memory_mb=int(info["MemAvailable"].split()[0]) >> 10,
        uid_pool=len(isolation.uid_pool()) if root else None,
        user_namespaces=None if root else user_ns,
        mounts=_mount_headroom() if root else None,
        root=root,
        spares=spare.enabled(),
    )


def _mount_headroom() -> int | None:
    limit = _number("/proc/sys/fs/mount-max")
    if limit is None:
        return None
    try:
        return limit - len(Path("/proc/self/mountinfo").read_text().splitlines())
    except OSError:
        return None


def _owned(entry: Path) -> bool:
    with contextlib.suppress(OSError):
        return entry.stat().st_uid == os.getuid()
    return False


@dataclass(frozen=True)
class Bound:
    """One limit: how many environments it allows and what raises it."""

    name: str
    headroom: int
    per_environment: int
    environments: int
    fix: str


def capacity(limits: HostLimits) -> list[Bound]:
    """How many concurrent environments (a sandbox and, with spares on, its warm spare each) each
    limit allows, the tightest first: the first binds."""
    boxes = SANDBOXES_PER_ENVIRONMENT if limits.spares else 1
    rows: list[tuple[str, int | None, int, str]] = [
        ("kernel.pid_max", limits.pid_max, IDLE_PROCESSES_PER_SANDBOX, "sysctl -w kernel.pid_max=4194304"),
        ("kernel.threads-max", limits.threads_max, IDLE_PROCESSES_PER_SANDBOX, "sysctl -w kernel.threads-max=4194304"),
        (
            f"cgroup pids.max ({limits.cgroup_pids[0]})" if limits.cgroup_pids else "cgroup pids.max",
            limits.cgroup_pids[1] if limits.cgroup_pids else None,
            IDLE_PROCESSES_PER_SANDBOX,
            "raise that cgroup's pids.max (TasksMax= of the systemd unit or slice, or the job's pids limit)",
        ),
        ("RLIMIT_NPROC", limits.nproc, IDLE_PROCESSES_PER_SANDBOX, "ulimit -u (nproc in limits.conf), or run as root"),
        (
            "RLIMIT_NOFILE (hard, one owner process)",
            limits.descriptors,
            FDS_PER_SANDBOX,
            "ulimit -Hn (LimitNOFILE= in systemd, nofile in limits.conf), or spread environments over processes",
        ),
        ("fs.file-max", limits.file_max, HOST_FDS_PER_SANDBOX, "sysctl -w fs.file-max=9223372036854775807"),
        ("memory", limits.memory_mb, IDLE_MEMORY_MB_PER_SANDBOX, "more memory, or fewer environments on this node"),
        (
            "uid pool",
            limits.uid_pool,
            1,
            f"a larger {isolation.UID_COUNT_VARIABLE} (uids free of accounts and /etc/subuid ranges)",
        ),
        (
            "fs.mount-max",
            limits.mounts,
            HOST_MOUNTS_PER_SANDBOX,
            "sysctl -w fs.mount-max=1000000 (each workspace is a tmpfs mount in this mount namespace)",
        ),
        (
            "user.max_user_namespaces",
            limits.user_namespaces,
            NAMESPACES_PER_SANDBOX,
            "sysctl -w user.max_user_namespaces=... (mount, pid, net, ipc, uts namespaces alike), or run as root "
            "(a uid per sandbox)",
        ),
    ]
    bounds = [
        Bound(name, max(headroom, 0), per * boxes, max(headroom, 0) // (per * boxes), fix)
        for name, headroom, per, fix in rows
        if headroom is not None
    ]
    return sorted(bounds, key=lambda bound: bound.environments)


def capacity_check(limits: HostLimits, target: int | None = None) -> Check:
    """The concurrent environments this host supports, the limit that binds first and its fix;
    ``fail`` below ``target``."""
    bounds = capacity(limits)
    first = bounds[0]
    spares = "with its warm spare" if limits.spares else "no spare"
    detail = (
        f"about {first.environments} concurrent environments (a sandbox {spares} each); binds first: "
        f"{first.name} ({first.headroom} left, {first.per_environment} per environment): {first.fix}; then "
        + ", ".join(f"{bound.name} {bound.environments}" for bound in bounds[1:4])
    )
    if target is None:
        return Check("capacity", OK, detail)
    short = [bound for bound in bounds if bound.environments < target]
    if not short:
        return Check("capacity", OK, f"{target} environments fit; " + detail)
    fixes = "; ".join(f"{bound.name} allows {bound.environments}: {bound.fix}" for bound in short)
    return Check("capacity", FAIL, f"{target} environments do not fit: {fixes}")


def _worlds() -> Check:
    """Root filesystems (``harness-gym worlds``) built on this machine; a suite naming an unbuilt one cannot run."""

    def run() -> Check:
        try:
            rows = list_worlds()
        except Exception as exc:  # a broken world definition stops only the suites that use it
            return Check("worlds", WARN, f"cannot list worlds: {type(exc).__name__}: {exc}")
        missing = [r["name"] for r in rows if not r["built"]]
        built = [r["name"] for r in rows if r["built"]]
        if missing:
            return Check("worlds", WARN, f"built: {built or 'none'}; not built: {missing} (`harness-gym worlds build`)")
        return Check("worlds", OK, f"built: {built or 'none'}")

    return _guard("worlds", run)


def _external() -> Check:
    """Real agent CLIs (``harness-gym external install``) installed on this machine; a missing one
    only stops the runs that use it."""

    def run() -> Check:
        rows = list_installs()
        done = sorted({r["id"] for r in rows if r["installed"]})
        missing = sorted({r["id"] for r in rows if not r["installed"]})
        detail = f"installed: {done or 'none'}"
        if missing:
            detail += f"; not installed: {missing} (`harness-gym external install NAME`)"
        return Check("external CLIs", OK, detail)

    return _guard("external CLIs", run)


def _docker(required: bool) -> Check:
    def run() -> Check:
        if shutil.which("docker") is None:
            return Check("docker", FAIL if required else OK, "no docker client (only tasks with an image need it)")
        try:
            docker_client(os.environ.get("DOCKER_HOST"))
        except SandboxError as exc:
            return Check("docker", FAIL if required else WARN, f"{exc} (only tasks with an image need it)")
        return Check("docker", OK, f"engine reachable at {os.environ.get('DOCKER_HOST', 'the default socket')}")

    return _guard("docker", run)


def failed(checks: Sequence[Check]) -> list[Check]:
    return [c for c in checks if c.status == FAIL]


def table(checks: Sequence[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = [f"harness-gym doctor on {socket.gethostname()}", f"{'check':<{width}}  status  detail"]
    lines += [f"{c.name:<{width}}  {c.status:<6}  {c.detail}" for c in checks]
    return "\n".join(lines)


def as_records(checks: Sequence[Check]) -> list[dict[str, str]]:
    return [asdict(c) for c in checks]
