"""The sandbox interface shared by every backend (bubblewrap here; Docker and others plug in)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import os
import posixpath
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness_gym.errors import SandboxError
from harness_gym.sandboxes.isolation import grader_folder, out_of_descriptors, remove_tree, shared_temp_dir
from harness_gym.sandboxes.options import SandboxOptions

# Paths inside every sandbox. The harness's own files live under HARNESS_DIR, read-only.
HARNESS_DIR = "/.harness"
TOOLS_DIR = f"{HARNESS_DIR}/tools"
ORIGINAL_DIR = f"{HARNESS_DIR}/original"  # the starting workspace, read-only, under a layered workspace
BIN_DIR = f"{HARNESS_DIR}/bin"  # execute-only copies of the shell and Python (see sealed_binaries_dir)
GRADER_DIR = f"{HARNESS_DIR}/grader"
GRADER_INIT_DIR = f"{HARNESS_DIR}/grader-init"
# The one subfolder of a grader's folder the grading may write: where the host puts a signing grader's
# key, so the grader can remove it. Everything else of the folder is read-only in the grading sandbox:
# the program a grader runs (of the agent's making) must not rewrite the grader's script or a check
# it runs next (exploit rewrite-grader). The in-sandbox twin is KEY_DIR in tasks/builtin/_shared/verdict.py.
GRADER_KEY_DIR = ".harness-gym-key"


SANDBOX_HOME = "/root"  # HOME of the agent's shell and of graders (a fresh, private folder in each)
# A workspace may sit neither at nor inside these: the sandbox's own system and harness folders.
SYSTEM_TREES: tuple[str, ...] = (
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/proc", "/sys", "/dev", "/boot",
    "/run", HARNESS_DIR,
)  # fmt: skip
# Nor exactly at these: HOME (user-site and dotfiles of every Python grader would be the agent's),
# the parent of users' homes, the shared temporary folders and the roots of optional software.
SYSTEM_FOLDERS: tuple[str, ...] = ("/", SANDBOX_HOME, "/home", "/tmp", "/var", "/var/tmp", "/opt", "/srv")


def check_mount_path(mount_path: str) -> str:
    """Validate where a workspace may be mounted; the one rule every loader and backend applies.

    Absolute and normalised; not a system folder or inside one (it would hide the sandbox's own
    programs); not HOME or a user's home (``/home/NAME``), whose dotfiles and user site-packages
    every grader would then take from the agent.
    """
    if (
        not isinstance(mount_path, str)
        or not mount_path.startswith("/")
        or posixpath.normpath(mount_path) != mount_path
    ):
        raise SandboxError(f"workspace mount path must be an absolute, normalised path, got {mount_path!r}")
    if mount_path.startswith("//"):
        raise SandboxError(f"workspace mount path must be an absolute, normalised path, got {mount_path!r}")
    for tree in SYSTEM_TREES:
        if mount_path == tree or mount_path.startswith(tree + "/"):
            raise SandboxError(f"workspace mount path {mount_path!r} would cover the sandbox's own {tree}")
    if mount_path in SYSTEM_FOLDERS:
        raise SandboxError(
            f"workspace mount path {mount_path!r} would replace the sandbox's {mount_path} (a home or system folder)"
        )
    if posixpath.dirname(mount_path) == "/home":
        raise SandboxError(f"workspace mount path {mount_path!r} would be a user's home folder")
    return mount_path


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


class SandboxBackend(ABC):
    """What every backend does the same way, written once: starting an episode on a workspace
    (:meth:`start`) and grading it (:meth:`grade`). A backend supplies the hooks: how to stop the
    agent's processes, what to prepare before the shell starts, and how to run a grader."""

    workspace: Path | None = None
    _mount_path: str = ""

    # ------------------------------------------------------------------ shared

    def start(self, workspace: Path, mount_path: str, hide: Sequence[str] = ()) -> None:
        """Start the episode's shell with ``workspace`` mounted read-write at ``mount_path`` (checked
        by :func:`check_mount_path`); ``hide``: paths of a task's image the agent must not see."""
        self._stop()
        workspace = Path(workspace)
        if workspace != self.workspace:  # (an episode namespace's workspace is a /proc path: never resolved)
            workspace = workspace.resolve()
        if not workspace.is_dir():
            raise SandboxError(f"workspace {workspace} is not a directory")
        if self.workspace is not None and workspace != self.workspace:
            self._release_workspace()
        self.workspace = workspace
        self._mount_path = check_mount_path(mount_path)
        try:
            self._prepare_start(hide)
            self._start_shell()
        except OSError as exc:  # EMFILE deep in a pipe() or Popen says nothing of the scale that caused it
            why = out_of_descriptors(exc)
            if why is None:
                raise
            self._stop()
            raise SandboxError(why) from exc

    def grade(
        self,
        grader_files: Sequence[Path],
        command: str,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
        mount: str = GRADER_DIR,
    ) -> CommandResult:
        """Stop everything the agent started, then run ``command`` in a fresh context that also sees
        the grader files (copied to a private folder, shown at ``mount``; ``{grader}`` in the command
        names that folder). Nothing the agent left running can see or change them: nothing it
        started is still running."""
        if self.workspace is None:
            raise SandboxError("sandbox is not started")
        self._stop_agent()
        with staged_grader(grader_files) as folder:
            script = command.replace("{grader}", self._grader_path(folder, mount))
            return self._run_grader(folder, mount, script, timeout_s, env)

    def stop_agent(self) -> None:
        """End every process the agent started, now. A reset calls it on the finished episode's
        sandbox, so nothing of that episode runs beside the next one while the rest of its close
        (cgroups, uid, workspace) waits in the background. When it returns, none of them runs user
        code again; a backend that can show that for processes not yet gone (frozen, SIGKILL
        pending) may leave their teardown to the close. By default, what :meth:`grade` does first
        (they are gone when it returns)."""
        self._stop_agent()

    # ------------------------------------------------------------------ hooks

    @abstractmethod
    def _stop(self) -> None:
        """End the episode's processes and release what they held (the workspace stays)."""

    @abstractmethod
    def _release_workspace(self) -> None:
        """Remove the workspace folder."""

    @abstractmethod
    def _start_shell(self) -> None:
        """Start the agent's persistent shell in the prepared sandbox."""

    @abstractmethod
    def _prepare_start(self, hide: Sequence[str]) -> None:
        """What the backend sets up between checking the workspace and starting the shell."""

    def _stop_agent(self) -> None:
        """Before grading: end every process the agent started (default: as :meth:`_stop` does)."""
        self._stop()

    def _grader_path(self, folder: Path, mount: str) -> str:
        """Where the grader sees its files (what ``{grader}`` becomes): ``mount`` for backends that
        mount ``folder`` there."""
        return mount

    @abstractmethod
    def _run_grader(
        self, folder: Path, mount: str, script: str, timeout_s: float, env: Mapping[str, str] | None
    ) -> CommandResult:
        """Run the grading ``script`` with ``folder`` shown read-only at ``mount`` (its GRADER_KEY_DIR
        alone writable); stdout alone is the verdict channel (stderr in ``extra["stderr"]``)."""


