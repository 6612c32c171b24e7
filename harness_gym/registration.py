"""Registration of the 243 configurations as Gymnasium environments, as data: one entry per id.

Every environment is registered twice: under its short id (``Harness-S1T2O0C1W2``, what the paper
and the README use) and under a namespaced, versioned id (``harness_gym/Harness-S1T2O0C1W2-v0``) so
that a change of behaviour can bump the version without breaking runs that pinned the old one. Both
ids make the same environment. ``spec.max_episode_steps`` is the harness's step budget, so the
``TimeLimit`` that ``gym.make`` adds ends an episode at the same step as the harness does, which
grades it; a smaller ``max_episode_steps`` given to ``gym.make`` is graded too, by the
:class:`~harness_gym.wrappers.GradeTruncation` wrapper registered around the ``TimeLimit``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import WrapperSpec

from harness_gym.external.catalog import gym_ids
from harness_gym.harness import Harness
from harness_gym.presets import PRESETS
from harness_gym.space import BASE_CONFIG, all_configs

ENTRY_POINT = "harness_gym.env:HarnessEnv"
NAMESPACE = "harness_gym"
VERSION = 0
EXTERNAL_ENTRY_POINT = "harness_gym.external.gym_env:ExternalCliEnv"
GRADE_TRUNCATION = WrapperSpec("GradeTruncation", "harness_gym.wrappers:GradeTruncation", {})


def versioned_id(env_id: str) -> str:
    """The namespaced, versioned id of a short id: ``Harness-S1T2O0C1W2`` -> ``harness_gym/Harness-S1T2O0C1W2-v0``."""
    return f"{NAMESPACE}/{env_id}-v{VERSION}"


def _register(env_id: str, max_episode_steps: int | None, **options: Any) -> list[str]:
    """Register ``env_id`` and its versioned twin (idempotent); returns both ids."""
    ids = [env_id, versioned_id(env_id)]
    for name in ids:
        if name not in gym.registry:
            gym.register(
                id=name, max_episode_steps=max_episode_steps, additional_wrappers=(GRADE_TRUNCATION,), **options
            )
    return ids


def register_all() -> list[str]:
    """Register ``Harness-S?T?O?C?W?`` for every configuration, the presets and the generic
    ``HarnessAdapt`` (which takes ``spec=``), each also as ``harness_gym/<id>-v0``. Idempotent.
    Returns the ids."""
    ids = []
    for env_id in PRESETS:
        if env_id in gym.registry and versioned_id(env_id) in gym.registry:
            ids += [env_id, versioned_id(env_id)]
            continue
        harness = Harness.resolve(env_id)
        ids += _register(env_id, harness.budget.max_steps, entry_point=ENTRY_POINT, kwargs={"spec": harness.source})
    # a spec given at make time has its own budget, unknown here: the environment enforces it itself
    ids += _register("HarnessAdapt", None, entry_point="harness_gym.env:make_spec_env")
    # real CLIs with inverted control: the CLI's requests are observations, the policy's replies actions;
    # the CLI's own exit ends the episode (no step limit or grading wrapper of ours)
    for env_id, cli_id in gym_ids().items():
        for name in (env_id, versioned_id(env_id)):
            if name not in gym.registry:
                gym.register(id=name, entry_point=EXTERNAL_ENTRY_POINT, kwargs={"cli": cli_id})
            ids.append(name)
    # the step budget is a property of the base spec that no factor level changes (tests check all 243)
    budget = Harness.resolve(BASE_CONFIG).budget.max_steps
    for config in all_configs():
        ids += _register(
            config.env_id, budget, entry_point=ENTRY_POINT, kwargs={"config": config.code}, nondeterministic=False
        )
    return ids
