"""``harness-gym tasks audit SUITE --mutants N``: how strong is each task's grader?

A grader that accepts a wrong solution pays a policy for it. For every task with a reference
solution, the solution is replayed in the task's sandbox (the reference workspace, which must
score 1). Wrong versions of it, *mutants*, are then made from the files it changed: code mutants
change one site of the functions the solution changed (the generator's operators and the ones in
``tasks/mutation_operators.yaml``); output mutants perturb a file it wrote (truncated, reordered,
numbers off by one, a section emptied). Each mutant is graded by the task's own grader in a fresh
sandbox; a mutant that still scores 1 *survives*. Per task the mutation score is killed / valid
mutants; per suite, the share of tasks with at least one survivor.

Mutants that do not compile or equal the reference are discarded and counted. A task may declare a
mutant equivalent to the reference (``metadata.equivalent_mutants: {key: reason}``); it is then
neither killed nor survived. Results are appended to a JSON-lines file keyed by task, grader and
mutant, so an interrupted audit resumes, and a changed grader is audited afresh.

    harness-gym tasks audit builtin --mutants 40 --workers 2 --json m.json --markdown m.md
"""

from __future__ import annotations

import ast
import copy
import difflib
import functools
import hashlib
import itertools
import json
import random
import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness_gym.records import ResultsFile, load_records
from harness_gym.sandboxes.base import Sandbox, SandboxError, choose_backend, create_sandbox
from harness_gym.tasks.audit import _PATH_TOKEN, UNSAFE_BACKENDS
from harness_gym.tasks.base import Task, TaskError
from harness_gym.tasks.generator import _mutants as generator_operators
from harness_gym.tasks.generator import candidate_mutations

MAX_OUTPUT_BYTES = 1 << 20  # reference outputs larger than this are not perturbed
MIN_MUTANT_TIMEOUT_S = 10.0


# ------------------------------------------------------------------------------ operators (data)


@functools.cache
def load_operators(path: str | None = None) -> dict[str, Any]:
    """The operator tables (the built-in ones, or a YAML file of the same schema), validated."""
    text = (
        Path(path).read_text(encoding="utf-8")
        if path is not None
        else resources.files("harness_gym").joinpath("tasks/mutation_operators.yaml").read_text(encoding="utf-8")
    )
    data = yaml.safe_load(text)
    schema = json.loads(
        resources.files("harness_gym").joinpath("schemas/mutation_operators.schema.json").read_text(encoding="utf-8")
    )
    errors = list(jsonschema.validators.validator_for(schema)(schema).iter_errors(data))
    if errors:
        raise TaskError(
            f"mutation operators {path or 'mutation_operators.yaml'} are invalid: "
            + "; ".join(f"{e.json_path}: {e.message}" for e in errors)
        )
    return data


SYMMETRIC_COMPARISONS = (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)  # sides swapped: the same test

_CONSTANT_CHANGES: dict[str, Callable[[Any], Any]] = {
    "zero": lambda v: type(v)(0),
    "negated": lambda v: -v,
    "doubled": lambda v: 2 * v,
    "plus_one": lambda v: v + 1.0,
    "emptied": lambda v: "",
    "suffixed": lambda v: v + "x",
}


def _shifted(node: ast.expr, delta: int) -> ast.expr:
    return ast.BinOp(copy.deepcopy(node), ast.Add() if delta > 0 else ast.Sub(), ast.Constant(abs(delta)))


def _place(node: ast.AST) -> tuple[str, int, int, int | None, int | None]:
    return (
        type(node).__name__,
        getattr(node, "lineno", 0),
        getattr(node, "col_offset", 0),
        getattr(node, "end_lineno", None),
        getattr(node, "end_col_offset", None),
    )


