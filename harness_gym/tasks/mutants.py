"""Mutants: wrong versions of correct code and of correct outputs, made by seeded operators.

The generator injects them as bugs (a task is a mutant its hidden tests catch); the mutation audit
grades them to measure a grader (a mutant the tests accept is a reward for wrong work). One module
serves both, so the operators a task was made with are the operators its grader is audited with.
Operators are data where they can be (``mutation_operators.yaml``)."""

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
from collections.abc import Callable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness_gym.tasks.audit import _PATH_TOKEN
from harness_gym.tasks.base import Task, TaskError

MAX_OUTPUT_BYTES = 1 << 20  # reference outputs larger than this are not perturbed

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


CALL_SWAPS = {"min": "max", "max": "min", "any": "all", "all": "any", "sorted": "reversed", "round": "int"}


@dataclass(frozen=True)
class Mutation:
    operator: str
    file: str
    line: int
    original: str  # the whole source lines replaced
    mutated: str  # what replaces them

    @property
    def span(self) -> range:
        return range(self.line, self.line + self.original.count("\n"))


def apply_mutations(source: str, chosen: list[Mutation]) -> str:
    """``source`` with several non-overlapping mutations applied (bottom-up, by line)."""
    lines = source.splitlines(keepends=True)
    for mutation in sorted(chosen, key=lambda m: -m.line):
        start = mutation.line - 1
        lines[start : start + mutation.original.count("\n")] = [mutation.mutated]
    return "".join(lines)


def node_mutants(node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
    """(operator name, mutated copy) for every mutation that applies to ``node`` itself."""
    new: Any  # a copy of whichever node type matched
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
    if isinstance(node, ast.AugAssign) and type(node.op) in SWAPS:
        new = copy.deepcopy(node)
        new.op = SWAPS[type(node.op)]()
        yield "operator swap", new
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in CALL_SWAPS:
        new = copy.deepcopy(node)
        new.func = ast.Name(CALL_SWAPS[node.func.id], ast.Load())
        yield "wrong function", new
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in (ast.Is, ast.IsNot):
        new = copy.deepcopy(node)
        new.ops = [ast.IsNot() if isinstance(node.ops[0], ast.Is) else ast.Is()]
        yield "wrong comparison", new
    if isinstance(node, ast.Constant) and isinstance(node.value, bool):
        yield "flipped constant", ast.Constant(not node.value)
    if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        yield "dropped statement", ast.Pass()
    if isinstance(node, ast.If):
        negated = copy.deepcopy(node)
        negated.test = ast.UnaryOp(ast.Not(), node.test)
        yield "negated condition", negated
        if node.orelse:
            dropped = copy.deepcopy(node)
            dropped.orelse = []
            yield "dropped branch", dropped


NodeOperators = Callable[[ast.AST], Iterator[tuple[str, ast.AST]]]


def candidate_mutations(
    source: str, file: str, operators: NodeOperators | None = None
) -> Iterator[tuple[Mutation, str]]:
    """Every single-site mutation ``operators`` (default: the generator's own) propose for a source
    file, as (mutation, mutated source), unchecked: the result may not parse or may equal ``source``."""
    propose = operators or node_mutants
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    node: Any  # a statement or expression: the checks below make sure it has a position
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module)) or not hasattr(node, "lineno"):
            continue
        segment = ast.get_source_segment(source, node)
        if segment is None:
            continue
        for operator, mutant in propose(node):
            replacement = ast.unparse(mutant)
            if node.lineno == node.end_lineno and "\n" not in replacement:
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
            yield mutation, new_source


def mutations(source: str, file: str) -> list[tuple[Mutation, str]]:
    """Every single-site mutation of a source file that parses and changes it, as (mutation, mutated source)."""
    out = []
    for mutation, new_source in candidate_mutations(source, file):
        try:
            ast.parse(new_source)
        except SyntaxError:
            continue
        if new_source != source:
            out.append((mutation, new_source))
    return out


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
        yield from node_mutants(node)
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


def text_files(root: Path) -> dict[str, str]:
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


def audit_digest(task: Task, operators: Mapping[str, Any] | None = None) -> str:
    """A digest of everything a task's mutation score depends on: its grading, its reference
    solution and starting files (the mutants are made from them), the paths its instruction names
    (which outputs are perturbed), the mutants it declares equivalent and the operator tables. A
    recorded score is the task's only while this digest is unchanged."""
    digest = hashlib.sha256(grader_digest(task).encode())
    table = dict(operators) if operators is not None else load_operators()
    for part in (
        task.solution,
        task.instruction,
        task.mount_path,
        task.image,
        task.world,
        dict(task.metadata.get("equivalent_mutants") or {}),
        table,
    ):
        digest.update(b"\0" + json.dumps(part, sort_keys=True, default=str).encode())
    if task.workspace_dir is not None:
        for path in sorted(p for p in Path(task.workspace_dir).rglob("*") if p.is_file()):
            digest.update(b"\0" + str(path.relative_to(task.workspace_dir)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]
