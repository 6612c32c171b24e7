"""W: the workflow the harness imposes. Level 1 requires a plan before the first tool call;
level 2 also asks for a progress check every ``verify_every`` steps."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from harness_gym.factors.levels import level_fragment


def fragment(level: int) -> dict[str, Any]:
    return level_fragment("W", level)


class Workflow:
    """Per-episode workflow state: whether a plan has been written, when to ask for verification."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.config = spec["workflow"]
        self.plan_required: bool = self.config["plan_required"]
        self.verify_every: int = self.config["verify_every"]
        self._plan = re.compile(self.config.get("plan_pattern", r"$^"), re.IGNORECASE | re.MULTILINE)
        self.plan_seen = not self.plan_required

    def initial_messages(self) -> list[dict[str, Any]]:
        """Workflow instructions shown after the task, if this workflow has any."""
        text = self.config.get("instructions")
        return [{"role": "user", "content": text, "source": "workflow"}] if text else []

    def gate(self, prose: str, has_calls: bool) -> str | None:
        """Check an assistant message. Returns feedback (and the calls are not run) when it breaks the workflow."""
        if not self.plan_seen and self._plan.search(prose):
            self.plan_seen = True
        if has_calls and not self.plan_seen:
            return self.config["plan_missing"]
        return None

    def after_step(self, steps: int) -> list[dict[str, Any]]:
        """Messages the workflow adds after step number ``steps`` (1-based)."""
        if self.verify_every and steps % self.verify_every == 0:
            text = self.config["verify_request"].replace("{steps}", str(steps))
            return [{"role": "user", "content": text, "source": "workflow"}]
        return []
