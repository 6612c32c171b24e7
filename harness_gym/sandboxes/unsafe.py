"""NO ISOLATION: a persistent shell directly on the host, for machines with neither bubblewrap
nor Docker. The agent can read, change and delete anything the current user can.

It refuses to start unless explicitly allowed: ``sandbox="unsafe-host"`` together with
``sandbox_options={"allow_unsandboxed": True}`` or the environment variable
``HARNESS_GYM_ALLOW_UNSANDBOXED=1``, and it warns at every start. The workspace is made visible at
the task's mount path through a symbolic link, which must not exist yet.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from harness_gym.sandboxes.base import (
    GRADER_DIR,
    CommandResult,
    SandboxError,
    register_backend,
    tool_scripts_dir,
)
from harness_gym.sandboxes.isolation import remove_tree
from harness_gym.sandboxes.options import DEFAULTS
from harness_gym.sandboxes.shell import ShellSandbox, run_oneshot

ALLOW_VARIABLE = "HARNESS_GYM_ALLOW_UNSANDBOXED"


class UnsandboxedHostWarning(UserWarning):
    """Agent commands are running on the host without any isolation."""


class UnsafeHostSandbox(ShellSandbox):
    """A shell on the host itself. Never use it for untrusted agents."""

    def __init__(
        self,
        *,
        allow_unsandboxed: bool = False,
        command_timeout_s: float = DEFAULTS.command_timeout_s,
        output_limit_chars: int = DEFAULTS.output_limit_chars,
        python: str = "python3",
        workspace_root: str | Path | None = None,
    ) -> None:
        if not (allow_unsandboxed or os.environ.get(ALLOW_VARIABLE) == "1"):
            raise SandboxError(
                "the 'unsafe-host' backend runs agent commands on this machine WITHOUT ANY ISOLATION and is off by "
                f"default. Install bubblewrap or use Docker; to run unsandboxed anyway, set {ALLOW_VARIABLE}=1 or "
                "pass sandbox_options={'allow_unsandboxed': True}."
            )
        super().__init__(command_timeout_s=command_timeout_s, output_limit_chars=output_limit_chars)
        self.python = python
        self.workspace_root = workspace_root
        self.workspace: Path | None = None
        self._link: Path | None = None
        self.tools_dir = str(tool_scripts_dir())

    def new_workspace(self) -> Path:
        self._release_workspace()
        self.workspace = Path(tempfile.mkdtemp(prefix="harness-gym-ws-", dir=self.workspace_root))
        return self.workspace

    def _prepare_start(self, hide: Sequence[str]) -> None:
        """The workspace linked at the mount path (which must not exist yet); a warning every time."""
        warnings.warn(
            f"agent commands run on the host WITHOUT ISOLATION ({ALLOW_VARIABLE})", UnsandboxedHostWarning, stacklevel=3
        )
        assert self.workspace is not None
        link = Path(self._mount_path)
        if link.exists() or link.is_symlink():
            raise SandboxError(
                f"unsafe-host: {self._mount_path} already exists on this machine; it cannot show the workspace there"
            )
        try:
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(self.workspace, target_is_directory=True)
        except OSError as exc:
            raise SandboxError(f"unsafe-host: cannot link {self._mount_path} to the workspace: {exc}") from exc
        self._link = link

    def _grader_path(self, folder: Path, mount: str) -> str:
        """The host has no mounts: the grader reads ``folder`` itself, or a copy at ``mount`` when a
        task puts its grader inside the workspace."""
        if mount != GRADER_DIR and mount.startswith(self._mount_path + "/"):
            shutil.copytree(folder, mount, dirs_exist_ok=True)
            return mount
        return str(folder)

    def _run_grader(
        self, folder: Path, mount: str, script: str, timeout_s: float, env: Mapping[str, str] | None
    ) -> CommandResult:
        """A child shell on the host, in the workspace (no isolation, no leftover check)."""
        return run_oneshot(
            ["/bin/bash", "-c", f"cd {self._mount_path} && " + script],
            timeout_s,
            self.output_limit_chars,
            {**os.environ, **(env or {})},
        )

    @contextlib.contextmanager
    def _shell_command(self, shell_argv: list[str]) -> Iterator[tuple[list[str], Sequence[int]]]:
        yield shell_argv, ()

    def _shell_cwd(self) -> str:
        return self._mount_path

    def _server_python(self) -> str | None:
        return self.python

    def _stop(self) -> None:
        self._kill_all()
        if self._link is not None:
            self._link.unlink(missing_ok=True)
            self._link = None

    def _release_workspace(self) -> None:
        if self.workspace is not None:
            remove_tree(self.workspace)
            self.workspace = None


register_backend("unsafe-host", UnsafeHostSandbox)
