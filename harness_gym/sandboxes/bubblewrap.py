"""A local sandbox on bubblewrap: read-only system, writable workspace, no network, own pid namespace.

One ``bwrap`` process per episode runs a persistent bash (protocol in :mod:`.shell`). As root, each
sandbox also gets a dedicated unprivileged host uid (root inside its user namespace), which makes
RLIMIT_NPROC bind, plus memory and pids cgroups and a size-limited tmpfs workspace where the host
allows them. Killing the bwrap process group ends the pid namespace, so nothing the agent started
survives a timeout, a reset or ``close()``.
"""

from __future__ import annotations

import functools
import os
import posixpath
import shutil
import subprocess
import tempfile
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from harness_gym.sandboxes import isolation, seccomp
from harness_gym.sandboxes.base import (
    CONTROL_DIR,
    GRADER_DIR,
    GRADER_INIT_DIR,
    HARNESS_DIR,
    SANDBOX_HOME,
    TOOLS_DIR,
    CommandResult,
    SandboxError,
    check_mount_path,
    copy_grader_files,
    grader_environment,
    grader_init_dir,
    published_copy,
    register_backend,
    shadowed_paths,
    tool_scripts_dir,
)
from harness_gym.sandboxes.shell import ShellSandbox, kill_process_group, run_oneshot

# Host folders made visible read-only inside the sandbox (only those that exist).
SYSTEM_DIRS: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Folders that are private and empty in every sandbox.
PRIVATE_TMPFS: tuple[str, ...] = ("/tmp", "/root", "/home", "/run", "/var/tmp")
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The shell each sandbox starts with: an execute-only copy of bash, which the kernel runs
# non-dumpable, so no process in the sandbox can read the shell's memory (its protocol state).
LAUNCH_SHELL = f"{HARNESS_DIR}/bin/bash"
_uid_cursor = 0


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


