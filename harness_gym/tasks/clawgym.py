"""ClawGym tasks: task folders, and lines of the ClawGym corpus (JSON lines).

A folder ``task_0000/`` holds ``data_entry.json`` (``task_id``, ``user_query``,
``input_mount_dir``, ``metadata``), ``input_files/`` (copied verbatim into the workspace, mounted
at ``input_mount_dir`` so the graders' absolute paths work), optionally ``reference_output/`` (the
files a correct run leaves in the workspace: the task's reference solution) and ``reward/reward.sh`` (run after the
agent stops, from the workspace; its last output line is the reward). ``reward/`` appears in the
workspace as ``<workspace>/reward/`` only for grading, and ``OPENCLAW_REWARD_PAYLOAD`` names a JSON
file with the task, the final message and the transcript for chat-style grading.

A corpus line is ``{"prompt", "hook_code", "input_files": [{"file_path", "content"}], "rule",
"origin_template"}``; files under ``reward/`` go to the grader, the task id is the ``id:`` line of
``origin_template``. When the line has no ``reward/reward.sh``, ``hook_code`` is taken as the
grader, run with python3 (its last output line is the reward).

    tasks="clawgym:/data/ClawGym-Bench"   tasks="clawgym:/data/corpus.jsonl"
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from harness_gym.paths import cache_dir
from harness_gym.sandboxes.base import SandboxError, check_mount_path
from harness_gym.tasks.base import Suite, Task, TaskError, reference_output_solution, register_loader

DEFAULT_MOUNT = "/root/.openclaw/workspace"
# ClawGym graders call `python` and `python -m pytest`, and prompts ask for jq, git, sqlite3...:
# the suite runs on a machine that has them, whatever the host has (harness_gym/worlds/clawgym.yaml)
WORLD = "clawgym"


def load_task_folder(folder: Path, split: str = "train") -> Task:
    """One ClawGym task folder."""
    entry_path = folder / "data_entry.json"
    try:
        entry = json.loads(entry_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TaskError(f"task {folder.name}: no data_entry.json") from None
    except (OSError, ValueError) as exc:
        raise TaskError(f"task {folder.name}: data_entry.json is unreadable: {exc}") from exc
    if not isinstance(entry, dict):
        raise TaskError(f"task {folder.name}: data_entry.json must hold an object")
    missing = [k for k in ("task_id", "user_query") if not entry.get(k)]
    if missing:
        raise TaskError(f"task {folder.name}: data_entry.json lacks {', '.join(missing)}")
    task_id = str(entry["task_id"])
    mount = entry.get("input_mount_dir") or DEFAULT_MOUNT
    try:
        check_mount_path(mount)
    except SandboxError as exc:
        raise TaskError(f"task {task_id}: input_mount_dir: {exc}") from exc
    reward = folder / "reward"
    script = reward / "reward.sh"
    if not script.is_file():
        raise TaskError(f"task {task_id}: no reward/reward.sh")
    if not os.access(script, os.R_OK):
        raise TaskError(f"task {task_id}: reward/reward.sh is unreadable")
    metadata: dict[str, Any] = dict(entry.get("metadata") or {})
    metadata.setdefault("family", "clawgym")
    inputs = folder / "input_files"
    return Task(
        id=task_id,
        instruction=str(entry["user_query"]),
        mount_path=mount,
        workspace_dir=inputs if inputs.is_dir() else None,
        grader_files=(reward,),
        grade_command="bash reward/reward.sh",
        grader_mount=f"{mount}/reward",
        grader_payload=True,
        grader_timeout_s=float(metadata.get("grader_timeout_s", 300)),
        split=split,
        metadata=metadata,
        world=WORLD,
        sign_output=True,  # reward.sh cannot sign: the harness's signer runs it and signs its output
        solution=reference_output_solution(folder / "reference_output", mount),
    )


def _task_id_from_template(template: str) -> str | None:
    match = re.search(r"^\s*id:\s*(\S+)", template or "", re.MULTILINE)
    return match.group(1) if match else None


def extract_corpus_line(line: dict[str, Any], number: int, root: Path) -> Path:
    """Write one corpus line out as a task folder under ``root``; returns the folder."""
    task_id = _task_id_from_template(str(line.get("origin_template", ""))) or f"line_{number:06d}"
    if not isinstance(line.get("prompt"), str) or not line["prompt"].strip():
        raise TaskError(f"task {task_id} (line {number}): no prompt")
    files = line.get("input_files") or []
    if not isinstance(files, list):
        raise TaskError(f"task {task_id} (line {number}): input_files must be a list")
    folder = root / re.sub(r"[^A-Za-z0-9_.-]", "_", task_id)
    (folder / "input_files").mkdir(parents=True, exist_ok=True)
    (folder / "reward").mkdir(exist_ok=True)
    for item in files:
        path = str(item.get("file_path", ""))
        if not path or path.startswith("/") or ".." in Path(path).parts:
            raise TaskError(f"task {task_id} (line {number}): unsafe or empty file_path {path!r}")
        target = folder / path if path.startswith("reward/") else folder / "input_files" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(str(item.get("content", "")), encoding="utf-8")
    if not (folder / "reward" / "reward.sh").exists():
        if not line.get("hook_code"):
            raise TaskError(f"task {task_id} (line {number}): neither reward/reward.sh nor hook_code")
        (folder / "reward" / "hook_code.py").write_text(str(line["hook_code"]), encoding="utf-8")
        (folder / "reward" / "reward.sh").write_text("python3 reward/hook_code.py\n", encoding="utf-8")
    entry = {
        "task_id": task_id,
        "user_query": line["prompt"],
        "input_mount_dir": DEFAULT_MOUNT,
        "metadata": {"rule": line.get("rule"), "grading_type": "automated", "source_line": number},
    }
    (folder / "data_entry.json").write_text(json.dumps(entry), encoding="utf-8")
    return folder


def load_clawgym(argument: str) -> Suite:
    """``clawgym:<folder of task folders | one task folder | corpus.jsonl>[#split]``."""
    path_text, _, split = argument.partition("#")
    path = Path(path_text).expanduser()
    if not path_text or not path.exists():
        raise TaskError(f"clawgym: {path_text!r} does not exist (expected a folder of task folders or a .jsonl corpus)")
    suite = Suite([])
    folders: list[Path] = []
    if path.is_file():
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        root = cache_dir() / "clawgym" / digest
        for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not raw.strip():
                continue
            try:
                line = json.loads(raw)
                if not isinstance(line, dict):
                    raise TaskError(f"line {number}: not a JSON object")
                folders.append(extract_corpus_line(line, number, root))
            except (json.JSONDecodeError, TaskError, OSError) as exc:
                suite.errors.append(f"{path.name} line {number}: {exc}")
    elif (path / "data_entry.json").exists():
        folders = [path]
    else:
        folders = sorted(p for p in path.iterdir() if p.is_dir())
    for folder in folders:
        try:
            suite.tasks.append(load_task_folder(folder, split or "train"))
        except TaskError as exc:
            suite.errors.append(str(exc))
    return suite


register_loader("clawgym", load_clawgym)
