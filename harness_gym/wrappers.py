"""Gymnasium wrappers that keep the harness's guarantees under Gymnasium's own wrappers."""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class GradeTruncation(gym.Wrapper[dict[str, Any], Any, dict[str, Any], Any]):
    """Grade an episode that a wrapper inside this one truncated (Gymnasium's ``TimeLimit``).

    The harness grades every episode it ends itself, by its finishing tool or its step budget. A
    ``TimeLimit`` with a smaller ``max_episode_steps`` ends the episode without the harness knowing;
    this wrapper, which ``gym.make`` puts around the ``TimeLimit`` of every registered id, then grades
    the workspace as it stands (:meth:`HarnessEnv.truncate`), so no truncated episode is left
    without a reward.
    """

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        harness = self.env.unwrapped
        if (terminated or truncated) and not harness.done:
            limit = self.env.spec.max_episode_steps if self.env.spec is not None else None
            reward, graded = harness.truncate(f"Gymnasium TimeLimit of {limit} steps reached")
            info = {**info, **graded}
            truncated = True
        return observation, reward, terminated, truncated, info