@contextlib.contextmanager
def staged_grader(grader_files: Sequence[Path]) -> Iterator[Path]:
    """The grader files gathered into a private host folder (removed afterwards, even after a
    crash): what every backend and the task generator's verification grade with."""
    with grader_folder() as copy:
        folder = copy_grader_files(grader_files, Path(copy))
        (folder / GRADER_KEY_DIR).mkdir(exist_ok=True)  # the mount point of the writable part
        yield folder


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
    (e.g. under /root), and because no sandbox may see the package itself.
    """
    source = Path(__file__).resolve().parent.parent / "tools" / "scripts"
    return published_copy("tools", sorted(source.glob("*.py")))


@functools.cache
def grader_init_dir() -> Path:
    """A copy of :mod:`.grader_init` as ``sitecustomize.py``, mounted at GRADER_INIT_DIR in graders."""
    return published_copy(
        "grader-init", [Path(__file__).with_name("grader_init.py")], rename={"grader_init.py": "sitecustomize.py"}
    )


def published_copy(
    kind: str, files: Sequence[Path], mode: int = 0o644, rename: Mapping[str, str] | None = None
) -> Path:
    """A folder in the temp folder holding copies of ``files`` (each ``mode``), that sandboxes mount.

    Keyed by content, so every process and sandbox shares one; made under a staging name and
    renamed, so no sandbox sees a half-written copy.
    """
    rename = rename or {}
    digest = hashlib.sha256(f"{mode:o}".encode())
    for path in files:
        digest.update(rename.get(path.name, path.name).encode() + b"\0" + path.read_bytes())
    parent = shared_temp_dir()  # a folder a sandbox uid can reach
    target = parent / f"harness-gym-{kind}-{digest.hexdigest()[:16]}"
    if not target.is_dir():
        staging = Path(tempfile.mkdtemp(prefix=f"harness-gym-{kind}-staging-", dir=parent))
        for path in files:
            destination = staging / rename.get(path.name, path.name)
            shutil.copyfile(path, destination)
            os.chmod(destination, mode)
        os.chmod(staging, 0o755)
        try:
            staging.rename(target)
        except OSError:  # another process won the race
            remove_tree(staging)
    return target


@functools.cache
def sealed_binaries_dir(shell: str, python: str) -> Path | None:
    """Execute-only copies of the shell and Python (as ``bash`` and ``python3``), mounted at BIN_DIR.

    Why: the kernel makes a process started from a file it may not read non-dumpable. The agent's
    processes run as the same user as the sandbox's shell and tool server, but cannot then open
    their descriptors under /proc/PID/fd, read their memory or ptrace them, so the protocol's pipes
    stay between the host and those two processes. None where a copy cannot be made (the originals
    are then used).
    """
    try:
        sources = [Path(shell).resolve(strict=True), Path(python).resolve(strict=True)]
        return published_copy("bin", sources, mode=0o111, rename={sources[0].name: "bash", sources[1].name: "python3"})
    except OSError:
        return None


# The grader runs in a child shell; when it ends, any process of the sandbox still alive (other than
# bwrap's init and this shell) could write to the grader's stdout *after* its verdict line (a daemon
# the tested code left, writing "1.0" in a loop, made the last line its own), so such a grading is a
# grader error (reward 0, exit status 125), and the leftovers are killed. Every other process is
# stopped first (``kill -STOP -1``: one signal to all, so a process that forks and exits to stay
# ahead of a scan is frozen too), then every *thread* is looked at: a process whose main thread has
# exited while another runs shows Z in /proc/PID/stat and still writes (issue 28), so only a process
# all of whose threads are dead (a true zombie) is let pass. Builtins only (no fork), so the check
# never sees a process of its own.
GRADER_LEFTOVER_STATUS = 125


def grader_guard(shell_options: str = "") -> str:
    """Shell code that runs the grade command (``$1``) in a child shell (``$0 shell_options -c``),
    then refuses the grading if any thread of any other process of the sandbox is still alive."""
    return f'"$0" {shell_options} -c "$1"\n' + _GUARD_CHECK


_GUARD_CHECK = (
    "status=$?\n"
    "kill -s STOP -1 2>/dev/null\n"
    "for t in /proc/[0-9]*/task/[0-9]*; do\n"
    "  p=${t#/proc/}; p=${p%%/*}\n"
    '  if [ "$p" = 1 ] || [ "$p" = "$$" ]; then continue; fi\n'
    '  { read -r line < "$t/stat"; } 2>/dev/null || continue\n'
    "  state=${line##*) }; state=${state%% *}\n"
    '  if [ "$state" = Z ] || [ "$state" = X ]; then continue; fi\n'
    '  echo "harness-gym: processes the grader started were still running when it ended (pid $p);'
    ' they could write after its verdict, so it is not trusted" >&2\n'
    "  kill -9 -1 2>/dev/null\n"
    f"  exit {GRADER_LEFTOVER_STATUS}\n"
    "done\n"
    'exit "$status"\n'
)


def grader_environment(task_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment variables every grader starts with, whichever backend runs it.

    No workspace folder on ``sys.path`` (``PYTHONSAFEPATH``: neither the current folder for ``-c``
    / ``-m`` / stdin nor a script's folder), no user site-packages, and GRADER_INIT_DIR first on
    ``PYTHONPATH``, whose ``sitecustomize`` makes each Python process non-dumpable. A task's own
    variables come after (a task format that needs its folder on the path sets ``PYTHONSAFEPATH``
    to ``""``); a task's ``PYTHONPATH`` is kept behind GRADER_INIT_DIR.
    """
    env = {"PYTHONSAFEPATH": "1", "PYTHONNOUSERSITE": "1", "PYTHONDONTWRITEBYTECODE": "1", "HOME": SANDBOX_HOME}
    env.update(task_env or {})
    env["PYTHONPATH"] = ":".join(p for p in (GRADER_INIT_DIR, (task_env or {}).get("PYTHONPATH", "")) if p)
    return env


