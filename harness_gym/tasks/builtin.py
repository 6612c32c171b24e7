"""The built-in suite: hand-written tasks in ``tasks/builtin/<id>/`` (task.yaml, workspace/, grader/)."""

from __future__ import annotations

import functools
import json
from importlib import resources
from pathlib import Path

import jsonschema
import yaml

from harness_gym.tasks.base import DEFAULT_GRADE_COMMAND, Task, TaskError, register_loader


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
