"""A typed OpenEnv client for ``harness-gym serve-env``: actions, observations and state as the
server's own pydantic models, not dicts (what ``GenericEnvClient`` gives).

    from harness_gym.env_client import HarnessEnvClient
    with HarnessEnvClient(base_url="http://token:TOKEN@127.0.0.1:8000").sync() as env:
        result = env.reset(seed=0, task_id="workspace-organize-logs")
        result.observation.messages, result.observation.tools, result.observation.info["episode_id"]
        result = env.step("<tool_call>...</tool_call>")   # text, an assistant message, or a HarnessAction
        result.reward, result.done, result.observation.terminated, env.state().episode_id
"""

from __future__ import annotations

from typing import Any

try:
    from openenv.core.client_types import StepResult
    from openenv.core.env_client import EnvClient
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the OpenEnv client needs openenv-core: pip install 'harness-gym[serve]' && "
        "pip install --no-deps openenv-core==0.3.0"
    ) from exc

from harness_gym.env_server import HarnessAction, HarnessObservation, HarnessState

__all__ = ["HarnessAction", "HarnessEnvClient", "HarnessObservation", "HarnessState"]


def as_action(action: HarnessAction | str | dict[str, Any]) -> HarnessAction:
    """A reply's text or an OpenAI-style assistant message as the typed action."""
    if isinstance(action, HarnessAction):
        return action
    if isinstance(action, str):
        return HarnessAction(text=action)
    if isinstance(action, dict):
        return HarnessAction(message=action)
    raise TypeError(
        f"an action is a HarnessAction, the reply's text or an assistant message, not {type(action).__name__}"
    )


class HarnessEnvClient(EnvClient[HarnessAction, HarnessObservation, HarnessState]):
    """OpenEnv's ``EnvClient`` over a harness-gym environment server (``.sync()`` for blocking use)."""

    def _step_payload(self, action: HarnessAction | str | dict[str, Any]) -> dict[str, Any]:
        return as_action(action).model_dump(exclude_none=True, exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[HarnessObservation]:
        reward, done = payload.get("reward"), bool(payload.get("done", False))
        observation = HarnessObservation(**payload.get("observation", {}), reward=reward, done=done)
        return StepResult(observation=observation, reward=reward, done=done)

    def _parse_state(self, payload: dict[str, Any]) -> HarnessState:
        return HarnessState(**payload)
