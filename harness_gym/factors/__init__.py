"""The five factors of the harness space, one module each.

Each module exposes ``fragment(level) -> dict``: its part of the harness spec at that level (read
from ``variants/<factor>.yaml``), and the runtime piece the engine uses for that part.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from harness_gym.factors import context, observation, system_prompt, tool_interface, workflow
from harness_gym.spec import load_variant_file

FACTOR_MODULES: dict[str, ModuleType] = {
    "S": system_prompt,
    "T": tool_interface,
    "O": observation,
    "C": context,
    "W": workflow,
}


def level_fragment(factor: str, level: int) -> dict[str, Any]:
    """The spec fragment of one level of a factor whose YAML lists ``levels: {n: {fragment: ...}}``."""
    data = load_variant_file(factor)
    try:
        return data["levels"][level]["fragment"]
    except KeyError:
        raise ValueError(f"factor {factor} has no level {level}; levels are {sorted(data['levels'])}") from None


def level_name(factor: str, level: int) -> str:
    """The short name of a level, e.g. ``T2`` → ``opaque-identifiers``."""
    return load_variant_file(factor)["levels"][level]["name"]


__all__ = ["FACTOR_MODULES", "level_fragment", "level_name"]
