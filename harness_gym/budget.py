"""The spec's budget as a typed object, and the one rule for a command's effective timeout.

The defaults of every optional budget field live in one place: the ``default`` keywords of the
harness spec schema (``schemas/harness_spec.schema.json``). :data:`BUDGET_DEFAULTS` reads them,
:class:`Budget` and :class:`~harness_gym.sandboxes.options.SandboxOptions` take theirs from it, and
nothing else writes 60 s or 30,000 characters. This module imports nothing from the package, so the
sandboxes may use it.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from harness_gym.errors import HarnessSpecError


def _schema_defaults() -> dict[str, Any]:
    text = resources.files("harness_gym").joinpath("schemas/harness_spec.schema.json").read_text(encoding="utf-8")
    fields = json.loads(text)["properties"]["budget"]["properties"]
    return {name: field["default"] for name, field in fields.items() if "default" in field}


#: The defaults of the optional budget fields, read from the schema (their one home).
BUDGET_DEFAULTS: dict[str, Any] = _schema_defaults()
COMMAND_TIMEOUT_S: float = float(BUDGET_DEFAULTS["command_timeout_s"])
OUTPUT_LIMIT_CHARS: int = int(BUDGET_DEFAULTS["output_limit_chars"])


@dataclass(frozen=True, slots=True)
class Budget:
    """A harness's budget: steps per episode, limits per command, per action and for the context."""

    max_steps: int
    command_timeout_s: float = COMMAND_TIMEOUT_S
    output_limit_chars: int = OUTPUT_LIMIT_CHARS
    step_time_limit_s: float = float(BUDGET_DEFAULTS["step_time_limit_s"])
    max_tool_calls_per_step: int = int(BUDGET_DEFAULTS["max_tool_calls_per_step"])
    context_limit_chars: int = 0  # 0: no limit given (hooks measure no pressure)

    @classmethod
    def from_spec(cls, budget: Mapping[str, Any]) -> Budget:
        """The budget of a (validated) spec's ``budget`` mapping; unknown keys are refused."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(budget) - set(names))
        if unknown:
            raise HarnessSpecError(f"unknown budget fields {unknown}; valid fields: {', '.join(names)}")
        if "max_steps" not in budget:
            raise HarnessSpecError("a budget needs max_steps")
        values = dict(budget)
        for name in ("command_timeout_s", "step_time_limit_s"):
            if name in values:
                values[name] = float(values[name])
        return cls(**values)

    def sandbox_defaults(self) -> dict[str, Any]:
        """What the budget sets for the sandbox (explicit ``sandbox_options`` win over it)."""
        return {"command_timeout_s": self.command_timeout_s, "output_limit_chars": self.output_limit_chars}


def effective_command_timeout(
    ceiling_s: float, step_remaining_s: float | None = None, requested: Any = None, unit_s: float = 1.0
) -> tuple[float | None, str]:
    """The one rule for how long a command may run: the least of the sandbox's ceiling (its
    ``command_timeout_s``: explicit ``sandbox_options``, else the spec's budget), what is left of the
    action's time budget, and the agent's own ``timeout`` argument (in units of ``unit_s`` seconds).

    Returns (seconds, note): the note says when the agent's value was capped; (None, error) when the
    agent's value is not a positive finite number."""
    limit = float(ceiling_s) if step_remaining_s is None else min(float(ceiling_s), step_remaining_s)
    if requested is None or requested == "":
        return limit, ""
    try:
        seconds = float(requested) * unit_s
    except (TypeError, ValueError, OverflowError):
        return None, f"Error: timeout must be a number, got {str(requested)[:80]!r}."
    if not math.isfinite(seconds) or seconds <= 0:
        return None, f"Error: timeout must be a positive finite number, got {str(requested)[:80]!r}."
    if seconds > limit:
        return limit, f"[timeout capped at {limit:g} s, the limit per command]"
    return seconds, ""
