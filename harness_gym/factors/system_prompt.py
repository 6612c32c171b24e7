"""S: the system prompt. Levels: direct rules, the rules inside a product context, a persona."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness_gym.factors.levels import level_fragment


def fragment(level: int) -> dict[str, Any]:
    return level_fragment("S", level)


def system_message(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The first message of every episode."""
    return {"role": "system", "content": spec["system_prompt"], "source": "system"}
