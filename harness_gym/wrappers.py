"""Gymnasium wrappers that keep the harness's guarantees under Gymnasium's own wrappers."""

from __future__ import annotations

from typing import Any

import gymnasium as gym


class GradeTruncation(gym.Wrapper[dict[str, Any], Any, dict[str, Any], Any], gym.utils.RecordConstructorArgs):
    """Grade an episode that a wrapper inside this one truncated (Gymnasium's ``TimeLimit``).

    The harness grades every episode it ends itself, by its finishing tool or its step budget. A
    ``TimeLimit`` with a smaller ``max_episode_steps`` ends the episode without the harness knowing;
    this wrapper, which ``gym.make`` puts around the ``TimeLimit`` of every registered id, then grades
    the workspace as it stands (:meth:`HarnessEnv.truncate`), so no truncated episode is left
    without a reward. It records its (no) constructor arguments, so Gymnasium can remake an
    environment from its spec (``gym.make(env.spec)``, ``check_env``'s render check, vectors).
    """

    def __init__(self, env: gym.Env[dict[str, Any], Any]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.Wrapper.__init__(self, env)
        self._follow_the_budget()

    def _follow_the_budget(self) -> None:
        """``gym.make(id, max_steps=N)`` changes the harness's budget but not the registered
        ``TimeLimit``: move that limit to the budget, so ``spec.max_episode_steps`` keeps reporting
        it. A ``max_episode_steps`` given to ``gym.make`` (one unlike the registered) stays as given."""
        harness: Any = self.env.unwrapped  # a HarnessEnv (the engine sits a layer above this module)
        budget = getattr(harness, "harness_spec", {}).get("budget", {}).get("max_steps")
        time_limit = self.env
        while isinstance(time_limit, gym.Wrapper) and not isinstance(time_limit, gym.wrappers.TimeLimit):
            time_limit = time_limit.env
        if budget is None or harness.spec is None or not isinstance(time_limit, gym.wrappers.TimeLimit):
            return
        try:
            registered = gym.spec(harness.spec.id).max_episode_steps
        except gym.error.Error:  # made from a spec that is not in the registry
            return
        if time_limit._max_episode_steps == registered and budget != registered:
            time_limit._max_episode_steps = int(budget)
            time_limit._cached_spec = None
            self._cached_spec = None

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        harness: Any = self.env.unwrapped  # a HarnessEnv (the engine sits a layer above this module)
        if (terminated or truncated) and not harness.done:
            limit = self.env.spec.max_episode_steps if self.env.spec is not None else None
            reward, graded = harness.truncate(f"Gymnasium TimeLimit of {limit} steps reached")
            info = {**info, **graded}
            truncated = True
        return observation, float(reward), terminated, truncated, info
