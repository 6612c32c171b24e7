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
import copy
import hashlib
import json
import random
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from harness_gym.tasks.base import Suite, Task, TaskError, register_loader
from harness_gym.tasks.builtin import builtin_root, load_task_dir

SWAPS: dict[type, type] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv,
}
COMPARISONS: dict[type, type] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}


@dataclass(frozen=True)
class Mutation:
    operator: str
    file: str
    line: int
    original: str  # the source segment replaced
    mutated: str


def _mutants(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """(operator name, mutated copy) for every mutation that applies to ``node`` itself."""
    if isinstance(node, ast.BinOp) and type(node.op) in SWAPS:
        new = copy.deepcopy(node)
        new.op = SWAPS[type(node.op)]()
        yield "operator swap", new
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in COMPARISONS:
        new = copy.deepcopy(node)
        new.ops = [COMPARISONS[type(node.ops[0])]()]
        yield "wrong comparison", new
    if isinstance(node, ast.BoolOp):
        new = copy.deepcopy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield "boolean swap", new
    if isinstance(node, ast.Constant) and type(node.value) is int and not isinstance(node.value, bool):
        for delta in (1, -1):
            yield "off by one", ast.Constant(node.value + delta)
    if isinstance(node, ast.If):
        negated = copy.deepcopy(node)
        negated.test = ast.UnaryOp(ast.Not(), node.test)
        yield "negated condition", negated
        if node.orelse:
            dropped = copy.deepcopy(node)
            dropped.orelse = []
            yield "dropped branch", dropped


def mutations(source: str, file: str) -> list[tuple[Mutation, str]]:
    """Every single-site mutation of a source file, as (mutation, mutated source)."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)) or not hasattr(node, "lineno"):
            continue
        segment = ast.get_source_segment(source, node)
        if segment is None:
            continue
        for operator, mutant in _mutants(node):
            if node.lineno == node.end_lineno:
                replacement = ast.unparse(mutant)
                line = lines[node.lineno - 1]
                start, end = node.col_offset, node.end_col_offset
                new_line = line[:start] + replacement + line[end:]
                new_source = "".join([*lines[: node.lineno - 1], new_line, *lines[node.lineno :]])
                mutation = Mutation(operator, file, node.lineno, line, new_line)
            else:  # a multi-line statement (an if with branches): re-render the whole statement
                indent = " " * node.col_offset
                body = "\n".join(indent + text if text else text for text in ast.unparse(mutant).splitlines()) + "\n"
                original = "".join(lines[node.lineno - 1 : node.end_lineno])
                new_source = "".join(lines[: node.lineno - 1]) + body + "".join(lines[node.end_lineno :])
                mutation = Mutation(operator, file, node.lineno, original, body)
            try:
                ast.parse(new_source)
            except SyntaxError:
                continue
            if new_source != source:
                out.append((mutation, new_source))
    return out


def correct_project(task: Task, destination: Path) -> None:
    """The task's workspace with its reference solution's edits applied (our own data, on the host)."""
    task.materialize(destination)
    for step in task.solution:
        arguments = step["arguments"]
        if step["tool"] == "file_editor" and arguments.get("command") == "str_replace":
            path = destination / arguments["path"]
            path.write_text(path.read_text().replace(arguments["old_str"], arguments["new_str"], 1))


def run_hidden_tests(task: Task, project: Path) -> float:
    """The task's grader run directly on a project folder (our own tests and code, no agent)."""
    with tempfile.TemporaryDirectory(prefix="harness-gym-verify-") as grader:
        for source in task.grader_files:
            if Path(source).is_dir():
                shutil.copytree(source, grader, dirs_exist_ok=True)
            else:
                shutil.copy2(source, grader)
        command = task.grade_command.replace("{grader}", grader).split()
        command[0] = "/usr/bin/python3" if command[0] == "python3" else command[0]
        result = subprocess.run(
            [command[0], "-I", *command[1:]], cwd=project, capture_output=True, text=True, timeout=120
        )
    try:
        return float(json.loads(result.stdout.strip().splitlines()[-1])["reward"])
    except (ValueError, IndexError, KeyError):
        return 0.0


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
) -> list[str]:
    """Write up to ``count`` verified, deduplicated tasks to ``out``; returns their ids."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    projects = [
        load_task_dir(d)
        for d in sorted(builtin_root().iterdir())
        if d.is_dir() and not d.name.startswith("_") and (d / "task.yaml").exists()
    ]
    projects = [p for p in projects if p.metadata.get("family") == "repository-repair"]
    rng = random.Random(seed)
    candidates = []
    with tempfile.TemporaryDirectory(prefix="harness-gym-generate-") as scratch:
        fixed: dict[str, Path] = {}
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
                source = path.read_text()
                candidates += [
                    (project, relative, mutation, mutated) for mutation, mutated in mutations(source, relative)
                ]
        rng.shuffle(candidates)
        seen: set[str] = set()
        written: list[str] = []
        for project, relative, mutation, mutated in candidates:
            if len(written) >= count:
                break
            digest = hashlib.sha256(f"{project.id}\0{relative}\0{mutated}".encode()).hexdigest()[:10]
            if digest in seen:
                continue
            seen.add(digest)
            trial = Path(scratch) / "trial"
            shutil.rmtree(trial, ignore_errors=True)
            shutil.copytree(fixed[project.id], trial)
            (trial / relative).write_text(mutated)
            if run_hidden_tests(project, trial) != 0.0:
                continue  # the hidden tests do not notice this mutation
            task_id = f"gen-{project.id}-{digest}"
            _write_task(out / task_id, task_id, project, trial, relative, mutation, mutated, rng.random() < eval_share)
            written.append(task_id)
            if progress:
                progress(len(written))
    return written


def _write_task(
    folder: Path,
    task_id: str,
    project: Task,
    workspace: Path,
    relative: str,
    mutation: Mutation,
    mutated: str,
    is_eval: bool,
) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(workspace, folder / "workspace")
    grader = folder / "grader"
    for source in project.grader_files:
        if Path(source).is_dir():
            shutil.copytree(source, grader, dirs_exist_ok=True)
        else:
            grader.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, grader)
    function = _function_of(mutated, mutation.line)
    where = f"`{function.name}` in {relative}" if function else relative
    described = (ast.get_docstring(function) or "").strip() if function else ""
    instruction = (
        f"The repository at {project.mount_path} has a regression: {where} no longer behaves as documented"
        + (f" ({described})" if described else "")
        + ". Find the bug and fix it; keep the public interface unchanged."
    )
    old = _unique_context(mutated, mutation.mutated)
    new = old.replace(mutation.mutated, mutation.original, 1)
    meta = {
        "id": task_id,
        "family": "generated-repair",
        "split": "eval" if is_eval else "train",
        "mount_path": project.mount_path,
        "instruction": instruction,
        "grade_command": project.grade_command,
        "metadata": {"source_task": project.id, "operator": mutation.operator, "file": relative, "line": mutation.line},
        "solution": [
            {
                "tool": "file_editor",
                "arguments": {"command": "str_replace", "path": relative, "old_str": old, "new_str": new},
            }
        ],
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
