"""PinchBench tasks: ``tasks/<id>.md`` files with YAML front matter (``id, name, category,
grading_type, timeout_seconds, workspace_files``) and the sections ``## Prompt``, ``## Expected
Behavior``, ``## Grading Criteria`` and ``## Automated Checks`` (a python block defining
``grade(transcript, workspace_path) -> dict``).

A task may ship a reference output, ``reference/<id>/`` beside ``tasks/`` (the files a correct run
leaves in the workspace): it becomes the task's reference solution.

The automated checks run in the grading sandbox on the transcript in OpenClaw's event shape; the
rubric part (``llm_judge`` / ``hybrid``) goes to the optional LLM judge (:mod:`.judge`).

    tasks="pinchbench:/path/to/pinchbench"   (the folder holding tasks/ and assets/)
"""

from __future__ import annotations

import hashlib
import math
import re
import shutil
from pathlib import Path
from typing import Any

import yaml

from harness_gym.paths import build_once, cache_dir
from harness_gym.tasks.base import Suite, Task, TaskError, reference_output_solution, register_loader
from harness_gym.tasks.clawgym import DEFAULT_MOUNT, WORLD

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
    folder = _build_task_folder(task_id, path, root, source, front.get("workspace_files") or [])
    weights = _grading_weights(task_id, front.get("grading_weights"), grading)
    criteria = sections.get("LLM Judge Rubric") or sections.get("Grading Criteria", "")
    rubric = "\n\n".join(
        f"{title}:\n{text}"
        for title, text in (("Expected Behavior", sections.get("Expected Behavior")), ("Rubric", criteria))
        if text
    )
    metadata = {
        "family": "pinchbench",
        "name": front.get("name"),
        "category": front.get("category"),
        "grading_type": grading,
        "grading_weights": weights,
        "time_limit_s": front.get("timeout_seconds"),
    }
    return Task(
        id=task_id,
        instruction=prompt,
        mount_path=DEFAULT_MOUNT,
        workspace_dir=folder / "workspace",
        grader_files=(folder / "grader",),
        grade_command="python3 {grader}/run.py",
        grader_payload=True,
        metadata=metadata,
        world=WORLD,  # PinchBench tasks are OpenClaw tasks too: the same machine
        sign_output=True,  # the checks are the data's code: the harness's signer signs what they print
        judge=None if grading == "automated" else {"type": grading, "rubric": rubric, "weights": weights},
        time_limit_s=float(front["timeout_seconds"]) if front.get("timeout_seconds") else None,
        solution=reference_output_solution(
            root / "reference" / task_id if re.fullmatch(r"[\w.-]+", task_id) else None, DEFAULT_MOUNT
        ),
    )


def _build_task_folder(task_id: str, path: Path, root: Path, checks: str, files: Any) -> Path:
    """The task's cached ``workspace/`` and ``grader/`` folders, built once per content and moved
    into place whole, so concurrent loaders never see (or delete) a half-built folder."""
    if not isinstance(files, list):
        raise TaskError(f"task {task_id}: workspace_files must be a list")
    digest = hashlib.sha256(path.read_bytes())
    for item in files:  # a changed asset must not reuse a stale copy
        source = item.get("source") if isinstance(item, dict) else item
        for base in (root / "assets", root):
            if isinstance(source, str) and source and (base / source).is_file():
                stat = (base / source).stat()
                digest.update(f"{base / source}:{stat.st_size}:{stat.st_mtime_ns}".encode())
                break

    def build(staging: Path) -> None:
        (staging / "grader").mkdir()
        (staging / "grader" / "checks.py").write_text(checks, encoding="utf-8")
        shutil.copy2(RUNNER, staging / "grader" / "run.py")
        (staging / "workspace").mkdir()
        for number, item in enumerate(files):
            _place_workspace_file(task_id, number, item, root, staging / "workspace")

    return build_once(cache_dir() / "pinchbench" / f"{task_id}-{digest.hexdigest()[:16]}", build)


def _place_workspace_file(task_id: str, number: int, item: Any, root: Path, workspace: Path) -> None:
    """Write one ``workspace_files`` entry: ``{path, content}`` inline, or ``{source, dest}`` copied
    from the suite's ``assets/`` folder (a bare string is a source). Paths that leave the suite or
    the workspace are refused: a task file must never pull host files into an agent's workspace."""
    where = f"task {task_id}: workspace_files[{number}]"
    if isinstance(item, str):
        item = {"source": item}
    if not isinstance(item, dict):
        raise TaskError(f"{where} must be a mapping with 'path' and 'content', or 'source' and 'dest'")
    if "content" in item:
        dest, content = item.get("path") or item.get("dest"), item["content"]
        if not isinstance(dest, str) or not isinstance(content, str):
            raise TaskError(f"{where}: an inline file needs a string 'path' and a string 'content'")
        target = _inside(workspace, dest, f"{where}: path")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        return
    source = item.get("source")
    if not isinstance(source, str) or not source:
        raise TaskError(f"{where} has neither 'content' nor a 'source' file")
    dest = item.get("dest") or Path(source).name
    if not isinstance(dest, str):
        raise TaskError(f"{where}: 'dest' must be a string")
    candidates = [root / "assets", root]  # published tasks name files under assets/; some forks keep the prefix
    found = next((p for p in (_inside(base, source, f"{where}: source") for base in candidates) if p.is_file()), None)
    if found is None:
        raise TaskError(f"{where}: source {source!r} not found under {root / 'assets'}")
    target = _inside(workspace, dest, f"{where}: dest")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(found, target)


def _inside(base: Path, relative: str, what: str) -> Path:
    """``base / relative``, refused when ``relative`` is absolute or the result (links resolved)
    lies outside ``base``."""
    if Path(relative).is_absolute() or ".." in Path(relative).parts:
        raise TaskError(f"{what} {relative!r} must be a relative path without '..'")
    resolved = (base / relative).resolve()
    if not resolved.is_relative_to(base.resolve()):
        raise TaskError(f"{what} {relative!r} leads outside {base}")
    return base / relative


def _grading_weights(task_id: str, raw: Any, grading: str) -> dict[str, float]:
    """``grading_weights`` as PinchBench reads them: default 0.5/0.5, non-negative, not both zero."""
    if grading != "hybrid":
        return {"automated": float(grading == "automated"), "llm_judge": float(grading == "llm_judge")}
    defaults = {"automated": 0.5, "llm_judge": 0.5}
    if raw is None:
        return defaults
    if not isinstance(raw, dict) or set(raw) - {"automated", "llm_judge"}:
        raise TaskError(f"task {task_id}: grading_weights must be a mapping with keys automated and llm_judge")
    weights = {key: raw.get(key, defaults[key]) for key in defaults}
    for key, value in weights.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise TaskError(f"task {task_id}: grading_weights.{key} must be a non-negative number, got {value!r}")
    if weights["automated"] + weights["llm_judge"] <= 0:
        raise TaskError(f"task {task_id}: grading_weights must not both be zero")
    return {key: float(value) for key, value in weights.items()}


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
