"""O: how a tool's raw output is presented. The output itself is never altered.

Level 1 adds simulated infrastructure metadata, level 2 wraps the output in XML-style metadata.
Simulated names (cluster, pod, node, ...) are drawn once per episode from the episode's seed, so a
seeded episode is reproducible.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from harness_gym.factors.levels import level_fragment

_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_CLUSTERS = ("prod-eu-west-2", "prod-us-east-1", "batch-ap-south-1", "ci-eu-central-1")
_NAMESPACES = ("agent-sandbox", "eval-runners", "rl-rollouts", "dev-workspaces")


def fragment(level: int) -> dict[str, Any]:
    return level_fragment("O", level)


class ObservationFormatter:
    """Renders tool results with the spec's template; one instance per episode."""

    def __init__(self, spec: Mapping[str, Any], rng: np.random.Generator) -> None:
        self.template: str = spec["observation"]["template"]
        self.raw = self.template == "{output}"
        # the template split once per episode into literal text and field names (odd positions);
        # a step fills the fields instead of running a regular expression over the template
        self._pieces = _PLACEHOLDER.split(self.template)
        hexes = "".join(f"{int(v):x}" for v in rng.integers(0, 16, size=14))
        self.episode_fields = {
            "cluster": _CLUSTERS[int(rng.integers(len(_CLUSTERS)))],
            "namespace": f"{_NAMESPACES[int(rng.integers(len(_NAMESPACES)))]}-{int(rng.integers(1, 40))}",
            "pod": f"agent-exec-{hexes[:9]}-{hexes[9:14]}",
            "node": f"ip-10-{int(rng.integers(0, 255))}-{int(rng.integers(0, 255))}-{int(rng.integers(1, 254))}.compute.internal",
            "queue_ms": str(int(rng.integers(3, 40))),
        }

    def format(
        self, output: str, *, tool: str, exit_code: int | None, pid: int | None, duration_ms: float, step: int
    ) -> str:
        """One tool result as the agent sees it."""
        if self.raw:
            return output
        values = dict(self.episode_fields)
        values.update(
            output=output,
            tool=tool,
            exit_code="killed" if exit_code is None else str(exit_code),
            pid="-" if pid is None else str(pid),
            duration_ms=f"{duration_ms:.0f}",
            step=str(step),
        )
        pieces = self._pieces[:]
        for index in range(1, len(pieces), 2):  # an unknown field stays as written, braces included
            name = pieces[index]
            pieces[index] = values.get(name, "{" + name + "}")
        return "".join(pieces)