@functools.cache
def launch_shell_dir() -> Path:
    """A folder holding an execute-only copy (mode 0111) of the host's bash, mounted at LAUNCH_SHELL's folder."""
    bash = shutil.which("bash") or "/bin/bash"
    return published_copy(
        "shell", [Path(os.path.realpath(bash))], mode=0o111, rename={Path(os.path.realpath(bash)).name: "bash"}
    )


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
        memory_mb: address-space limit per process, and the memory cgroup limit where available.
        max_processes: processes per sandbox (RLIMIT_NPROC on a dedicated uid; pids cgroup).
        max_file_mb, max_open_files, cpu_time_s: RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CPU.
        workspace_size_mb: size of the tmpfs workspace (as root); tmp_size_mb: size of /tmp and home.
        extra_ro_binds: more host folders to show read-only, ``{host_path: sandbox_path}``.
        workspace_root: where workspaces are created on the host (default: the temp folder).
    """

    python = "/usr/bin/python3"

    def __init__(
        self,
        *,
        command_timeout_s: float = 60.0,
        output_limit_chars: int = 30_000,
        memory_mb: int = 4096,
        max_processes: int = 512,
        max_file_mb: int = 1024,
        max_open_files: int = 1024,
        cpu_time_s: int = 3600,
        workspace_size_mb: int = 1024,
        tmp_size_mb: int = 512,
        python: str = "/usr/bin/python3",
        extra_ro_binds: Mapping[str, str] | None = None,
        workspace_root: str | Path | None = None,
    ) -> None:
        super().__init__(command_timeout_s=command_timeout_s, output_limit_chars=output_limit_chars)
        self.memory_mb = memory_mb
        self.max_processes = max_processes
        self.max_file_mb = max_file_mb
        self.max_open_files = max_open_files
        self.cpu_time_s = cpu_time_s
        self.workspace_size_mb = workspace_size_mb
        self.tmp_size_mb = tmp_size_mb
        self.python = python
        self.extra_ro_binds = dict(extra_ro_binds or {})
        self.workspace_root = workspace_root
        self._bwrap = _require_bwrap()
        self.workspace: Path | None = None
        self._mount_path = ""
        self._lease: isolation.UidLease | None = None
        self._cgroups: list[Path] = []
        # what to clean up if the sandbox is garbage-collected or the interpreter exits unclosed
        self._state: dict[str, object] = {}
        weakref.finalize(self, _finalize, self._state)

    # ------------------------------------------------------------------ lifecycle

    def new_workspace(self) -> Path:
        """A fresh, empty host folder for the next episode (a size-limited tmpfs where possible)."""
        self._release_workspace()
        self.workspace, _ = isolation.new_workspace(self.workspace_size_mb, self.workspace_root)
        self._sync_state()
        return self.workspace

    def start(self, workspace: Path, mount_path: str, hide: Sequence[str] = ()) -> None:
        """Start the episode's shell with ``workspace`` mounted read-write at ``mount_path``.
        (``hide`` concerns image paths; the local sandbox shows no image.)"""
        self._stop()
        workspace = Path(workspace).resolve()
        if not workspace.is_dir():
            raise SandboxError(f"workspace {workspace} is not a directory")
        if self.workspace is not None and workspace != self.workspace:
            self._release_workspace()
        self.workspace = workspace
        self._mount_path = check_mount_path(mount_path)
        self._open_control()
        if isolation.is_root():
            global _uid_cursor
            self._lease = isolation.UidLease.acquire(_uid_cursor)
            _uid_cursor += 1
            for folder in (self.workspace, self._control):
                isolation.chown_tree(folder, self._lease.uid, self._lease.uid)
            name = f"{self._lease.uid}"
            memory = isolation.make_cgroup("memory", name, {"memory.limit_in_bytes": str(self.memory_mb << 20)})
            pids = isolation.make_cgroup("pids", name, {"pids.max": str(self.max_processes)})
            self._cgroups = [g for g in (memory, pids) if g is not None]
            self._lease.record(
                workspace=str(self.workspace),
                control=str(self._control),
                cgroup_memory=str(memory) if memory else None,
                cgroup_pids=str(pids) if pids else None,
            )
        self._sync_state()
        self._start_shell()

    @property
    def uid(self) -> int | None:
        """The host uid the sandbox runs as (None: the caller's own uid)."""
        return self._lease.uid if self._lease else None

    def grade(
        self,
        grader_files: Sequence[Path],
        command: str,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        mount: str = GRADER_DIR,
    ) -> CommandResult:
        """Stop the agent's shell, then run ``command`` in a fresh sandbox that also sees the grader files.

        The files are copied to a private folder mounted at ``mount`` (GRADER_DIR by default); nothing the agent left
        running can see or change them, because nothing the agent started is still running.
        """
        if self.workspace is None:
            raise SandboxError("sandbox is not started")
        self._kill_all()
        with tempfile.TemporaryDirectory(prefix="harness-gym-grader-") as copy:
            copy_grader_files(grader_files, Path(copy))
            if self._lease is not None:
                isolation.chown_tree(Path(copy), self._lease.uid, self._lease.uid)
            filter_fd = _seccomp_fd()
            try:
                binds = [("--bind", copy, mount), ("--ro-bind", str(grader_init_dir()), GRADER_INIT_DIR)]
                argv = self._launcher() + self._bwrap_argv(filter_fd, binds=binds)
                command = command.replace("{grader}", mount)
                argv += [LAUNCH_SHELL, "--noprofile", "--norc", "-c", self._shell_setup() + command]
                proc_env = self._env()
                proc_env.update(grader_environment(env))
                return run_oneshot(argv, timeout_s, self.output_limit_chars, proc_env, pass_fds=(filter_fd,))
            finally:
                os.close(filter_fd)

    # ------------------------------------------------------------------ ShellSandbox

    def _spawn_shell(self) -> subprocess.Popen[bytes]:
        filter_fd = _seccomp_fd()
        try:
            argv = self._launcher() + self._bwrap_argv(filter_fd) + [LAUNCH_SHELL, "--noprofile", "--norc"]
            return subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=self._env(),
                bufsize=0,
                pass_fds=(filter_fd,),
            )
        finally:
            os.close(filter_fd)

    def _start_shell(self) -> None:
        try:
            super()._start_shell()
        finally:
            self._sync_state()

    def _shell_setup(self) -> str:
        nproc = f"-u {self.max_processes} " if self._lease is not None else ""
        return (
            f"ulimit -v {self.memory_mb * 1024} -f {self.max_file_mb * 1024} -n {self.max_open_files} "
            f"-t {self.cpu_time_s} {nproc}-c 0 2>/dev/null; PS1=''; PS2=''\n"
        )

    # ------------------------------------------------------------------ internals

    def _launcher(self) -> list[str]:
        """Join the cgroups and drop to the sandbox uid before exec'ing bwrap (race-free)."""
        if self._lease is None:
            return []
        joins = " && ".join(f'echo $$ > "{g}/cgroup.procs"' for g in self._cgroups) or "true"
        uid = str(self._lease.uid)
        return [
            "/bin/sh",
            "-c",
            f'{joins} && exec "$@"',
            "sh",
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
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
                shown[path] = path
        for path in PRIVATE_TMPFS:
            argv += ["--size", str(self.tmp_size_mb << 20), "--tmpfs", path]
        for host, inside in self.extra_ro_binds.items():
            argv += ["--ro-bind", host, inside]
            shown[host] = inside
        for inside, is_folder in shadowed_paths(shown):  # harness-gym's own files, wherever installed
            argv += ["--tmpfs", inside] if is_folder else ["--ro-bind", "/dev/null", inside]
        argv += ["--ro-bind", str(tool_scripts_dir()), TOOLS_DIR, "--ro-bind", str(self._control), CONTROL_DIR]
        argv += ["--ro-bind", str(launch_shell_dir()), posixpath.dirname(LAUNCH_SHELL)]
        argv += ["--bind", str(self.workspace), self._mount_path]
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
        self._cgroups = []
        if self._lease is not None:
            self._lease.release()  # the pid namespace and cgroups are gone: nothing of this uid runs
            self._lease = None
        self._close_control()
        self._sync_state()

    def _release_workspace(self) -> None:
        if self.workspace is not None:
            isolation.release_workspace(self.workspace)
            self.workspace = None
        self._sync_state()

    def _sync_state(self) -> None:
        self._state.update(
            proc=self._proc,
            cgroups=list(self._cgroups),
            lease=self._lease,
            control=self._control,
            workspace=self.workspace,
        )


def _finalize(state: dict) -> None:  # type: ignore[type-arg]
    """Clean up as close() would, from the recorded state (the sandbox object is gone)."""
    if state.get("proc") is not None:
        kill_process_group(state["proc"])
    for group in state.get("cgroups") or []:
        isolation.remove_cgroup(group)
    lease = state.get("lease")
    if lease is not None:
        isolation.kill_uid(lease.uid)
        lease.release()
    for key in ("control", "workspace"):
        if state.get(key) is not None:
            isolation.release_workspace(Path(state[key]))


register_backend("bubblewrap", BubblewrapSandbox)
