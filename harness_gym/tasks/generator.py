"""Procedural repair tasks: seeded bug injection into the built-in repository-repair projects.

Each built-in repair task's reference solution gives a correct project. A mutation operator
(operator swap, comparison change, boolean swap, off-by-one, negated condition, dropped branch)
is applied at one site of one source file; the result becomes a task only if the project's hidden
tests fail on the mutated code (they pass on the correct one, checked per project). Tasks are
deduplicated by the mutated source and are reproducible from the seed. The output folders use the
built-in task format, loadable as ``tasks="generated:<folder>"``.

    harness-gym tasks generate --out generated --count 2000 --seed 0
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import random
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from harness_gym.sandboxes.base import copy_grader_files, staged_grader
from harness_gym.sandboxes.options import DEFAULTS
from harness_gym.sandboxes.shell import run_oneshot
from harness_gym.tasks.base import Suite, Task, TaskError, parse_grader_output, register_loader
from harness_gym.tasks.builtin import builtin_root, load_task_dir
from harness_gym.tasks.mutants import (
    MutantPool,
    Mutation,
    apply_mutations,
    changed_function_ranges,
    code_mutants,
    grader_digest,
    load_operators,
    mutations,
    sample,
)

# (grader digest, file, digest of the mutated file) -> whether the hidden tests failed on it: the
# outcome depends on nothing else, so later generate() calls in this process reuse it
_KILLED: dict[tuple[str, str, str], bool] = {}


def correct_project(task: Task, destination: Path) -> None:
    """The task's workspace with its reference solution's edits applied (our own data, on the host)."""
    task.materialize(destination)
    for step in task.solution:
        arguments = step["arguments"]
        if step["tool"] == "file_editor" and arguments.get("command") == "str_replace":
            path = destination / arguments["path"]
            path.write_text(path.read_text().replace(arguments["old_str"], arguments["new_str"], 1))


def run_hidden_tests(task: Task, project: Path, timeout_s: float = 5.0) -> float | None:
    """The task's grader run directly on a project folder (our own tests and code, no agent, so no
    sandbox), with the grader files staged as every backend stages them; None when the tests do not
    finish within ``timeout_s``."""
    with staged_grader(task.grader_files) as grader:
        command = task.grade_command.replace("{grader}", str(grader)).split()
        command[0] = "/usr/bin/python3" if command[0] == "python3" else command[0]
        result = run_oneshot([command[0], "-I", *command[1:]], timeout_s, DEFAULTS.output_limit_chars, cwd=project)
    if result.timed_out:
        return None  # the code hangs: no good task (graders would wait for their time limit)
    return parse_grader_output(task.id, result.output, result.exit_code).reward


def _unique_context(text: str, mutated_block: str) -> str:
    """The smallest span around the mutated lines that occurs once in the mutated file."""
    lines = text.splitlines(keepends=True)
    block = mutated_block if mutated_block.endswith("\n") else mutated_block + "\n"
    start = text.find(block)
    first = text[:start].count("\n")
    last = first + block.count("\n")
    while text.count("".join(lines[first:last])) > 1 and (first > 0 or last < len(lines)):
        first, last = max(first - 1, 0), min(last + 1, len(lines))
    return "".join(lines[first:last])


def _function_of(source: str, line: int) -> ast.FunctionDef | None:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef) and node.lineno <= line <= (node.end_lineno or line):
            return node
    return None


def generate(
    out: str | Path,
    count: int = 100,
    seed: int = 0,
    eval_share: float = 0.1,
    progress: Callable[[int], None] | None = None,
    max_bugs: int = 3,
    mutants: int = 5,
    project_ids: Sequence[str] | None = None,
) -> list[str]:
    """Write up to ``count`` verified, deduplicated tasks to ``out``; returns their ids.

    First-order tasks (one bug) come first, in seeded random order; when they run out, tasks with
    two, then three bugs in different places of one project (higher-order mutants) follow, up to
    ``max_bugs``. A task is kept only when its hidden tests also kill every one of ``mutants``
    sampled mutants (tasks/mutation.py) of each function its bugs are in: a grader that accepts a
    wrong fix there would pay for it (0: no such check). The score is in the task's metadata.
    ``project_ids`` limits the built-in repair projects mutated (default: all): a smaller supply.
    """
    if mutants < 0:
        raise ValueError(f"mutants must be 0 (no check) or more, not {mutants}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    projects = [
        load_task_dir(d)
        for d in sorted(builtin_root().iterdir())
        if d.is_dir() and not d.name.startswith("_") and (d / "task.yaml").exists()
    ]
    projects = [p for p in projects if p.metadata.get("family") == "repository-repair"]
    if project_ids is not None:
        unknown = sorted(set(project_ids) - {p.id for p in projects})
        if unknown:
            known = ", ".join(p.id for p in projects)
            raise ValueError(f"not built-in repair projects: {', '.join(unknown)} (they are: {known})")
        projects = [p for p in projects if p.id in set(project_ids)]
    rng = random.Random(seed)
    written: list[str] = []
    with tempfile.TemporaryDirectory(prefix="harness-gym-generate-") as scratch:
        fixed: dict[str, Path] = {}
        sources: dict[tuple[str, str], str] = {}
        singles: list[tuple[Task, Mutation]] = []
        for project in projects:
            folder = Path(scratch) / project.id
            correct_project(project, folder)
            if run_hidden_tests(project, folder) != 1.0:
                raise TaskError(f"task {project.id}: its reference solution does not pass its hidden tests")
            fixed[project.id] = folder
            for path in sorted(folder.rglob("*.py")):
                relative = str(path.relative_to(folder))
                if "test" in Path(relative).name or relative.startswith("tests/"):
                    continue
                sources[(project.id, relative)] = path.read_text()
                singles += [(project, mutation) for mutation, _ in mutations(sources[(project.id, relative)], relative)]
        rng.shuffle(singles)
        detected: list[tuple[Task, Mutation]] = []
        seen: set[str] = set()

        table = load_operators()["code"]
        strength: dict[tuple[str, str, int, int], tuple[int, int]] = {}

        def grader_strength(project: Task, files: dict[str, str]) -> tuple[int, int]:
            """(killed, valid) over a sample of mutants of the correct code of each function the
            bugs are in; per function once (its mutants are the same whichever bug is in it)."""
            killed = valid = 0
            equivalent = dict(project.metadata.get("equivalent_mutants") or {})
            for relative, text in files.items():
                correct = sources[(project.id, relative)]
                for span in changed_function_ranges(text, correct):
                    key = (project.id, relative, *span)
                    if key not in strength:
                        pool = MutantPool()
                        code_mutants(relative, text, correct, table, pool, [span])
                        candidates = [m for m in pool.mutants if m.digest not in equivalent]
                        chosen = sample(candidates, mutants, seed, f"{project.id}:{relative}:{span[0]}")
                        outcomes = [kills(project, relative, m.files[relative]) for m in chosen]
                        strength[key] = (sum(outcomes), len(outcomes))
                    killed, valid = killed + strength[key][0], valid + strength[key][1]
            return killed, valid

        def kills(project: Task, relative: str, mutated: str) -> bool:
            key = (grader_digest(project), relative, hashlib.sha256(mutated.encode()).hexdigest())
            if key not in _KILLED:
                folder = Path(scratch) / "mutant"
                shutil.rmtree(folder, ignore_errors=True)
                shutil.copytree(fixed[project.id], folder)
                (folder / relative).write_text(mutated)
                _KILLED[key] = run_hidden_tests(project, folder) != 1.0  # failed, or hung
            return _KILLED[key]

        def attempt(project: Task, chosen: list[Mutation]) -> bool:
            files = {
                m.file: apply_mutations(sources[(project.id, m.file)], [c for c in chosen if c.file == m.file])
                for m in chosen
            }
            key = json.dumps([project.id, sorted(files.items())])
            digest = hashlib.sha256(key.encode()).hexdigest()[:10]
            if digest in seen:
                return False
            seen.add(digest)
            killed, valid = grader_strength(project, files) if mutants else (0, 0)
            if mutants and (valid == 0 or killed < valid):
                return False  # some wrong fix of these functions would pass the hidden tests
            trial = Path(scratch) / "trial"
            shutil.rmtree(trial, ignore_errors=True)
            shutil.copytree(fixed[project.id], trial)
            for relative, text in files.items():
                (trial / relative).write_text(text)
            if run_hidden_tests(project, trial) != 0.0:
                return False  # the hidden tests do not notice it (or the code hangs)
            task_id = f"gen-{project.id}-{digest}"
            score = {"mutation_score": killed / valid, "mutants_checked": valid} if mutants else {}
            _write_task(out / task_id, task_id, project, trial, chosen, files, rng.random() < eval_share, score)
            written.append(task_id)
            if progress:
                progress(len(written))
            return True

        for project, mutation in singles:
            if len(written) >= count:
                return written
            if attempt(project, [mutation]):
                detected.append((project, mutation))
        by_project: dict[str, list[Mutation]] = {}
        for project, mutation in detected:
            by_project.setdefault(project.id, []).append(mutation)
        projects_by_id = {p.id: p for p in projects}
        for bugs in range(2, max_bugs + 1):  # higher-order mutants: several detected bugs at once
            combos = [
                (projects_by_id[pid], list(combo))
                for pid, found in by_project.items()
                for combo in itertools.combinations(found, bugs)
                if _disjoint(combo)
            ]
            rng.shuffle(combos)
            for project, chosen in combos:
                if len(written) >= count:
                    return written
                attempt(project, chosen)
    return written


def _disjoint(chosen: Sequence[Mutation]) -> bool:
    """No two mutations touch the same lines of the same file."""
    taken: set[tuple[str, int]] = set()
    for mutation in chosen:
        lines = {(mutation.file, line) for line in mutation.span}
        if taken & lines:
            return False
        taken |= lines
    return True


def _write_task(
    folder: Path,
    task_id: str,
    project: Task,
    workspace: Path,
    chosen: list[Mutation],
    files: dict[str, str],
    is_eval: bool,
    grader_strength: dict[str, Any] | None = None,
) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(workspace, folder / "workspace")
    grader = folder / "grader"
    copy_grader_files(project.grader_files, Path(grader))
    places = []
    for mutation in chosen:
        function = _function_of(files[mutation.file], mutation.line)
        described = (ast.get_docstring(function) or "").strip() if function else ""
        where = f"`{function.name}` in {mutation.file}" if function else mutation.file
        places.append(where + (f" ({described})" if described else ""))
    if len(chosen) == 1:
        instruction = (
            f"The repository at {project.mount_path} has a regression: {places[0]} no longer behaves as "
            "documented. Find the bug and fix it"
        )
    else:
        instruction = (
            f"The repository at {project.mount_path} has {len(chosen)} regressions: "
            + "; ".join(places)
            + " no longer behave as documented. Find the bugs and fix them"
        )
    instruction += "; keep the public interface unchanged."
    solution = []
    current = dict(files)
    for mutation in sorted(chosen, key=lambda m: (m.file, -m.line)):
        old = _unique_context(current[mutation.file], mutation.mutated)
        new = old.replace(mutation.mutated, mutation.original, 1)
        current[mutation.file] = current[mutation.file].replace(old, new, 1)
        solution.append(
            {
                "tool": "file_editor",
                "arguments": {"command": "str_replace", "path": mutation.file, "old_str": old, "new_str": new},
            }
        )
    meta = {
        "id": task_id,
        "family": "generated-repair",
        "split": "eval" if is_eval else "train",
        "mount_path": project.mount_path,
        "instruction": instruction,
        "grade_command": project.grade_command,
        "signed_verdict": project.signed_verdict,
        "metadata": {
            "source_task": project.id,
            "bugs": len(chosen),
            "mutations": [{"operator": m.operator, "file": m.file, "line": m.line} for m in chosen],
            **(grader_strength or {}),
        },
        "solution": solution,
    }
    (folder / "task.yaml").write_text(yaml.safe_dump(meta, sort_keys=False, allow_unicode=True))


def load_generated(argument: str) -> Suite:
    """``generated:<folder written by generate()>[#split]``."""
    path_text, _, split = argument.partition("#")
    root = Path(path_text).expanduser()
    if not path_text or not root.is_dir():
        raise TaskError(f"generated: {path_text!r} is not a folder of generated tasks")
    suite = Suite([])
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            task = load_task_dir(folder)
        except TaskError as exc:
            suite.errors.append(str(exc))
            continue
        if not split or task.split == split:
            suite.tasks.append(task)
    return suite


register_loader("generated", load_generated)