def copy_grader_files(grader_files: Sequence[Path], destination: Path) -> Path:
    """Gather grader files into one folder: a folder contributes its contents, a file itself."""
    destination.mkdir(parents=True, exist_ok=True)
    for source in grader_files:
        if Path(source).is_dir():
            shutil.copytree(source, destination, dirs_exist_ok=True)
        else:
            shutil.copy2(source, destination)
    return destination


def cache_root() -> Path:
    """Where harness-gym keeps extracted images, pristine files and unpacked suites on the host."""
    return Path(os.environ.get("HARNESS_GYM_CACHE", Path.home() / ".cache" / "harness-gym"))


@functools.cache
def project_paths() -> tuple[Path, ...]:
    """Every host path that holds harness-gym's own files: what no sandbox may show.

    The installed package (hidden tests, graders and reference solutions are package data), every
    other file its distribution installed (``trainers/``, dist-info, an editable install's ``.pth``
    and finder, the console script), an editable checkout as a whole, and the cache. Real paths,
    so a sandbox that shows a folder under another name still finds them.
    """
    package = Path(__file__).resolve().parent.parent
    found: set[Path] = {cache_root()}
    sources = [package]
    # the installed package's own folder first (fast), then all of sys.path (an editable install)
    beside = list(importlib.metadata.distributions(name="harness-gym", path=[str(package.parent)]))
    for distribution in beside or _all_distributions("harness-gym"):
        site = Path(str(distribution.locate_file(""))).resolve()
        for entry in distribution.files or ():
            parts = Path(str(entry)).parts
            if parts and parts[0] == "..":  # outside the site folder (a console script): the file itself
                found.add(Path(str(distribution.locate_file(entry))).resolve())
            elif parts and parts[0] != "__pycache__":
                found.add(site / parts[0])  # the top-level folder or file this distribution owns there
            elif len(parts) > 1 and "harness_gym" in parts[1]:
                found.add(site / parts[0] / parts[1])
            if parts and (parts[-1].endswith(".pth") or parts[-1].startswith("__editable__")):
                sources += _paths_named_in(Path(str(distribution.locate_file(entry))))  # an editable install's target
        break
    for source in sources:
        found.add(source)
        checkout = source.parent
        if (checkout / "pyproject.toml").is_file() and (checkout / "harness_gym").is_dir():
            found.add(checkout)  # an editable checkout or a source tree: tests, trainers, .git too
    return tuple(sorted({Path(os.path.realpath(p)) for p in found}))


