"""The import rules of README's "Architecture" section, checked on the source: every module's
imports (module level and inside functions; ``if TYPE_CHECKING:`` imports aside) form no cycle,
and no module imports a layer above its own."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("harness_gym", "trainers")

# Bottom to top; a module belongs to the layer of its longest matching prefix and may import its
# own layer and those below. Keep in step with README.md, "Architecture".
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "core",
        (
            "harness_gym.errors",
            "harness_gym.budget",
            "harness_gym.paths",
            "harness_gym.jsonl",
            "harness_gym.space",
            "harness_gym.design",
            "harness_gym.spec",
            "harness_gym.presets",
            "harness_gym.llm_client",
            "harness_gym.metrics",
            "harness_gym.tool_formats",
            "harness_gym.tool_calls",
            "harness_gym.prompting",
            "harness_gym.summarizers",
            "harness_gym.spaces",
            "harness_gym.vector_memory",
            "harness_gym.wrappers",
        ),
    ),
    ("sandboxes", ("harness_gym.sandboxes",)),
    ("tasks", ("harness_gym.tasks", "harness_gym.worlds")),
    (
        "engine",
        (
            "harness_gym.factors",
            "harness_gym.tools",
            "harness_gym.hooks",
            "harness_gym.harness",
            "harness_gym.env",
            "harness_gym.registration",
            "harness_gym.vector",  # ThreadVectorEnv over gym.make'd environments
            "harness_gym.records",
            "harness_gym.chat",
            "harness_gym.rollout_requests",
            "harness_gym.external",
            "harness_gym",  # the package itself: registers the environments
        ),
    ),
    ("agents", ("harness_gym.agents",)),
    (
        "applications",
        (
            "harness_gym.bench",
            "harness_gym.episode",
            "harness_gym.evolution",
            "harness_gym.skills",
            "harness_gym.export",
            "harness_gym.integrations",
            "harness_gym.model_server",
            "harness_gym.model_export",
            "harness_gym.doctor",
            "harness_gym.env_server",
            "harness_gym.env_client",  # the typed OpenEnv client of env_server
            "harness_gym.replication",
        ),
    ),
    ("command line", ("harness_gym.cli",)),
    ("trainers", ("trainers",)),
)
# nothing below these may import them (the rule the layers above make exact)
TOP_ONLY = ("harness_gym.bench", "harness_gym.agents", "trainers")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT)
            if relative.parts[:3] == ("harness_gym", "tasks", "builtin"):  # task data, run inside sandboxes
                continue
            parts = list(relative.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and _type_checking(node.test):
            for child in node.orelse:
                yield from _import_nodes(ast.Module(body=[child], type_ignores=[]))
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _import_nodes(node)


def _owner(name: str) -> str | None:
    """The project module an imported name lives in (``a.b.func`` -> ``a.b``), or None."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """The project modules ``module`` imports."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in _import_nodes(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            owner = _owner(name)
            if owner is not None and owner != module:
                found.add(owner)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def layer_of(module: str) -> int:
    best, best_length = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            exact = prefix == "harness_gym"
            matches = module == prefix if exact else module == prefix or module.startswith(prefix + ".")
            if matches and len(prefix) > best_length:
                best, best_length = index, len(prefix)
    return best


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer():
    assert [m for m in MODULES if layer_of(m) < 0] == []


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


def test_no_module_imports_a_layer_above_its_own():
    upward = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


@pytest.mark.parametrize("top", TOP_ONLY)
def test_nothing_below_imports_the_top(top):
    below = [
        f"{module} imports {target}"
        for module, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if (target == top or target.startswith(top + "."))
        and not (module == top or module.startswith(top + "."))
        and layer_of(module) < layer_of(top)
    ]
    assert below == []


# imports of project modules made inside a function, each with its reason
LAZY_PROJECT_IMPORTS = {("harness_gym.cli", "harness_gym.env_server")}  # needs the optional serve extra


def _function_level_imports(module: str) -> set[str]:
    """The project modules ``module`` imports inside functions (``if TYPE_CHECKING:`` aside)."""
    tree = ast.parse(MODULES[module].read_text(encoding="utf-8"))
    inner: set[str] = set()
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in _import_nodes(function):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    names = [f"{node.module}.{alias.name}" for alias in node.names] if not node.level else []
                inner |= {owner for name in names if (owner := _owner(name)) is not None}
    return inner


def test_project_imports_sit_at_module_level():
    """Function-level imports hide dependencies (and cycles) until run time; only optional heavy
    third-party ones may wait."""
    lazy = {(module, target) for module in MODULES for target in _function_level_imports(module)}
    assert lazy - LAZY_PROJECT_IMPORTS == set()


BACKENDS = ("harness_gym.sandboxes.bubblewrap", "harness_gym.sandboxes.docker", "harness_gym.sandboxes.unsafe")


def test_backends_are_reached_only_through_the_sandbox_interface():
    """What backends share (mount-path checks, grading, the shell) lives in sandboxes.base and
    sandboxes.shell; only the package (which registers them) and doctor (which tests each) import one."""
    importers = {module for module, targets in GRAPH.items() if any(target in BACKENDS for target in targets)}
    assert importers <= {"harness_gym.sandboxes", "harness_gym.doctor"}


def test_the_checker_sees_cycles_and_upward_imports():
    """The checks can fail: a made-up cycle and a made-up upward import are found."""
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert layer_of("harness_gym.tasks.base") < layer_of("harness_gym.bench.runner")
    assert "harness_gym.records" in GRAPH["harness_gym.bench.runner"]
    assert "harness_gym.bench.runner" not in GRAPH["harness_gym.records"]


def test_type_checking_imports_are_not_edges():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import a\nelse:\n    import b\nimport c\n"
    names = [alias.name for node in _import_nodes(ast.parse(source)) for alias in node.names]
    assert names == ["TYPE_CHECKING", "b", "c"]