def message_strings(source: str) -> set[tuple[str, int, int, int | None, int | None]]:
    """Places of string constants that are no behaviour: docstrings, exception messages, f-string
    text. Changing them makes no wrong solution, so no mutant."""
    places = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                places.add(_place(first.value))
        if isinstance(node, (ast.Raise, ast.JoinedStr)):
            places |= {_place(n) for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return places


def code_operators(
    table: Mapping[str, Any], protected: AbstractSet[tuple[str, int, int, int | None, int | None]] = frozenset()
) -> Callable[[ast.AST], Iterator[tuple[str, ast.AST]]]:
    """Node operators: the generator's, then those the ``code`` table adds (see mutation_operators.yaml);
    ``protected``: places of constants left alone (see :func:`message_strings`)."""
    swaps = {getattr(ast, k): [getattr(ast, v) for v in vs] for k, vs in table["binary_swaps"].items()}
    swapped_operands = tuple(getattr(ast, name) for name in table["swapped_operands"])
    dropped = tuple(getattr(ast, name) for name in table["dropped_statements"])
    constants = table["constant_changes"]
    commutative = set(table.get("commutative_calls", []))

    def propose(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
        new: Any  # a copy of whichever node kind the operator mutates
        yield from generator_operators(node)
        if isinstance(node, (ast.BinOp, ast.AugAssign)):
            for new_op in swaps.get(type(node.op), []):
                new = copy.deepcopy(node)
                new.op = new_op()
                yield "operator swap", new
        if isinstance(node, ast.BinOp) and isinstance(node.op, swapped_operands):
            yield "swapped arguments", ast.BinOp(copy.deepcopy(node.right), node.op, copy.deepcopy(node.left))
        if (
            table["swapped_comparison_sides"]
            and isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and not isinstance(node.ops[0], SYMMETRIC_COMPARISONS)
        ):
            yield (
                "swapped arguments",
                ast.Compare(copy.deepcopy(node.comparators[0]), node.ops, [copy.deepcopy(node.left)]),
            )
        if (
            table["swapped_call_arguments"]
            and isinstance(node, ast.Call)
            and len(node.args) >= 2
            and not any(isinstance(a, ast.Starred) for a in node.args[:2])
            and not (isinstance(node.func, ast.Name) and node.func.id in commutative)
        ):
            new = copy.deepcopy(node)
            new.args[0], new.args[1] = new.args[1], new.args[0]
            yield "swapped arguments", new
        if isinstance(node, ast.Constant) and not isinstance(node.value, bool) and _place(node) not in protected:
            kind = type(node.value).__name__
            for change in constants.get(kind, []):
                if change == "negated" and not node.value:
                    continue  # -0 is 0
                yield "constant change", ast.Constant(_CONSTANT_CHANGES[change](node.value))
        docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        if not docstring and (
            isinstance(node, dropped) or ("Expr" in table["dropped_statements"] and isinstance(node, ast.Expr))
        ):
            yield "dropped statement", ast.Pass()
        for delta in table["boundary_shifts"]:
            if isinstance(node, ast.Subscript) and not isinstance(node.slice, (ast.Slice, ast.Tuple)):
                new = copy.deepcopy(node)
                new.slice = _shifted(node.slice, delta)
                yield "boundary shift", new
            if isinstance(node, ast.Slice):
                for bound in ("lower", "upper"):
                    if getattr(node, bound) is not None:
                        new = copy.deepcopy(node)
                        setattr(new, bound, _shifted(getattr(node, bound), delta))
                        yield "boundary shift", new
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range":
                for index in range(min(len(node.args), 2)):
                    new = copy.deepcopy(node)
                    new.args[index] = _shifted(node.args[index], delta)
                    yield "boundary shift", new
        negations = table["negations"]
        if "UnaryNot" in negations and isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            yield "negated condition", copy.deepcopy(node.operand)
        if ("While" in negations and isinstance(node, ast.While)) or (
            "IfExp" in negations and isinstance(node, ast.IfExp)
        ):
            new = copy.deepcopy(node)
            new.test = ast.UnaryOp(ast.Not(), node.test)
            yield "negated condition", new

    return propose


# ------------------------------------------------------------------------------------ mutants


@dataclass(frozen=True)
class Mutant:
    """A wrong version of the reference workspace: ``files`` (relative path -> full content) replace
    the reference's; ``diff`` is the unified diff against it."""

    operator: str
    file: str
    line: int
    files: Mapping[str, str]
    diff: str

    @property
    def digest(self) -> str:
        body = json.dumps(sorted(self.files.items()), ensure_ascii=False)
        return hashlib.sha256(body.encode()).hexdigest()[:16]


@dataclass
class MutantPool:
    """Every valid mutant of a task, and how many proposals were discarded and why."""

    mutants: list[Mutant] = field(default_factory=list)
    not_compiling: int = 0
    identical: int = 0
    duplicates: int = 0


def unified_diff(path: str, before: str, after: str) -> str:
    return "".join(
        difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{path}", f"b/{path}", n=2
        )
    )


def changed_function_ranges(before: str | None, after: str) -> list[tuple[int, int]]:
    """Line ranges (1-based, inclusive) in ``after`` of the functions a change touched: the innermost
    function around each changed line, or the top-level statement where no function is; for a new
    file (``before`` None), every function."""
    tree = ast.parse(after)
    functions = sorted(
        (
            (n.lineno, n.end_lineno or n.lineno)
            for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        ),
        key=lambda r: r[1] - r[0],
    )
    if before is None:
        return functions or [(1, max(len(after.splitlines()), 1))]
    changed: set[int] = set()
    matcher = difflib.SequenceMatcher(None, before.splitlines(), after.splitlines(), autojunk=False)
    for tag, _, _, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            changed |= set(range(j1 + 1, j2 + 1)) if j2 > j1 else {max(j1, 1)}
    ranges: set[tuple[int, int]] = set()
    for line in changed:
        around = next((r for r in functions if r[0] <= line <= r[1]), None)
        if around is None:
            around = next(
                (
                    (s.lineno, s.end_lineno or s.lineno)
                    for s in tree.body
                    if s.lineno <= line <= (s.end_lineno or s.lineno)
                ),
                None,
            )
        if around is not None:
            ranges.add(around)
    return sorted(ranges)


def _early_returns(source: str, ranges: Sequence[tuple[int, int]], kinds: Sequence[str]) -> Iterator[tuple[int, str]]:
    """(line, mutated source) with ``return <value>`` inserted before the first statement of each
    function in ``ranges``."""
    lines = source.splitlines(keepends=True)
    for node in ast.walk(ast.parse(source)):
        if (
            not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            or (node.lineno, node.end_lineno) not in ranges
        ):
            continue
        body = node.body[1:] if ast.get_docstring(node) is not None and len(node.body) > 1 else node.body
        first = body[0]
        indent = " " * first.col_offset
        parameters = [a.arg for a in (*node.args.posonlyargs, *node.args.args) if a.arg not in ("self", "cls")]
        for kind in kinds:
            value = "None" if kind == "None" else (parameters[0] if parameters else None)
            if value is None:
                continue
            inserted = f"{indent}return {value}\n"
            yield first.lineno, "".join([*lines[: first.lineno - 1], inserted, *lines[first.lineno - 1 :]])


def code_mutants(
    path: str,
    before: str | None,
    after: str,
    table: Mapping[str, Any],
    pool: MutantPool,
    ranges: Sequence[tuple[int, int]] | None = None,
) -> None:
    """Add to ``pool`` every code mutant of ``after`` (a Python file the reference changed) inside the
    functions it changed (or inside ``ranges``, lines of ``after``)."""
    ranges = changed_function_ranges(before, after) if ranges is None else ranges
    reference_tree = ast.dump(ast.parse(after))

    def inside(line: int) -> bool:
        return any(start < line <= end or (start == end == line) for start, end in ranges)

    proposals: list[tuple[str, int, str]] = [
        (m.operator, m.line, text)
        for m, text in candidate_mutations(after, path, code_operators(table, message_strings(after)))
        if inside(m.line)
    ]
    proposals += [("early return", line, text) for line, text in _early_returns(after, ranges, table["early_returns"])]
    for operator, line, text in proposals:
        try:
            compile(text, path, "exec", dont_inherit=True)
            same = ast.dump(ast.parse(text)) == reference_tree
        except (SyntaxError, ValueError):
            pool.not_compiling += 1
            continue
        if same:
            pool.identical += 1
            continue
        pool.mutants.append(Mutant(operator, path, line, {path: text}, unified_diff(path, after, text)))


_PYTHON_SHEBANG = re.compile(r"#![^\n]*python")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w])")
_HEADING = re.compile(r"^(#{1,6} |\[[^\]]+\]\s*$|[A-Za-z][\w .-]*:\s*$)")


