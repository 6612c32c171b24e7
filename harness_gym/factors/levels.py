"""A factor level's spec fragment and name, read from ``variants/<factor>.yaml``."""

from __future__ import annotations

from typing import Any

from harness_gym.spec import load_variant_file


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
