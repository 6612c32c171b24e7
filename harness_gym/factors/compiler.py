"""The factor compiler: a configuration of the 3^5 space becomes its harness spec by merging the
base spec with each factor's fragment at the configuration's level, then validating the result."""

from __future__ import annotations

import functools
import json
from types import ModuleType
from typing import Any

from harness_gym.factors import context, observation, system_prompt, tool_interface, workflow
from harness_gym.space import HarnessConfig
from harness_gym.spec import deep_merge, load_variant_file, validate_spec

FACTOR_MODULES: dict[str, ModuleType] = {
    "S": system_prompt,
    "T": tool_interface,
    "O": observation,
    "C": context,
    "W": workflow,
}


@functools.cache
def _compiled(config: HarnessConfig) -> str:
    spec: dict[str, Any] = deep_merge(load_variant_file("base"), {"name": config.env_id, "config": config.code})
    for factor, module in FACTOR_MODULES.items():
        spec = deep_merge(spec, module.fragment(config.level(factor)))
    validate_spec(spec)
    return json.dumps(spec)


def compile_config(config: HarnessConfig | str) -> dict[str, Any]:
    """The harness spec of a configuration of the 3^5 space (a fresh copy each call)."""
    return json.loads(_compiled(HarnessConfig.parse(config)))
