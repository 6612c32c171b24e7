"""One exception hierarchy: every error class the package defines is a HarnessGymError, and keeps
its old built-in base so existing ``except ValueError`` / ``except RuntimeError`` code still works."""

from __future__ import annotations

import importlib
import inspect

import pytest

import harness_gym
from harness_gym.errors import FAMILIES, HarnessGymError

MODULES = (
    "harness_gym.agents.base",
    "harness_gym.bench.runner",
    "harness_gym.evolution",
    "harness_gym.integrations.base",
    "harness_gym.llm_client",
    "harness_gym.rollout_requests",
    "harness_gym.sandboxes.base",
    "harness_gym.sandboxes.options",
    "harness_gym.spec",
    "harness_gym.harness",
    "harness_gym.tasks.base",
    "harness_gym.tool_calls",
    "harness_gym.tool_formats.models",
    "harness_gym.tool_formats.registry",
    "harness_gym.vector",
    "harness_gym.worlds",
    "trainers.launch",
    "trainers.openrlhf_args",
    "trainers.turns",
)


def _defined_errors() -> list[type[BaseException]]:
    found = []
    for name in MODULES:
        module = importlib.import_module(name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, Exception)
                and not issubclass(value, Warning)
                and value.__module__ == module.__name__
            ):
                found.append(value)
    return found


def test_every_error_class_is_a_harness_gym_error() -> None:
    errors = _defined_errors()
    assert len(errors) >= 15  # the scan found the classes (a broken scan would pass vacuously)
    outside = [f"{e.__module__}.{e.__name__}" for e in errors if not issubclass(e, HarnessGymError)]
    assert outside == []


@pytest.mark.parametrize(
    ("module", "name", "family", "builtin"),
    [
        ("harness_gym.spec", "SpecError", "HarnessSpecError", ValueError),
        ("harness_gym.sandboxes.options", "SandboxOptionsError", "SandboxError", ValueError),
        ("harness_gym.worlds", "WorldError", "SandboxError", ValueError),
        ("harness_gym.tasks.base", "TaskError", "TaskError", ValueError),
        ("harness_gym.tool_calls", "ActionError", "ToolCallError", ValueError),
        ("harness_gym.llm_client", "LLMError", "AgentError", RuntimeError),
        ("harness_gym.agents.base", "ContextOverflow", "AgentError", RuntimeError),
        ("harness_gym.bench.runner", "BenchAborted", "BenchError", RuntimeError),
        ("harness_gym.bench.runner", "ManifestMismatch", "BenchError", ValueError),
        ("harness_gym.rollout_requests", "RolloutError", "RolloutError", ValueError),
    ],
)
def test_old_names_keep_their_base_and_join_a_family(module: str, name: str, family: str, builtin: type) -> None:
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, getattr(harness_gym, family))
    assert issubclass(cls, builtin)


def test_families_are_exported_and_caught_by_the_root() -> None:
    for family in FAMILIES:
        assert getattr(harness_gym, family.__name__) is family
        assert family.__name__ in harness_gym.__all__
    with pytest.raises(HarnessGymError, match="bad spec"):
        harness_gym.validate_spec({"name": "bad spec"})
