"""A local sandbox on bubblewrap: read-only system, writable workspace, no network, own pid namespace.

One ``bwrap`` process per episode runs a persistent bash (protocol in :mod:`.shell`). As root, each
sandbox also gets a dedicated unprivileged host uid (root inside its user namespace), which makes
RLIMIT_NPROC bind, plus memory and pids cgroups and a size-limited tmpfs workspace where the host
allows them. Killing the bwrap process group ends the pid namespace, so nothing the agent started
survives a timeout, a reset or ``close()``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import warnings
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness_gym.sandboxes import isolation, layers, seccomp
from harness_gym.sandboxes.base import (
    BIN_DIR,
    GRADER_INIT_DIR,
    GRADER_KEY_DIR,
    HARNESS_DIR,
    ORIGINAL_DIR,
    SANDBOX_HOME,
    TOOLS_DIR,
    CommandResult,
    SandboxError,
    grader_environment,
    grader_guard,
    grader_init_dir,
    register_backend,
    sealed_binaries_dir,
    shadowed_paths,
    tool_scripts_dir,
)
from harness_gym.sandboxes.options import DEFAULTS
from harness_gym.sandboxes.shell import ShellSandbox, kill_process_group, run_oneshot

# Host folders made visible read-only inside the sandbox (only those that exist).
SYSTEM_DIRS: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Folders that are private and empty in every sandbox.
PRIVATE_TMPFS: tuple[str, ...] = ("/tmp", "/root", "/home", "/run", "/var/tmp")
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

_RESERVED = ("/usr", "/bin", "/sbin", "/lib", "/etc", "/proc", "/dev", "/sys", HARNESS_DIR)
_group_names = itertools.count()


class SandboxLimitWarning(UserWarning):
    """A sandbox limit that was asked for cannot be enforced on this host."""


def bubblewrap_available() -> bool:
    """True when the ``bwrap`` executable is on PATH."""
    return shutil.which("bwrap") is not None


def _require_bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxError(
            "bubblewrap is not installed, and harness_gym runs agent commands only inside a sandbox. "
            "Install it with `apt-get install -y bubblewrap` (Debian/Ubuntu), `dnf install bubblewrap` "
            "(Fedora) or `pacman -S bubblewrap` (Arch), or choose sandbox='docker'."
        )
    return path


def _seccomp_fd() -> int:
    """A fresh, inheritable file descriptor holding the seccomp program, for ``bwrap --seccomp``."""
    fd = os.memfd_create("harness-gym-seccomp", 0)
    os.write(fd, seccomp.bpf_program())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class BubblewrapSandbox(ShellSandbox):
    """A persistent bash inside bubblewrap.

    Args:
        command_timeout_s: default wall-clock limit per command (the whole process tree is killed).
        output_limit_chars: output beyond this is elided from the middle.
        memory_mb: the memory cgroup limit where available, and the address-space limit per
            process unless ``address_space_mb`` is given.
        address_space_mb: the per-process address-space limit (RLIMIT_AS), when it must be larger
            than the memory cap (Node CLIs reserve far more address space than they use).
        max_processes: processes per sandbox (RLIMIT_NPROC on a dedicated uid; pids cgroup).
        cpus: CPU quota in cores (cgroup ``cpu``), None for no quota.
        strict_limits: refuse to start when a limit cannot be enforced on this host (otherwise the
            sandbox warns once and reports it in :attr:`limits`).
        max_file_mb, max_open_files, cpu_time_s: RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CPU.
        workspace_size_mb: size of the tmpfs workspace (as root); tmp_size_mb: size of /tmp and home.
        extra_ro_binds: more host folders to show read-only, ``{host_path: sandbox_path}``.
        system_root: a world's root filesystem whose /usr, /bin, /lib and /etc replace the host's
            (see :mod:`harness_gym.worlds`); None shows the host's own.
        workspace_root: where workspaces are created on the host (default: the temp folder).
    """

    python = "/usr/bin/python3"

    def __init__(
        self,
        *,
        command_timeout_s: float = DEFAULTS.command_timeout_s,
        output_limit_chars: int = DEFAULTS.output_limit_chars,
        memory_mb: int = DEFAULTS.memory_mb,
        address_space_mb: int | None = None,
        max_processes: int = DEFAULTS.max_processes,
        max_file_mb: int = DEFAULTS.max_file_mb,
        max_open_files: int = DEFAULTS.max_open_files,
        cpu_time_s: int = DEFAULTS.cpu_time_s,
        workspace_size_mb: int = DEFAULTS.workspace_size_mb,
        tmp_size_mb: int = DEFAULTS.tmp_size_mb,
        cpus: float | None = None,
        strict_limits: bool = False,
        python: str = "/usr/bin/python3",
        extra_ro_binds: Mapping[str, str] | None = None,
        workspace_root: str | Path | None = None,
        system_root: str | Path | None = None,
    ) -> None:
        super().__init__(command_timeout_s=command_timeout_s, output_limit_chars=output_limit_chars)
        self.memory_mb = memory_mb
        self.address_space_mb = address_space_mb or memory_mb
        self.max_processes = max_processes
        self.max_file_mb = max_file_mb
        self.max_open_files = max_open_files
        self.cpu_time_s = cpu_time_s
        self.workspace_size_mb = workspace_size_mb
        self.tmp_size_mb = tmp_size_mb
        self.cpus = cpus
        self.strict_limits = strict_limits
        self.limits = isolation.LimitReport()
        self._workspace_is_tmpfs = False
        self._warned: set[str] = set()
        self.python = python
        self.extra_ro_binds = dict(extra_ro_binds or {})
        self.workspace_root = workspace_root
        self.system_root = str(system_root) if system_root is not None else None
        if self.system_root is not None and not os.path.isfile(os.path.join(self.system_root, "usr/bin/bash")):
            raise SandboxError(f"system_root {self.system_root} is not a root filesystem with /usr/bin/bash")
        self._bwrap = _require_bwrap()
        self.workspace: Path | None = None
        self._layer: Path | None = None  # the shared read-only layer under a copy-on-write workspace
        self._previous_uid: int | None = None
        self._mount_path = ""
        self._lease: isolation.UidLease | None = None
        self._cgroups: list[Path] = []
        # what to clean up if the sandbox is garbage-collected or the interpreter exits unclosed
        self._state: dict[str, object] = {"owner_pid": os.getpid()}
        weakref.finalize(self, _finalize, self._state)

    # ------------------------------------------------------------------ lifecycle

    def new_workspace(self) -> Path:
        """A fresh, empty host folder for the next episode (a size-limited tmpfs where possible)."""
        self._release_workspace()
        self.workspace, self._workspace_is_tmpfs = isolation.new_workspace(self.workspace_size_mb, self.workspace_root)
        self._sync_state()
        return self.workspace

    def new_layered_workspace(self, sources: Sequence[Path], fill: Callable[[Path], None]) -> Path | None:
        """A copy-on-write workspace over the shared layer that ``fill`` makes from ``sources`` (once per
        host), or None where the host cannot (not root, no overlayfs or idmapped mounts): then use
        :meth:`new_workspace` and copy. Only what the agent changes is held per episode."""
        if not layers.available():
            return None
        self._release_workspace()
        self._layer = layers.shared_layer(sources, fill)
        isolation.registry().add("layer", self._layer)  # in use: the layer cache must not remove it
        # in a mount namespace of its own, registered: a kill -9 leaves an empty folder to reclaim
        self.workspace = layers.EpisodeMounts(self.workspace_size_mb, self.workspace_root).workspace
        self._workspace_is_tmpfs = True  # what the agent writes lands in the episode's size-limited tmpfs
        self._sync_state()
        return self.workspace

    def _prepare_start(self, hide: Sequence[str]) -> None:
        """A uid, cgroups and the control folder for the episode (``hide`` concerns image paths;
        the local sandbox shows no image)."""
        assert self.workspace is not None
        isolation.raise_descriptor_limit()
        self._control = isolation.private_folder("harness-gym-ctl-")
        if isolation.is_root():
            # a sandbox asks for its previous uid first: its copy-on-write layer's idmapping is cached per uid
            previous = self._previous_uid
            start = None if previous is None else previous - isolation.uid_pool().start
            # then a free uid whose namespace is cached: a spare is a new sandbox with no previous
            # uid, and making the namespace was two more processes to start on its clock
            prefer = layers.cached_uids() if self._layer is not None else []
            self._lease = isolation.UidLease.acquire(start, prefer=prefer if previous is None else [previous, *prefer])
            self._previous_uid = self._lease.uid
            isolation.registry().add("uid", self._lease.token)
            episode = layers.episode_for(self.workspace)
            if self._layer is not None and episode is not None and not episode.mounted:
                episode.mount(self._layer, self._lease.uid)
            else:
                isolation.chown_tree(self.workspace, self._lease.uid, self._lease.uid)
            # named by the lease, not the uid alone: a dead owner's recovery pass removes the cgroups its
            # registry lists by path, and a live tenant that leased the uid since must not be among them
            name = f"{self._lease.uid}-{self._lease.generation}"
        else:
            name = f"{os.getpid()}-{next(_group_names)}"
        request = isolation.CgroupRequest(memory_mb=self.memory_mb, max_processes=self.max_processes, cpus=self.cpus)
        cgroups = isolation.make_sandbox_cgroups(name, request)
        self._cgroups = cgroups.groups
        for group in self._cgroups:
            isolation.registry().add("cgroup", group)
        if self._lease is not None:
            self._lease.record(
                workspace=str(self._host_folder()),
                control=str(self._control),
                cgroups=[str(g) for g in self._cgroups],
            )
        self.limits = self._limit_report(cgroups.report)
        self._sync_state()
        if self.limits.not_enforced:
            if self.strict_limits:
                self._stop()
                raise SandboxError(
                    f"strict_limits: these limits cannot be enforced on this host: {self.limits.summary()}"
                )
            if self.limits.summary() not in self._warned:
                self._warned.add(self.limits.summary())
                warnings.warn(
                    f"sandbox limits not enforced: {self.limits.summary()}", SandboxLimitWarning, stacklevel=3
                )
        self._sync_state()

    def _limit_report(self, cgroups: isolation.LimitReport) -> isolation.LimitReport:
        """The cgroup report completed with what the rlimits, the uid and the workspace give."""
        report = isolation.LimitReport(dict(cgroups.enforced), {})
        report.enforced["memory_per_process"] = f"RLIMIT_AS {self.address_space_mb} MiB"
        report.enforced.update(
            file_size=f"RLIMIT_FSIZE {self.max_file_mb} MiB",
            open_files=f"RLIMIT_NOFILE {self.max_open_files}",
            cpu_time=f"RLIMIT_CPU {self.cpu_time_s} s",
            tmp_size=f"tmpfs {self.tmp_size_mb} MiB",
        )
        if self._lease is not None:
            nproc = f"RLIMIT_NPROC {self.max_processes} on dedicated uid {self._lease.uid}"
            report.enforced["processes"] = "; ".join(x for x in (cgroups.enforced.get("processes"), nproc) if x)
        elif "processes" in cgroups.not_enforced:
            report.not_enforced["processes"] = (
                "not root, so no dedicated uid for RLIMIT_NPROC, and " + cgroups.not_enforced["processes"]
            )
        for name in ("memory", "cpu"):
            if name in cgroups.not_enforced:
                report.not_enforced[name] = cgroups.not_enforced[name]
        if self._workspace_is_tmpfs:
            report.enforced["workspace_size"] = f"tmpfs {self.workspace_size_mb} MiB"
        else:
            report.not_enforced["workspace_size"] = (
                "the workspace is a plain folder (a size-limited tmpfs needs root); only RLIMIT_FSIZE per file holds"
            )
        return report

    def _host_folder(self) -> Path:
        """The workspace's folder on the host's own tree (what a crash-recovery record names): an
        episode namespace's registered folder, not this process's view of it in /proc."""
        assert self.workspace is not None
        episode = layers.episode_for(self.workspace)
        return episode.folder if episode is not None else self.workspace

    @property
    def uid(self) -> int | None:
        """The host uid the sandbox runs as (None: the caller's own uid)."""
        return self._lease.uid if self._lease else None

    def network_pid(self) -> int | None:
        """The host pid of the sandbox's init (bubblewrap's pid 1, the one child of the ``bwrap``
        this process started), for a host-side forwarder entering the sandbox's network namespace;
        None before start. Not the shell: run unprivileged, the sealed shell's namespaces cannot be
        opened (it is not dumpable), and the agent cannot signal its pid namespace's init. A new shell
        (after a timeout) is a new sandbox, with a new namespace."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return None
        return _namespace_init(proc.pid)

    def _run_grader(
        self, folder: Path, mount: str, script: str, timeout_s: float, env: Mapping[str, str] | None
    ) -> CommandResult:
        """A fresh bubblewrap sandbox (same uid, cgroups and limits) that also shows ``folder`` at
        ``mount``; processes left alive when the grader ends make it a grader error."""
        if self._lease is not None:  # readable by the sandbox uid; the read-only mount keeps it unwritable
            isolation.chown_tree(folder, self._lease.uid, self._lease.uid)
        binds = [
            ("--ro-bind", str(folder), mount),
            ("--bind", str(folder / GRADER_KEY_DIR), f"{mount}/{GRADER_KEY_DIR}"),  # the key, to be removed
            ("--ro-bind", str(grader_init_dir()), GRADER_INIT_DIR),
        ]
        shell = self._shell_program()
        guard = grader_guard("--noprofile --norc")
        grader_argv = [shell, "--noprofile", "--norc", "-c", guard, shell, self._shell_setup() + script]
        with self._shell_command(grader_argv, binds) as (argv, fds):
            proc_env = self._env()
            proc_env.update(grader_environment(env))
            return run_oneshot(argv, timeout_s, self.output_limit_chars, proc_env, pass_fds=fds)

    # ------------------------------------------------------------------ ShellSandbox

    @contextlib.contextmanager
    def _shell_command(
        self, shell_argv: list[str], binds: Sequence[tuple[str, str, str]] = ()
    ) -> Iterator[tuple[list[str], Sequence[int]]]:
        """bwrap (behind the cgroup and uid launcher) running ``shell_argv``, with the seccomp
        program on a descriptor of its own; ``binds`` add mounts (a grader's files)."""
        filter_fd = _seccomp_fd()
        try:
            yield self._launcher() + self._bwrap_argv(filter_fd, binds=binds) + shell_argv, (filter_fd,)
        finally:
            os.close(filter_fd)

    def _shell_env(self) -> dict[str, str]:
        return self._env()

    def stop_agent(self) -> None:
        """End the agent's processes for good before a reset returns, without waiting for the
        kernel's teardown of them (the namespaces' exit: ~28 ms, left to the background close):
        where the sandbox is in a v2 cgroup (a v2 host's, or a hybrid host's freezer group), it is
        frozen and every process in it but the host-side bwrap gets SIGKILL (:func:`.isolation.kill_frozen`),
        so none runs user code again. Where that cannot be shown, the processes are killed and
        waited for, as before grading."""
        self._settle_write()
        proc = self._proc
        freezer = next((group for group in self._cgroups if isolation.freezable(group)), None)
        if proc is not None and proc.poll() is None and freezer and isolation.kill_frozen(freezer, keep=proc.pid):
            return  # the close kills bwrap, reaps it and waits for the namespaces' end
        self._stop_agent()

    def _sealed(self) -> Path | None:
        return sealed_binaries_dir("/bin/bash", self.python)

    def _shell_program(self) -> str:
        return f"{BIN_DIR}/bash" if self._sealed() is not None else "/bin/bash"

    def _server_python(self) -> str | None:
        return f"{BIN_DIR}/python3" if self._sealed() is not None else self.python

    def _channel_owner(self) -> int | None:
        return self._lease.uid if self._lease is not None else None

    def _start_shell(self) -> None:
        # a restart re-creates a cgroup that vanished meanwhile (removed by another process's
        # reclaim): joining it must not fail, and its limits must not silently go
        if self._lease is not None and any(not group.is_dir() for group in self._cgroups):
            name = f"{self._lease.uid}-{self._lease.generation}"  # as _prepare_start names them
            limits = {
                "memory": {"memory.limit_in_bytes": str(self.memory_mb << 20)},
                "pids": {"pids.max": str(self.max_processes)},
            }
            remade = [
                isolation.make_freezer_group(name)
                if _controller(group) == "unified"
                else isolation.make_cgroup(_controller(group), name, limits[_controller(group)])
                for group in self._cgroups
            ]
            self._cgroups = [g for g in remade if g is not None]
        try:
            super()._start_shell()
        finally:
            self._sync_state()

    def _shell_setup(self) -> str:
        nproc = f"-u {self.max_processes} " if self._lease is not None else ""
        return (
            f"ulimit -v {self.address_space_mb * 1024} -f {self.max_file_mb * 1024} -n {self.max_open_files} "
            f"-t {self.cpu_time_s} {nproc}-c 0 2>/dev/null; PS1=''; PS2=''\n"
        )

    # ------------------------------------------------------------------ internals

    def _launcher(self) -> list[str]:
        """Join the cgroups and drop to the sandbox uid before exec'ing bwrap (race-free)."""
        episode = layers.episode_for(self.workspace)
        enter = episode.enter_argv() if episode is not None else []  # as root, before the uid drops
        if self._lease is None and not self._cgroups:
            return enter
        joins = " && ".join(f'echo $$ > "{g}/cgroup.procs"' for g in self._cgroups) or "true"
        # unset PWD: the shell exports the host's working directory, which became bwrap's (pid 1's) environ
        join = ["/bin/sh", "-c", f'{joins} && unset PWD OLDPWD && exec "$@"', "sh", *enter]
        if self._lease is None:
            return join
        uid = str(self._lease.uid)
        return [
            *join,
            "setpriv",
            "--reuid",
            uid,
            "--regid",
            uid,
            "--clear-groups",
            "--",
        ]

    def _bwrap_argv(self, seccomp_fd: int, binds: Sequence[tuple[str, str, str]] = ()) -> list[str]:
        """bubblewrap's arguments: the system read-only, the harness's own files absent, /proc
        read-only (no process writes another's memory), the seccomp filter on ``seccomp_fd``."""
        assert self.workspace is not None and self._control is not None
        argv = [
            self._bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-all",
            "--hostname",
            "sandbox",
            "--proc",
            "/proc",
            "--remount-ro",
            "/proc",
            "--dev",
            "/dev",
        ]
        if self._lease is not None:
            argv[1:1] = ["--unshare-user", "--uid", "0", "--gid", "0"]
        shown: dict[str, str] = {}
        for path in SYSTEM_DIRS:
            source = path if self.system_root is None else os.path.join(self.system_root, path.lstrip("/"))
            if os.path.islink(source):
                argv += ["--symlink", os.readlink(source), path]
            elif os.path.isdir(source):
                argv += ["--ro-bind", source, path]
                shown[source] = path
        for path in PRIVATE_TMPFS:
            argv += ["--size", str(self.tmp_size_mb << 20), "--tmpfs", path]
        for host, inside in self.extra_ro_binds.items():
            argv += ["--ro-bind", host, inside]
            shown[host] = inside
        for inside, is_folder in shadowed_paths(shown):  # harness-gym's own files, wherever installed
            argv += ["--tmpfs", inside] if is_folder else ["--ro-bind", "/dev/null", inside]
        argv += ["--ro-bind", str(tool_scripts_dir()), TOOLS_DIR]
        sealed = self._sealed()
        if sealed is not None:
            argv += ["--ro-bind", str(sealed), BIN_DIR]
        if self._layer is not None:  # the starting workspace, for the library's view_diff / restore_file
            argv += ["--ro-bind", str(self._layer), ORIGINAL_DIR]
        episode = layers.episode_for(self.workspace)  # bwrap starts in the episode's namespace
        argv += ["--bind", str(episode.inside if episode is not None else self.workspace), self._mount_path]
        for kind, host, inside in binds:  # after the workspace, so a grader may sit inside it
            argv += [kind, host, inside]
        argv += ["--seccomp", str(seccomp_fd), "--remount-ro", "/", "--chdir", self._mount_path, "--"]
        return argv

    def _env(self) -> dict[str, str]:
        return {
            "PATH": SANDBOX_PATH,
            "HOME": SANDBOX_HOME,
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
        }

    def _stop(self) -> None:
        """End the episode's processes and release its uid and cgroups (the workspace stays)."""
        self._kill_all()
        for group in self._cgroups:
            isolation.remove_cgroup(group)
            isolation.registry().discard("cgroup", group)
        self._cgroups = []
        if self._lease is not None:
            token = self._lease.token  # (release clears the generation the token names)
            self._lease.release()  # the pid namespace and cgroups are gone: nothing of this uid runs
            isolation.registry().discard("uid", token)
            self._lease = None
        if self._control is not None:
            isolation.registry().discard("dir", self._control)
        self._close_control()
        self._sync_state()

    def _release_workspace(self) -> None:
        if self.workspace is not None:
            isolation.release_workspace(self.workspace)
            self.workspace = None
        if self._layer is not None:
            isolation.registry().discard("layer", self._layer)
        self._layer = None
        self._sync_state()

    def _sync_state(self) -> None:
        self._state.update(
            proc=self._proc,
            cgroups=list(self._cgroups),
            lease=self._lease,
            control=self._control,
            workspace=self.workspace,
        )


def _namespace_init(pid: int) -> int | None:
    """The child of ``pid`` that is pid 1 of a pid namespace of its own (bwrap's sandbox init)."""
    children: list[str] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            children += Path(f"/proc/{pid}/task/{task}/children").read_text().split()
    for child in children:
        try:
            status = Path(f"/proc/{child}/status").read_text()
        except OSError:
            continue
        spaces = next((line.split()[1:] for line in status.splitlines() if line.startswith("NSpid:")), [])
        if len(spaces) > 1 and spaces[-1] == "1":
            return int(child)
    return None


def _controller(group: Path) -> str:
    """The v1 controller a cgroup folder belongs to (memory or pids; "unified": a hybrid host's
    cgroup2 freezer group)."""
    relative = group.relative_to(isolation.CGROUP_ROOT)
    return relative.parts[0]


def _finalize(state: dict[str, Any]) -> None:
    """Clean up as close() would, from the recorded state (the sandbox object is gone).
    Only in the process that made the sandbox: a forked child must not destroy its parent's."""
    if state.get("owner_pid") != os.getpid():
        return
    if state.get("proc") is not None:
        kill_process_group(state["proc"])
    for group in state.get("cgroups") or []:
        isolation.remove_cgroup(group)
        isolation.registry().discard("cgroup", group)
    lease = state.get("lease")
    if lease is not None:
        isolation.kill_uid(lease.uid)
        token = lease.token
        lease.release()
        isolation.registry().discard("uid", token)
    if state.get("control") is not None:
        isolation.registry().discard("dir", state["control"])
    for key in ("control", "workspace"):
        if state.get(key) is not None:
            isolation.release_workspace(Path(state[key]))


register_backend("bubblewrap", BubblewrapSandbox)
