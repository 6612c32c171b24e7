"""Rollout requests (the dataset's labels) and the executor's settings: plain data, importable
without OpenRLHF, so datasets and launch commands can be built anywhere."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

# the label format lives in harness_gym (export and the RL-library adapters share it); re-exported here
from harness_gym.rollout_requests import (  # noqa: F401
    LABEL_VERSION,
    RolloutError,
    RolloutRequest,
    harness_env_arguments,
    resolve_harness,
    suite_tasks,
)
from harness_gym.tool_formats import format_names

SETTINGS_ENV = "HARNESS_GYM_EXECUTOR"
SEGMENT_CHOICES = ("last", "first")


# --------------------------------------------------------------------------- settings and labels


@dataclass(frozen=True)
class ExecutorSettings:
    """Process-wide executor options. OpenRLHF builds the executor with no arguments, so they come
    from the ``HARNESS_GYM_EXECUTOR`` environment variable (JSON), which the launcher sets."""

    sandbox: str | None = None
    tool_call_format: str = "hermes"
    segment: str = "last"
    rollout_log: str | None = None
    env_workers: int = 64
    max_steps: int | None = None
    resample_names: bool = False
    include_skills: bool = True
    pass_threshold: float = 1.0

    def __post_init__(self) -> None:
        if self.segment not in SEGMENT_CHOICES:
            raise ValueError(f"segment must be one of {SEGMENT_CHOICES}, got {self.segment!r}")
        if self.tool_call_format not in format_names():
            raise ValueError(
                f"tool_call_format must be a text format or auto (OpenRLHF has no native tool calling), got "
                f"{self.tool_call_format!r}; choose one of {', '.join(format_names())}"
            )

    @classmethod
    def from_env(cls) -> ExecutorSettings:
        raw = os.environ.get(SETTINGS_ENV)
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{SETTINGS_ENV} is not valid JSON: {exc}") from None
        unknown = set(data) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(
                f"{SETTINGS_ENV} has unknown keys {sorted(unknown)}; known: {sorted(cls.__dataclass_fields__)}"
            )
        return cls(**data)
