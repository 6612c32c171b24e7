"""One episode loop, one seed convention, one way to build an environment.

Everything that runs an agent over tasks (``harness-gym bench``, harness evolution, ``harness-gym
check`` and ``tasks check``) builds its environment with :func:`harness_gym.env.make_env` and runs its episodes with
:func:`run_suite` (or, one planned episode at a time, :func:`~harness_gym.agents.run_episode` with
the plan's seed): the seed of task ``i``'s run ``r`` is :func:`~harness_gym.records.episode_seed`
everywhere, so the same (task, run) gets the same seed under every harness and in every command.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_gym.agents.base import EpisodeResult, run_episode
from harness_gym.env import make_env
from harness_gym.harness import Harness
from harness_gym.records import episode_seed
from harness_gym.tasks import Task


@dataclass(frozen=True)
class Episode:
    """One finished episode: what was planned (task, run, seed) and what happened."""

    harness: str
    task_id: str
    run: int
    seed: int
    result: EpisodeResult


def suite_plan(tasks: Sequence[Task], runs: int = 1, seed: int = 0) -> list[tuple[Task, int, int]]:
    """(task, run, seed) of every episode of a suite, task by task: the order and seeds everyone uses."""
    return [(task, run, episode_seed(seed, index, run)) for index, task in enumerate(tasks) for run in range(runs)]


def run_suite(
    harness: Any,
    agent_factory: Callable[[], Any],
    tasks: Sequence[Task],
    *,
    runs: int = 1,
    seed: int = 0,
    env_options: Mapping[str, Any] | None = None,
    on_episode: Callable[[Episode], None] | None = None,
) -> list[Episode]:
    """Run ``runs`` episodes of every task under one harness, a fresh agent each, in one environment."""
    resolved = Harness.resolve(harness)
    env = make_env(resolved, list(tasks), **dict(env_options or {}))
    episodes = []
    try:
        for task, run, task_seed in suite_plan(tasks, runs, seed):
            result = run_episode(env, agent_factory(), seed=task_seed, task_id=task.id)
            episode = Episode(resolved.name, task.id, run, task_seed, result)
            episodes.append(episode)
            if on_episode is not None:
                on_episode(episode)
    finally:
        env.close()
    return episodes