def _json_containers(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, (list, dict)) and value:
        yield path, value
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            yield from _json_containers(item, (*path, key))


def _json_replaced(document: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copied = copy.deepcopy(document)
    target = copied
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return copied


def _sections(lines: Sequence[str]) -> list[tuple[int, int]]:
    """[start, end) line ranges of the content under each heading (Markdown, INI, ``Name:``) or of
    each blank-line separated block."""
    headings = [i for i, line in enumerate(lines) if _HEADING.match(line)]
    if headings:
        bounds = [*headings, len(lines)]
        return [(a + 1, b) for a, b in itertools.pairwise(bounds) if any(x.strip() for x in lines[a + 1 : b])]
    blocks, start = [], None
    for i, line in enumerate([*lines, ""]):
        if line.strip() and start is None:
            start = i
        elif not line.strip() and start is not None:
            blocks.append((start, i))
            start = None
    return blocks if len(blocks) > 1 else []


def output_perturbations(text: str, table: Mapping[str, Any]) -> Iterator[tuple[str, int, str]]:
    """(operator, line, perturbed text) for a reference output file. A JSON document's lines are
    not reordered (swapped object members are the same document; its lists are reversed instead)."""
    lines = text.splitlines(keepends=True)
    try:
        document = json.loads(text)
    except ValueError:
        document = None
    truncated = table.get("truncated", [])
    if "last_line_dropped" in truncated and lines:
        yield "truncated", len(lines), "".join(lines[:-1])
    if "second_half_dropped" in truncated and len(lines) >= 4:
        yield "truncated", len(lines) // 2 + 1, "".join(lines[: len(lines) // 2])
    if "emptied" in truncated:
        yield "truncated", 1, ""
    reordered = table.get("reordered", [])
    if "lines_reversed" in reordered and len(lines) >= 2 and document is None:
        yield "reordered", 1, "".join(line if line.endswith("\n") else line + "\n" for line in reversed(lines))
    if "adjacent_lines_swapped" in reordered and document is None:
        for i in range(len(lines) - 1):
            swapped = list(lines)
            swapped[i], swapped[i + 1] = swapped[i + 1], swapped[i]
            if not swapped[i].endswith("\n"):
                swapped[i] += "\n"
                swapped[i + 1] = swapped[i + 1].rstrip("\n")
            yield "reordered", i + 1, "".join(swapped)
    for match in _NUMBER.finditer(text):
        for delta in table.get("off_by_one_numbers", []):
            number = match.group()
            whole, dot, fraction = number.partition(".")
            changed = f"{int(whole) + delta}{dot}{fraction}"
            line = text.count("\n", 0, match.start()) + 1
            yield "off-by-one number", line, text[: match.start()] + changed + text[match.end() :]
    empty_sections = table.get("empty_sections", [])
    if document is not None:
        indent = 2 if "\n" in text.strip() else None
        ending = "\n" if text.endswith("\n") else ""
        for path, container in _json_containers(document):
            if "json_container_emptied" in empty_sections:
                emptied = _json_replaced(document, path, type(container)())
                yield "empty section", 1, json.dumps(emptied, indent=indent, ensure_ascii=False) + ending
            if "json_list_reversed" in reordered and isinstance(container, list) and len(container) >= 2:
                flipped = _json_replaced(document, path, container[::-1])
                yield "reordered", 1, json.dumps(flipped, indent=indent, ensure_ascii=False) + ending
    elif "section_emptied" in empty_sections:
        for start, end in _sections(lines):
            yield "empty section", start + 1, "".join(lines[:start] + lines[end:])


def _text_files(root: Path) -> dict[str, str]:
    """Every regular text file under ``root`` (no symbolic link followed), by relative path."""
    found: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file() or ".git" in path.relative_to(root).parts:
            continue
        if path.stat().st_size > MAX_OUTPUT_BYTES:
            continue
        try:
            found[str(path.relative_to(root))] = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
    return found


def instruction_paths(task: Task) -> set[str]:
    """Workspace-relative paths (files and folders) the instruction names: the outputs it asks for."""
    root = task.mount_path.rstrip("/") + "/"
    found = set()
    for token in _PATH_TOKEN.findall(task.instruction):
        token = token.rstrip(".")
        relative = token[len(root) :] if token.startswith(root) else token.removeprefix("./")
        if relative and not relative.startswith("/") and ".." not in relative.split("/"):
            found.add(relative.rstrip("/"))
    return found


def _is_output(path: str, mentioned: set[str] | None) -> bool:
    if mentioned is None:
        return True
    parts = path.split("/")
    return any("/".join(parts[:i]) in mentioned for i in range(1, len(parts) + 1))


def mutant_pool(
    original: Mapping[str, str],
    reference: Mapping[str, str],
    operators: Mapping[str, Any],
    mentioned: set[str] | None = None,
) -> MutantPool:
    """Every valid mutant of the files the reference solution changed or created (``original`` and
    ``reference``: text files by relative path, before and after it ran), deduplicated.

    Python files that existed are the code it fixed: code mutants (so are Python scripts it wrote
    as outputs). Every other file is perturbed
    only where it is an output: a path in ``mentioned`` or under a folder there (None: every file);
    a helper script the solution wrote and ran is no output, and mutating it changes nothing graded."""
    pool = MutantPool()
    for path, after in sorted(reference.items()):
        before = original.get(path)
        if before == after or not ((before is not None and path.endswith(".py")) or _is_output(path, mentioned)):
            continue
        if path.endswith(".py") or _PYTHON_SHEBANG.match(after):
            try:
                code_mutants(path, before, after, operators["code"], pool)
                continue
            except SyntaxError:
                pass  # not Python after all: perturbed as an output
        for operator, line, text in output_perturbations(after, operators["output"]):
            if text == after:
                pool.identical += 1
                continue
            pool.mutants.append(Mutant(operator, path, line, {path: text}, unified_diff(path, after, text)))
    seen: set[str] = set()
    unique = []
    for mutant in pool.mutants:
        if mutant.digest in seen:
            pool.duplicates += 1
            continue
        seen.add(mutant.digest)
        unique.append(mutant)
    pool.mutants = unique
    return pool


def sample(pool: Sequence[Mutant], count: int | None, seed: int, task_id: str) -> list[Mutant]:
    """``count`` mutants (all when None or more than there are), the same ones for the same seed."""
    ordered = sorted(pool, key=lambda m: m.digest)
    if count is None or count >= len(ordered):
        return ordered
    return random.Random(f"{seed}:{task_id}").sample(ordered, count)


# ------------------------------------------------------------------------------------- running


def grader_digest(task: Task) -> str:
    """A digest of the task's grading (command and every grader file): a hardened grader is audited afresh."""
    digest = hashlib.sha256(f"{task.id}\0{task.grade_command}".encode())
    for root in task.grader_files:
        paths = sorted(p for p in Path(root).rglob("*") if p.is_file()) if Path(root).is_dir() else [Path(root)]
        for path in paths:
            digest.update(str(path.relative_to(root) if Path(root).is_dir() else path.name).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _open_sandbox(task: Task, backend: str | None, sandbox_options: Mapping[str, Any] | None) -> Sandbox:
    chosen = choose_backend(backend, task.image)
    if chosen in UNSAFE_BACKENDS:
        raise SandboxError(f"the mutation audit runs graders and refuses the {chosen!r} backend (no isolation)")
    return create_sandbox(chosen, task.image, **dict(sandbox_options or {}))


def replay_solution(sandbox: Sandbox, task: Task, timeout_s: float = 300.0) -> list[str]:
    """Run the task's reference tool calls in a started sandbox (bash through the shell, edits
    through the file_editor tool script), as the reference agent would; returns the failed steps'
    output (what to show when the reference does not score 1)."""
    mount = shlex.quote(task.mount_path)
    failures = []
    for number, step in enumerate(task.solution, 1):
        arguments = dict(step.get("arguments", {}))
        sandbox.run(f"cd {mount}", timeout_s)
        if step.get("tool") == "execute_bash":
            result = sandbox.run(str(arguments.get("command", "")), timeout_s)
        elif step.get("tool") == "file_editor":
            if arguments.get("command") == "view":
                continue
            result = sandbox.run_tool("file_editor.py", {**arguments, "root": task.mount_path}, timeout_s)
        else:
            raise TaskError(f"task {task.id}: the audit cannot replay solution tool {step.get('tool')!r}")
        if result.exit_code != 0:
            failures.append(f"step {number} exited {result.exit_code}: {result.output[-500:]}")
    return failures


def _graded(task: Task) -> Task:
    return replace(task, judge=None) if task.judge is not None else task


TRANSCRIPT = [{"role": "assistant", "content": "Done."}]


@dataclass
class Reference:
    """A task's reference workspace (after its solution ran) and the files it changed."""

    folder: Path
    reward: float
    error: str | None
    original: dict[str, str]
    solved: dict[str, str]
    grading_s: float = 0.0

    def mutant_timeout_s(self, task: Task) -> float:
        """How long a mutant's grading may take: a mutant that hangs is wrong (killed), and waiting
        the task's full grader time for each would make the audit crawl."""
        return min(task.grader_timeout_s, max(MIN_MUTANT_TIMEOUT_S, 10 * self.grading_s))


def build_reference(
    task: Task, destination: Path, backend: str | None = None, sandbox_options: Mapping[str, Any] | None = None
) -> Reference:
    """Replay the solution in a fresh sandbox, grade it, and copy the workspace to ``destination``."""
    with tempfile.TemporaryDirectory(prefix="harness-gym-original-") as scratch:
        task.materialize(Path(scratch))
        original = _text_files(Path(scratch))
    sandbox = _open_sandbox(task, backend, sandbox_options)
    try:
        workspace = sandbox.new_workspace()
        task.materialize(workspace)
        sandbox.start(workspace, task.mount_path, task.hidden_paths)
        failures = replay_solution(sandbox, task)
        # before grading: a grader may change the workspace (SWE-format ones apply the test patch)
        shutil.copytree(workspace, destination, symlinks=True, dirs_exist_ok=True)
        started = time.perf_counter()
        result = _graded(task).grade(sandbox, [{"role": "user", "content": task.instruction}, *TRANSCRIPT])
        grading_s = time.perf_counter() - started
    finally:
        sandbox.close()
    why = "; ".join([*([result.error] if result.error else []), *failures])
    if result.reward < 1.0 and not why:
        why = f"breakdown {json.dumps(result.breakdown, default=str)[:500]}"
    return Reference(destination, result.reward, why or None, original, _text_files(destination), grading_s)


@dataclass(frozen=True)
class MutantResult:
    """One mutant graded: ``survived`` when the grader still gave the reference's reward."""

    task_id: str
    key: str
    operator: str
    file: str
    line: int
    diff: str
    reward: float
    grader_error: str | None = None
    audit_error: str | None = None
    equivalent: str | None = None  # the task's reason for declaring it equivalent

    @property
    def mutant(self) -> str:
        """The mutant's digest (what ``metadata.equivalent_mutants`` names)."""
        return self.key.rsplit(":", 1)[-1]

    @property
    def survived(self) -> bool:
        return self.audit_error is None and self.equivalent is None and self.reward >= 1.0

    @property
    def killed(self) -> bool:
        return self.audit_error is None and self.equivalent is None and self.reward < 1.0

    def record(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "task": self.task_id,
            "operator": self.operator,
            "file": self.file,
            "line": self.line,
            "diff": self.diff,
            "reward": self.reward,
            "grader_error": self.grader_error,
            "audit_error": self.audit_error,
            "equivalent": self.equivalent,
        }


def run_mutant(
    task: Task,
    reference: Path,
    mutant: Mutant,
    key: str,
    backend: str | None = None,
    sandbox_options: Mapping[str, Any] | None = None,
    timeout_s: float | None = None,
) -> MutantResult:
    """Grade one mutant in a fresh sandbox holding the reference workspace with the mutant's files
    (within ``timeout_s``, default the task's grader time; a grading that times out scores 0)."""
    if timeout_s is not None:
        task = replace(task, grader_timeout_s=min(task.grader_timeout_s, timeout_s))
    base: dict[str, Any] = {
        "task_id": task.id,
        "key": key,
        "operator": mutant.operator,
        "file": mutant.file,
        "line": mutant.line,
        "diff": mutant.diff,
    }
    equivalent = dict(task.metadata.get("equivalent_mutants") or {}).get(mutant.digest)
    try:
        sandbox = _open_sandbox(task, backend, sandbox_options)
    except SandboxError as exc:
        return MutantResult(**base, reward=0.0, audit_error=f"{type(exc).__name__}: {exc}")
    try:
        workspace = sandbox.new_workspace()
        shutil.copytree(reference, workspace, symlinks=True, dirs_exist_ok=True)
        for relative, content in mutant.files.items():
            (workspace / relative).write_text(content, encoding="utf-8")
        sandbox.start(workspace, task.mount_path, task.hidden_paths)
        result = _graded(task).grade(sandbox, [{"role": "user", "content": task.instruction}, *TRANSCRIPT])
        return MutantResult(**base, reward=result.reward, grader_error=result.error, equivalent=equivalent)
    except (OSError, RuntimeError, ValueError) as exc:
        return MutantResult(**base, reward=0.0, audit_error=f"{type(exc).__name__}: {exc}")
    finally:
        sandbox.close()


# -------------------------------------------------------------------------------------- report


@dataclass
class TaskMutation:
    """The audit of one task: its mutants' results and what was discarded."""

    task_id: str
    results: list[MutantResult] = field(default_factory=list)
    pool_size: int = 0
    not_compiling: int = 0
    identical: int = 0
    duplicates: int = 0
    error: str | None = None  # the reference could not be built or did not score 1

    @property
    def valid(self) -> int:
        return sum(r.killed or r.survived for r in self.results)

    @property
    def killed(self) -> int:
        return sum(r.killed for r in self.results)

    @property
    def survivors(self) -> list[MutantResult]:
        return [r for r in self.results if r.survived]

    @property
    def errors(self) -> list[MutantResult]:
        return [r for r in self.results if r.audit_error]

    @property
    def score(self) -> float | None:
        """killed / valid; None when unknown (no valid mutant, a reference or audit error): a score
        must never hide a failure to measure."""
        if self.error or self.errors or not self.valid:
            return None
        return self.killed / self.valid


@dataclass
class MutationReport:
    tasks: list[TaskMutation]
    mutants_per_task: int | None
    seed: int

    def with_survivors(self) -> list[TaskMutation]:
        return [t for t in self.tasks if t.survivors]

    @property
    def survivor_share(self) -> float | None:
        """Share of audited tasks (a score or a survivor known) with at least one surviving mutant."""
        audited = [t for t in self.tasks if t.score is not None or t.survivors]
        return len(self.with_survivors()) / len(audited) if audited else None

    def scores(self) -> dict[str, float | None]:
        return {t.task_id: t.score for t in self.tasks}

    def to_json(self) -> dict[str, Any]:
        return {
            "mutants_per_task": self.mutants_per_task,
            "seed": self.seed,
            "tasks_with_survivors": len(self.with_survivors()),
            "tasks": len(self.tasks),
            "survivor_share": self.survivor_share,
            "per_task": {
                t.task_id: {
                    "score": t.score,
                    "valid": t.valid,
                    "killed": t.killed,
                    "survived": len(t.survivors),
                    "equivalent": sum(r.equivalent is not None for r in t.results),
                    "audit_errors": len(t.errors),
                    "pool": t.pool_size,
                    "discarded": {
                        "not_compiling": t.not_compiling,
                        "identical": t.identical,
                        "duplicates": t.duplicates,
                    },
                    "error": t.error,
                    "survivors": [r.record() for r in t.survivors],
                    "errors": [r.record() for r in t.errors],
                }
                for t in self.tasks
            },
        }

    def table(self) -> str:
        width = max([len(t.task_id) for t in self.tasks] + [4]) + 2
        lines = [f"{'task':<{width}}{'score':>7}{'killed':>8}{'valid':>7}{'pool':>6}{'discarded':>11}  notes"]
        for t in self.tasks:
            score = "-" if t.score is None else f"{t.score:.2f}"
            notes = t.error or (f"{len(t.errors)} audit errors" if t.errors else "")
            if t.survivors:
                notes = f"{len(t.survivors)} survived " + notes
            discarded = t.not_compiling + t.identical + t.duplicates
            lines.append(
                f"{t.task_id:<{width}}{score:>7}{t.killed:>8}{t.valid:>7}{t.pool_size:>6}{discarded:>11}  {notes}"
            )
        share = self.survivor_share
        lines.append(
            f"{len(self.with_survivors())} of {len(self.tasks)} tasks with a surviving mutant"
            + (f" ({share:.0%} of those audited)" if share is not None else "")
        )
        for t in self.with_survivors():
            for r in t.survivors:
                lines.append(
                    f"\nSURVIVED {t.task_id} [{r.mutant}] {r.operator} at {r.file}:{r.line}\n{r.diff.rstrip()}"
                )
        return "\n".join(lines)

    def markdown(self) -> str:
        share = self.survivor_share
        out = [
            "# Mutation audit",
            "",
            f"{self.mutants_per_task or 'all'} mutants per task, seed {self.seed}. "
            f"Tasks with a surviving mutant: {len(self.with_survivors())} of {len(self.tasks)}"
            + (f" ({share:.0%} of those audited)." if share is not None else "."),
            "",
            "| task | score | killed | valid | pool | discarded | notes |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for t in self.tasks:
            score = "–" if t.score is None else f"{t.score:.2f}"
            notes = t.error or (f"{len(t.errors)} audit errors" if t.errors else "")
            out.append(
                f"| {t.task_id} | {score} | {t.killed} | {t.valid} | {t.pool_size} | "
                f"{t.not_compiling + t.identical + t.duplicates} | {notes.replace('|', '/')} |"
            )
        for t in self.with_survivors():
            out += ["", f"## Survivors of {t.task_id}"]
            for r in t.survivors:
                out += ["", f"`{r.mutant}`: {r.operator} at `{r.file}:{r.line}`", "", "```diff", r.diff.rstrip(), "```"]
        return "\n".join(out) + "\n"


def mutation_audit(
    tasks: Sequence[Task],
    mutants: int | None = 20,
    *,
    seed: int = 0,
    workers: int = 1,
    backend: str | None = None,
    sandbox_options: Mapping[str, Any] | None = None,
    results_path: Path | None = None,
    operators: Mapping[str, Any] | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> MutationReport:
    """Audit every task with a reference solution with ``mutants`` sampled mutants each (None: all).

    ``progress(kind, total_delta_or_done)``: ``("total", n)`` when n more mutants are planned,
    ``("done", 1)`` per graded mutant. ``results_path``: a JSON-lines file of graded mutants; those
    already in it (without an audit error) are not graded again."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    repeated = sorted({t.id for t in tasks if [u.id for u in tasks].count(t.id) > 1})
    if repeated:
        raise ValueError(f"task ids must be unique in one audit; repeated: {repeated}")
    if backend in UNSAFE_BACKENDS:
        raise SandboxError(f"the mutation audit runs graders and refuses the {backend!r} backend (no isolation)")
    table = dict(operators or load_operators())
    done: dict[str, dict[str, Any]] = {}
    results_file = None
    if results_path is not None:
        results_file = ResultsFile(Path(results_path))
        results_file.repair()
        if Path(results_path).exists():
            done = {r["key"]: r for r in load_records(results_path) if r.get("key") and r.get("audit_error") is None}
    entries = {t.id: TaskMutation(t.id) for t in tasks}
    report = MutationReport([entries[t.id] for t in tasks], mutants, seed)
    with (
        tempfile.TemporaryDirectory(prefix="harness-gym-mutation-") as scratch,
        ThreadPoolExecutor(max_workers=workers) as pool,
    ):

        def prepare(task: Task) -> list[tuple[Task, Path, Mutant, str, float]]:
            entry = entries[task.id]
            if not task.solution:
                entry.error = "no reference solution"
                return []
            try:
                reference = build_reference(task, Path(scratch) / task.id, backend, sandbox_options)
            except (OSError, RuntimeError, ValueError) as exc:  # SandboxError, TaskError, a missing image: reported
                entry.error = f"reference: {type(exc).__name__}: {exc}"
                return []
            if reference.reward < 1.0:
                entry.error = f"the reference solution scores {reference.reward:g}" + (
                    f" ({reference.error})" if reference.error else ""
                )
                return []
            found = mutant_pool(reference.original, reference.solved, table, instruction_paths(task))
            entry.pool_size, entry.not_compiling = len(found.mutants), found.not_compiling
            entry.identical, entry.duplicates = found.identical, found.duplicates
            grading = grader_digest(task)
            jobs = []
            for mutant in sample(found.mutants, mutants, seed, task.id):
                key = f"{task.id}:{grading}:{mutant.digest}"
                if key in done:
                    entry.results.append(_from_record(done[key], mutant, task))
                else:
                    jobs.append((task, reference.folder, mutant, key, reference.mutant_timeout_s(task)))
            if progress is not None:
                progress("total", len(jobs))
            return jobs

        jobs = [job for batch in pool.map(prepare, tasks) for job in batch]
        futures = [
            pool.submit(run_mutant, t, folder, m, key, backend, sandbox_options, timeout)
            for t, folder, m, key, timeout in jobs
        ]
        for future in as_completed(futures):
            result = future.result()
            entries[result.task_id].results.append(result)
            if results_file is not None:
                results_file.append(result.record())
            if progress is not None:
                progress("done", 1)
    for entry in report.tasks:
        entry.results.sort(key=lambda r: r.key)
    return report


def _from_record(record: Mapping[str, Any], mutant: Mutant, task: Task) -> MutantResult:
    """A result read back from the results file (its equivalence re-read from the task: declaring
    one needs no re-run)."""
    return MutantResult(
        task_id=task.id,
        key=str(record["key"]),
        operator=mutant.operator,
        file=mutant.file,
        line=mutant.line,
        diff=mutant.diff,
        reward=float(record.get("reward", 0.0)),
        grader_error=record.get("grader_error"),
        equivalent=dict(task.metadata.get("equivalent_mutants") or {}).get(mutant.digest),
    )
