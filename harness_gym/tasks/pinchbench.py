"""PinchBench tasks: ``tasks/<id>.md`` files with YAML front matter (``id, name, category,
grading_type, timeout_seconds, workspace_files``) and the sections ``## Prompt``, ``## Expected
Behavior``, ``## Grading Criteria`` and ``## Automated Checks`` (a python block defining
``grade(transcript, workspace_path) -> dict``).

The automated checks run in the grading sandbox on the transcript in OpenClaw's event shape; the
rubric part (``llm_judge`` / ``hybrid``) goes to the optional LLM judge (:mod:`.judge`).

    tasks="pinchbench:/path/to/pinchbench"   (the folder holding tasks/ and assets/)
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from harness_gym.tasks.base import Suite, Task, TaskError, register_loader
from harness_gym.tasks.clawgym import DEFAULT_MOUNT, cache_dir

RUNNER = Path(__file__).resolve().parent / "graders" / "pinchbench_runner.py"
_FRONT = re.compile(r"\A---\s*\n(.*?)\n---\s*\n(.*)\Z", re.DOTALL)
_CODE = re.compile(r"```python\s*\n(.*?)```", re.DOTALL)


def parse_task_file(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """(front matter, sections by heading) of a PinchBench task file."""
    text = path.read_text(encoding="utf-8")
    match = _FRONT.match(text)
    if not match:
        raise TaskError(f"task {path.stem}: no YAML front matter between --- lines")
    try:
        front = yaml.safe_load(match.group(1)) or {}
    except yaml.YAMLError as exc:
        raise TaskError(f"task {path.stem}: the front matter is not valid YAML: {exc}") from exc
    sections: dict[str, str] = {}
    current = None
    for line in match.group(2).splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return front, {k: v.strip() for k, v in sections.items()}


def load_task_file(path: Path, root: Path) -> Task:
    front, sections = parse_task_file(path)
    task_id = str(front.get("id") or path.stem)
    prompt = sections.get("Prompt", "").strip()
    if not prompt:
        raise TaskError(f"task {task_id}: no '## Prompt' section")
    grading = str(front.get("grading_type", "automated"))
    if grading not in ("automated", "llm_judge", "hybrid"):
        raise TaskError(f"task {task_id}: grading_type must be automated, llm_judge or hybrid, got {grading!r}")
    code = _CODE.search(sections.get("Automated Checks", ""))
    if grading in ("automated", "hybrid") and code is None:
        raise TaskError(f"task {task_id}: grading_type {grading} needs a python block under '## Automated Checks'")
    source = code.group(1) if code else "def grade(transcript, workspace_path):\n    return {'automated': 0.0}\n"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    folder = cache_dir() / "pinchbench" / f"{task_id}-{digest}"
    grader = folder / "grader"
    grader.mkdir(parents=True, exist_ok=True)
    (grader / "checks.py").write_text(source, encoding="utf-8")
    shutil.copy2(RUNNER, grader / "run.py")
    workspace = folder / "workspace"
    workspace.mkdir(exist_ok=True)
    for item in front.get("workspace_files") or []:
        if isinstance(item, str):
            item = {"source": item, "dest": Path(item).name}
        src = (root / str(item.get("source", ""))).resolve()
        dest = str(item.get("dest") or Path(str(item.get("source", ""))).name)
        if not src.is_file():
            raise TaskError(f"task {task_id}: workspace file {item.get('source')!r} not found under {root}")
        if dest.startswith("/") or ".." in Path(dest).parts:
            raise TaskError(f"task {task_id}: unsafe workspace destination {dest!r}")
        (workspace / dest).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, workspace / dest)
    rubric = "\n\n".join(f"{k}:\n{sections[k]}" for k in ("Expected Behavior", "Grading Criteria") if sections.get(k))
    metadata = {
        "family": "pinchbench",
        "name": front.get("name"),
        "category": front.get("category"),
        "grading_type": grading,
        "time_limit_s": front.get("timeout_seconds"),
    }
    return Task(
        id=task_id,
        instruction=prompt,
        mount_path=DEFAULT_MOUNT,
        workspace_dir=workspace,
        grader_files=(grader,),
        grade_command="python3 {grader}/run.py",
        grader_payload=True,
        metadata=metadata,
        judge=None if grading == "automated" else {"type": grading, "rubric": rubric},
        time_limit_s=float(front["timeout_seconds"]) if front.get("timeout_seconds") else None,
    )


def load_pinchbench(argument: str) -> Suite:
    """``pinchbench:<repository folder | tasks folder | one task .md>``."""
    path = Path(argument).expanduser()
    if not argument or not path.exists():
        raise TaskError(f"pinchbench: {argument!r} does not exist (expected a PinchBench folder or task file)")
    if path.is_file():
        files, root = [path], path.parent.parent if path.parent.name == "tasks" else path.parent
    else:
        tasks_dir = path / "tasks" if (path / "tasks").is_dir() else path
        files = sorted(p for p in tasks_dir.glob("*.md") if p.stem.upper() != "TASK_TEMPLATE")
        root = tasks_dir.parent if tasks_dir.name == "tasks" else tasks_dir
    suite = Suite([])
    for file in files:
        try:
            suite.tasks.append(load_task_file(file, root))
        except (TaskError, OSError) as exc:
            suite.errors.append(str(exc))
    return suite


register_loader("pinchbench", load_pinchbench)
