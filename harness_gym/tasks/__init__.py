"""Tasks: what the agent must do, the files it starts from, and a hidden grader.

A :class:`Task` is data. Its workspace files are copied into a fresh folder at every reset; its
grader files are shown to nobody until the agent has stopped, and then only to a fresh sandbox
that runs the grade command. Suites are loaded by name (``"builtin"``, ``"builtin:train"``);
other suites register a loader with :func:`register_loader`.
"""

from __future__ import annotations

import functools
import json
import math
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness_gym.sandboxes.base import Sandbox

DEFAULT_GRADE_COMMAND = "python3 {grader}/grade.py"


class TaskError(ValueError):
    """A task or suite is malformed; the message names the task and the problem."""


@dataclass(frozen=True)
class Task:
    """One task. ``solution`` lists canonical tool calls (``{"tool", "arguments"}``) that solve it."""

    id: str
    instruction: str
    mount_path: str = "/workspace"
    workspace_dir: Path | None = None
    grader_files: tuple[Path, ...] = ()
    grade_command: str = DEFAULT_GRADE_COMMAND
    grader_timeout_s: float = 120.0
    solution: tuple[Mapping[str, Any], ...] = ()
    split: str = "train"
    metadata: Mapping[str, Any] = field(default_factory=dict)
    image: str | None = None  # a container image the task must run in (Docker backend)

    def materialize(self, destination: Path) -> None:
        """Copy the starting workspace into ``destination`` (an empty folder)."""
        if self.workspace_dir is not None:
            shutil.copytree(self.workspace_dir, destination, dirs_exist_ok=True, symlinks=True)

    def grade(self, sandbox: Sandbox, env: Mapping[str, str] | None = None) -> GradeResult:
        """Stop the agent and grade the workspace in a fresh sandbox."""
        result = sandbox.grade(self.grader_files, self.grade_command, self.grader_timeout_s, env)
        if result.timed_out:
            return GradeResult(
                0.0, {}, result.output, f"task {self.id}: the grader timed out after {self.grader_timeout_s:g} s"
            )
        return parse_grader_output(self.id, result.output, result.exit_code)


@dataclass
class GradeResult:
    """Reward in [0, 1], its breakdown, the grader's log, and an error if grading failed."""

    reward: float
    breakdown: dict[str, Any]
    log: str = ""
    error: str | None = None


def parse_grader_output(task_id: str, output: str, exit_code: int | None) -> GradeResult:
    """The last non-empty line is a float in [0, 1] or ``{"reward": float, "breakdown": {...}}``."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        return GradeResult(0.0, {}, output, f"task {task_id}: the grader printed nothing (exit status {exit_code})")
    last = lines[-1]
    breakdown: dict[str, Any] = {}
    try:
        value = json.loads(last)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict) and "reward" in value:
        breakdown = value.get("breakdown") or {}
        value = value["reward"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return GradeResult(0.0, {}, output, f"task {task_id}: the grader's last line is not a reward: {last[:200]!r}")
    if not 0.0 <= value <= 1.0:
        return GradeResult(0.0, breakdown, output, f"task {task_id}: the grader's reward {value} is outside [0, 1]")
    return GradeResult(float(value), breakdown, output)


# ---------------------------------------------------------------------------- suites

Loader = Callable[[str], list[Task]]
_LOADERS: dict[str, Loader] = {}


def register_loader(scheme: str, loader: Loader) -> None:
    """Make ``tasks="<scheme>:<argument>"`` load a suite."""
    _LOADERS[scheme] = loader


def load_tasks(tasks: str | Sequence[Task] | None = None) -> list[Task]:
    """Resolve an environment's ``tasks`` argument: a suite name like ``builtin:train``, or tasks."""
    if tasks is None:
        tasks = "builtin"
    if not isinstance(tasks, str):
        loaded = list(tasks)
        if not loaded or not all(isinstance(t, Task) for t in loaded):
            raise TaskError("tasks must be a suite name such as 'builtin' or a non-empty sequence of Task objects")
        return loaded
    scheme, _, argument = tasks.partition(":")
    try:
        loader = _LOADERS[scheme]
    except KeyError:
        raise TaskError(
            f"unknown task suite {tasks!r}; known suites: {sorted(_LOADERS)} (e.g. 'builtin:train')"
        ) from None
    loaded = loader(argument)
    if not loaded:
        raise TaskError(f"task suite {tasks!r} is empty")
    return loaded


def builtin_root() -> Path:
    return Path(str(resources.files("harness_gym").joinpath("tasks/builtin")))


@functools.cache
def _task_validator() -> jsonschema.protocols.Validator:
    schema = json.loads(resources.files("harness_gym").joinpath("schemas/task.schema.json").read_text(encoding="utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)


def load_task_dir(folder: Path, shared: Path | None = None) -> Task:
    """A task from a folder holding ``task.yaml``, ``workspace/`` and ``grader/``."""
    meta_path = folder / "task.yaml"
    try:
        meta = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise TaskError(f"task {folder.name}: cannot read {meta_path}: {exc}") from exc
    errors = list(_task_validator().iter_errors(meta))
    if errors:
        raise TaskError(
            f"task {folder.name}: {meta_path} is invalid: " + "; ".join(f"{e.json_path}: {e.message}" for e in errors)
        )
    grader_files: list[Path] = []
    if (folder / "grader").is_dir():
        grader_files.append(folder / "grader")
    for name in meta.get("shared_grader_files", []):
        path = (shared or folder.parent / "_shared") / name
        if not path.exists():
            raise TaskError(f"task {meta['id']}: shared grader file {name} not found at {path}")
        grader_files.append(path)
    if not grader_files:
        raise TaskError(f"task {meta['id']}: no grader (expected a grader/ folder)")
    metadata = dict(meta.get("metadata", {}))
    metadata.setdefault("family", meta.get("family", "unknown"))
    return Task(
        id=meta["id"],
        instruction=meta["instruction"],
        mount_path=meta.get("mount_path", "/workspace"),
        workspace_dir=folder / "workspace" if (folder / "workspace").is_dir() else None,
        grader_files=tuple(grader_files),
        grade_command=meta.get("grade_command", DEFAULT_GRADE_COMMAND),
        grader_timeout_s=float(meta.get("grader_timeout_s", 120.0)),
        solution=tuple(meta.get("solution", [])),
        split=meta["split"],
        metadata=metadata,
        image=meta.get("image"),
    )


@functools.cache
def _builtin_tasks() -> tuple[Task, ...]:
    root = builtin_root()
    return tuple(load_task_dir(d) for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith("_"))


def _load_builtin(split: str) -> list[Task]:
    tasks = list(_builtin_tasks())
    if split in ("", "all"):
        return tasks
    chosen = [t for t in tasks if t.split == split or t.id == split]
    if not chosen:
        raise TaskError(f"built-in suite has no split or task {split!r}; splits: train, eval, all")
    return chosen


register_loader("builtin", _load_builtin)

__all__ = ["GradeResult", "Task", "TaskError", "load_task_dir", "load_tasks", "parse_grader_output", "register_loader"]
