"""The sandbox interface shared by every backend (bubblewrap here; Docker and others plug in)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

# Paths inside every sandbox. The harness's own files live under HARNESS_DIR, read-only.
HARNESS_DIR = "/.harness"
TOOLS_DIR = f"{HARNESS_DIR}/tools"
ORIGINAL_DIR = f"{HARNESS_DIR}/original"  # the starting workspace, read-only, under a layered workspace
BIN_DIR = f"{HARNESS_DIR}/bin"  # execute-only copies of the shell and Python (see sealed_binaries_dir)
CONTROL_DIR = f"{HARNESS_DIR}/ctl"
GRADER_DIR = f"{HARNESS_DIR}/grader"


class SandboxError(RuntimeError):
    """The sandbox cannot be started or used (missing backend, bad mount path, ...)."""


@dataclass
class CommandResult:
    """What one command produced. ``exit_code`` is None when the command was killed."""

    output: str
    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    elided_chars: int = 0
    note: str = ""
    pid: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Sandbox(Protocol):
    """One episode's execution context.

    ``new_workspace`` returns a fresh, empty host folder that the sandbox owns (and removes at
    ``close``); the harness fills it with the task's files; ``start`` mounts it at ``mount_path`` (and makes
    ``hide``, paths of a task's image the agent must not see, absent);
    ``run`` executes a shell command in the persistent shell; ``run_tool`` runs one of the
    harness's tool scripts with a JSON payload; ``grade`` stops the agent's processes and runs a
    grading command in a fresh context where the grader files (copied into GRADER_DIR; a folder
    contributes its contents) are visible, at ``mount`` (default GRADER_DIR; a task may need them inside its workspace), with ``{grader}``
    in the command replaced by that folder; ``close`` removes
    every process the episode started. Implementations must be safe to ``close`` twice.
    """

    def new_workspace(self) -> Path: ...

    def start(self, workspace: Path, mount_path: str, hide: Sequence[str] = ()) -> None: ...

    def run(self, command: str, timeout_s: float | None = None) -> CommandResult: ...

    def run_tool(self, script: str, payload: Mapping[str, Any], timeout_s: float | None = None) -> CommandResult: ...

    def run_inline(self, source: str, payload: Mapping[str, Any], timeout_s: float | None = None) -> CommandResult: ...

    def write_file(self, path: str, content: str) -> CommandResult: ...

    def grade(
        self,
        grader_files: Sequence[Path],
        command: str,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        mount: str = GRADER_DIR,
    ) -> CommandResult: ...

    def close(self) -> None: ...


SandboxFactory = Callable[[], Sandbox]

_BACKENDS: dict[str, Callable[..., Sandbox]] = {}


def register_backend(name: str, constructor: Callable[..., Sandbox]) -> None:
    """Make a sandbox backend selectable by name (``gym.make(..., sandbox="name")``)."""
    _BACKENDS[name] = constructor


DEFAULT_BACKEND = "bubblewrap"


def choose_backend(requested: str | SandboxFactory | None, image: str | None) -> str | SandboxFactory:
    """Which backend runs a task: the one asked for, else Docker for a task that names an image,
    else the local default."""
    if requested is None:
        return "docker" if image else DEFAULT_BACKEND
    if isinstance(requested, str) and requested not in _BACKENDS:
        raise SandboxError(f"unknown sandbox backend {requested!r}; available: {sorted(_BACKENDS)}")
    if image and requested != "docker" and isinstance(requested, str):
        raise SandboxError(
            f"the task needs the container image {image!r}, which only the 'docker' backend can run; "
            f"use sandbox='docker' or leave sandbox unset"
        )
    return requested


def create_sandbox(backend: str | SandboxFactory, image: str | None = None, **options: Any) -> Sandbox:
    """A new sandbox of a backend (by name, or a factory you pass). ``options`` are validated as
    :class:`~harness_gym.sandboxes.options.SandboxOptions`: unknown keys, bad values and options the
    backend would ignore are refused."""
    from harness_gym.sandboxes.options import SandboxOptions

    typed = SandboxOptions.from_mapping(options)
    if callable(backend):
        return backend()
    constructor = _BACKENDS[backend]
    arguments = typed.for_backend(constructor, backend)
    if image or typed.image:
        arguments["image"] = image or typed.image
    return constructor(**arguments)


@functools.cache
def tool_scripts_dir() -> Path:
    """A world-readable copy of the harness's tool scripts, mounted read-only at TOOLS_DIR.

    A copy, because the installed package may sit where an unprivileged sandbox uid cannot read
    (e.g. under /root); keyed by content, so every process and sandbox shares one.
    """
    source = Path(__file__).resolve().parent.parent / "tools" / "scripts"
    digest = hashlib.sha256()
    files = sorted(p for p in source.glob("*.py"))
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    from harness_gym.sandboxes.isolation import shared_temp_dir  # a folder a sandbox uid can reach

    parent = shared_temp_dir()
    target = parent / f"harness-gym-tools-{digest.hexdigest()[:16]}"
    if not target.is_dir():
        staging = Path(tempfile.mkdtemp(prefix="harness-gym-tools-staging-", dir=parent))
        for path in files:
            shutil.copy2(path, staging / path.name)
            os.chmod(staging / path.name, 0o644)
        os.chmod(staging, 0o755)
        try:
            staging.rename(target)
        except OSError:  # another process won the race
            shutil.rmtree(staging, ignore_errors=True)
    return target


@functools.cache
def sealed_binaries_dir(shell: str, python: str) -> Path | None:
    """Execute-only copies of the shell and Python (as ``bash`` and ``python3``), mounted at BIN_DIR.

    Why: the kernel makes a process started from a file it may not read non-dumpable. The agent's
    processes run as the same user as the sandbox's shell and tool server, but cannot then open
    their descriptors under /proc/PID/fd, read their memory or ptrace them, so the protocol's pipes
    stay between the host and those two processes. Keyed by the originals' path, size and mtime;
    None where a copy cannot be made (the originals are then used).
    """
    try:
        sources = [Path(shell).resolve(strict=True), Path(python).resolve(strict=True)]
        identity = repr([(str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in sources])
    except OSError:
        return None
    target = Path(tempfile.gettempdir()) / f"harness-gym-bin-{hashlib.sha256(identity.encode()).hexdigest()[:16]}"
    if target.is_dir():
        return target
    staging = Path(tempfile.mkdtemp(prefix="harness-gym-bin-staging-"))
    try:
        for name, source in zip(("bash", "python3"), sources, strict=True):
            shutil.copyfile(source, staging / name)
            os.chmod(staging / name, 0o111)
        os.chmod(staging, 0o755)
        staging.rename(target)
    except OSError:  # another process won the race, or the copy failed
        shutil.rmtree(staging, ignore_errors=True)
    return target if target.is_dir() else None


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


def copy_grader_files(grader_files: Sequence[Path], destination: Path) -> Path:
    """Gather grader files into one folder: a folder contributes its contents, a file itself."""
    destination.mkdir(parents=True, exist_ok=True)
    for source in grader_files:
        if Path(source).is_dir():
            shutil.copytree(source, destination, dirs_exist_ok=True)
        else:
            shutil.copy2(source, destination)
    return destination