def shadowed_paths(shown: Mapping[str, str]) -> list[tuple[str, bool]]:
    """Where project paths appear inside a sandbox that shows host folders ``{host: inside}``.

    Returns ``(inside path, is a folder)`` for each project path under a shown folder, and for each
    shown folder that is itself under a project path; the backend covers each with an empty folder
    or an empty file.
    """
    covered: dict[str, bool] = {}
    for host, inside in shown.items():
        real = os.path.realpath(host)
        for path in project_paths():
            text = str(path)
            if text == real or text.startswith(real.rstrip("/") + "/"):
                if os.path.lexists(text):
                    covered[inside.rstrip("/") + text[len(real.rstrip("/")) :]] = os.path.isdir(text)
            elif real.startswith(text + "/"):
                covered[inside] = os.path.isdir(real)
    outermost = [p for p in covered if not any(p.startswith(other.rstrip("/") + "/") for other in covered)]
    return sorted(((p, covered[p]) for p in outermost), key=lambda item: item[0].count("/"))


def _paths_named_in(pointer: Path) -> list[Path]:
    """Folders an editable install's ``.pth`` or finder module points at (its package sources)."""
    try:
        text = pointer.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    named = re.findall(r"""['"](/[^'"]+)['"]""", text) + [
        line.strip() for line in text.splitlines() if line.startswith("/")
    ]
    return [
        Path(p).resolve()
        for p in named
        if Path(p).name in ("harness_gym", "trainers") or (Path(p) / "harness_gym").is_dir()
    ]


def _all_distributions(name: str) -> list[Any]:
    try:
        return [importlib.metadata.distribution(name)]
    except importlib.metadata.PackageNotFoundError:
        return []
