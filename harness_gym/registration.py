"""Registration of the 243 configurations as Gymnasium environments, as data: one entry per id."""

from __future__ import annotations

import gymnasium as gym

from harness_gym.space import all_configs

ENTRY_POINT = "harness_gym.env:HarnessEnv"


def register_all() -> list[str]:
    """Register ``Harness-S?T?O?C?W?`` for every configuration, the presets and the generic
    ``HarnessAdapt`` (which takes ``spec=``). Idempotent. Returns the ids."""
    from harness_gym.presets import PRESETS, preset_path

    ids = []
    for env_id in PRESETS:
        if env_id not in gym.registry:
            gym.register(id=env_id, entry_point=ENTRY_POINT, kwargs={"spec": str(preset_path(env_id))})
        ids.append(env_id)
    if "HarnessAdapt" not in gym.registry:
        gym.register(id="HarnessAdapt", entry_point="harness_gym.env:make_spec_env")
    ids.append("HarnessAdapt")
    for config in all_configs():
        if config.env_id not in gym.registry:
            gym.register(
                id=config.env_id, entry_point=ENTRY_POINT, kwargs={"config": config.code}, nondeterministic=False
            )
        ids.append(config.env_id)
    return ids
