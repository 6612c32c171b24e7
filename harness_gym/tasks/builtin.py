"""The built-in suite: hand-written tasks in ``tasks/builtin/<id>/`` (task.yaml, workspace/, grader/).

``tasks/builtin/_mutation_audit.json`` is the full mutation audit of the suite
(``harness-gym tasks audit builtin --mutants 0 --json harness_gym/tasks/builtin/_mutation_audit.json``);
each task carries the score recorded there as ``metadata.mutation_score`` while it is the task that
was audited (same audit digest), so a bench record says how strong its task's grader is."""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from dataclasses import replace
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from harness_gym.tasks.base import DEFAULT_GRADE_COMMAND, Task, TaskError, register_loader
from harness_gym.tasks.mutants import audit_digest

MUTATION_AUDIT = "_mutation_audit.json"  # in tasks/builtin/, beside the task folders


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
        signed_verdict=bool(meta.get("signed_verdict", False)),
        grader_timeout_s=float(meta.get("grader_timeout_s", 120.0)),
        time_limit_s=float(meta["time_limit_s"]) if meta.get("time_limit_s") else None,
        world=meta.get("world"),
        solution=tuple(meta.get("solution", [])),
        split=meta["split"],
        metadata=metadata,
        image=meta.get("image"),
    )


def with_recorded_scores(tasks: Sequence[Task], audit_path: Path) -> list[Task]:
    """The tasks with the score a full mutation audit (``audit_path``, its ``--json`` file) recorded
    for them, as ``metadata.mutation_score`` and ``mutants_checked`` (what the generator records).
    Only a task audited as it is now (same :func:`audit_digest`) gets one; a task changed since, or
    an audit of a sample of mutants, leaves the score unknown, never strong."""
    try:
        data = json.loads(audit_path.read_text(encoding="utf-8"))
        per_task = dict(data["per_task"]) if data.get("mutants_per_task") is None else {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return list(tasks)
    scored = []
    for task in tasks:
        entry = per_task.get(task.id)
        entry = entry if isinstance(entry, dict) else {}
        score = entry.get("score")
        if (
            isinstance(score, (int, float))
            and not isinstance(score, bool)
            and entry.get("digest") == audit_digest(task)
        ):
            extra = {"mutation_score": float(score), "mutants_checked": int(entry.get("valid") or 0)}
            task = replace(task, metadata={**task.metadata, **extra})
        scored.append(task)
    return scored


@functools.cache
def _builtin_tasks() -> tuple[Task, ...]:
    root = builtin_root()
    tasks = [load_task_dir(d) for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith("_")]
    return tuple(with_recorded_scores(tasks, root / MUTATION_AUDIT))


def _load_builtin(split: str) -> list[Task]:
    tasks = list(_builtin_tasks())
    if split in ("", "all"):
        return tasks
    chosen = [t for t in tasks if t.split == split or t.id == split]
    if not chosen:
        raise TaskError(f"built-in suite has no split or task {split!r}; splits: train, eval, all")
    return chosen


register_loader("builtin", _load_builtin)
