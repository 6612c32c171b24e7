"""Rollout requests: a task of a suite under a harness, written as a JSON label.

One dataset row asks for one rollout; its ``label`` names the task and the harness (a configuration
id, a preset, a spec file or an inline spec). The OpenRLHF executor (``trainers/``), the RL-library
adapters (:mod:`harness_gym.integrations`) and ``harness-gym export prompts`` all read and write
this one form. Plain data, importable without any trainer.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness_gym.errors import HarnessSpecError, RolloutError
from harness_gym.harness import Harness
from harness_gym.space import HarnessConfig
from harness_gym.tasks import Task, load_tasks

LABEL_VERSION = 1


@dataclass(frozen=True)
class RolloutRequest:
    """What one dataset row asks for: a task of a suite under a harness, at a schedule position."""

    suite: str
    task_id: str
    harness: str | dict[str, Any]
    seed: int = 0
    step: int | None = None
    slot: int | None = None

    @classmethod
    def from_label(cls, label: Any) -> RolloutRequest:
        try:
            data = json.loads(label) if isinstance(label, str) else dict(label)
        except (json.JSONDecodeError, TypeError, ValueError):
            raise RolloutError(
                f"the label is not a harness-gym rollout request (JSON expected): {str(label)[:200]!r}; "
                "build the dataset with `python -m trainers.dataset`"
            ) from None
        if data.get("harness_gym") != LABEL_VERSION:
            raise RolloutError(f"label version {data.get('harness_gym')!r} is not {LABEL_VERSION}: {str(label)[:200]}")
        missing = [k for k in ("suite", "task_id", "harness") if k not in data]
        if missing:
            raise RolloutError(f"the label lacks {missing}: {str(label)[:200]}")
        return cls(
            str(data["suite"]), str(data["task_id"]), data["harness"], int(data.get("seed", 0)),
            data.get("step"), data.get("slot"),
        )  # fmt: skip

    def to_label(self) -> str:
        data: dict[str, Any] = {"harness_gym": LABEL_VERSION, "suite": self.suite, "task_id": self.task_id}
        data.update(harness=self.harness, seed=self.seed)
        if self.step is not None:
            data.update(step=self.step, slot=self.slot)
        return json.dumps(data, sort_keys=True)

    @property
    def harness_name(self) -> str:
        if isinstance(self.harness, str):
            return self.harness
        return str(self.harness.get("name", "inline-spec"))

    @property
    def harness_index(self) -> int:
        """The configuration's index in the 3^5 space (0–242), or -1 for specs outside it."""
        try:
            return int(HarnessConfig.parse(self.harness).digits, 3) if isinstance(self.harness, str) else -1
        except ValueError:
            return -1


_SUITES: dict[str, dict[str, Task]] = {}
_SUITES_LOCK = threading.Lock()


def suite_tasks(suite: str) -> dict[str, Task]:
    """A suite's tasks by id, loaded once per process."""
    with _SUITES_LOCK:
        if suite not in _SUITES:
            _SUITES[suite] = {t.id: t for t in load_tasks(suite)}
        return _SUITES[suite]


def resolve_harness(harness: str | Mapping[str, Any]) -> Harness:
    """The harness a label names (see :meth:`Harness.resolve`); a bad one is a :class:`RolloutError`."""
    try:
        return Harness.resolve(harness)
    except HarnessSpecError as exc:
        raise RolloutError(f"{exc} (on this node)") from None


def harness_env_arguments(harness: str | Mapping[str, Any]) -> dict[str, Any]:
    """``HarnessEnv`` keyword arguments for a harness reference (kept for callers of the old form;
    new code passes :func:`resolve_harness`'s result to ``HarnessEnv`` directly)."""
    return {"config": resolve_harness(harness)}
