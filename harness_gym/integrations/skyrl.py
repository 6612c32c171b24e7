"""SkyRL-gym: harness-gym environments as ``BaseTextEnv`` (SkyRL-gym 0.4).

SkyRL builds each environment as ``skyrl_gym.make(env_class, env_config=..., extras=row)`` from a
dataset row, calls ``init(prompt)`` for the opening messages and ``step(text)`` per turn; the new
messages it gets back are appended to the conversation. Rows from ``harness-gym export prompts``
carry what :class:`HarnessTextEnv` needs (``harness``, ``task_id``, ``seed``, ``suite``), so a row
selects its harness. Tools are described in the system message and calls parsed from the reply
(``tool_format``, Hermes by default), so the whole reply reaches the W plan gate.

SkyRL only appends, so C1/C2 harnesses (rewritten history) are refused.

    from harness_gym.integrations.skyrl import register_skyrl_env
    register_skyrl_env()   # env_class "harness_gym"
    env = skyrl_gym.make("harness_gym", env_config={}, extras={"harness": "S1T2O0C0W1", "task_id": "...", "seed": 0})
    messages, _ = env.init([])
    output = env.step(reply)   # {"observations": [...], "reward", "done", "metadata"}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness_gym.chat import chat_messages
from harness_gym.integrations.base import check_harness, make_env

try:
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError('the SkyRL-gym adapter needs skyrl-gym: pip install "harness-gym[skyrl]"') from exc

ENV_CLASS = "harness_gym"


def _option(config: Any, key: str, default: Any) -> Any:
    """SkyRL passes env_config as an OmegaConf mapping or a plain dict (or nothing)."""
    if config is None:
        return default
    try:
        return config.get(key, default)
    except AttributeError:
        return getattr(config, key, default)


class HarnessTextEnv(BaseTextEnv):
    """One episode of a harness-gym task under the harness the row names.

    ``extras`` (the dataset row): ``harness`` (default S0T0O0C0W0), ``task_id``, ``seed``,
    ``suite`` (default builtin). ``env_config``: ``tool_format``, ``sandbox``, ``max_steps``,
    ``resample_names``, ``include_skills``.
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        extras = dict(extras or {})
        self.harness = extras.get("harness", "S0T0O0C0W0")
        self.task_id = extras.get("task_id")
        self.seed = int(extras.get("seed", 0))
        self.tool_format = _option(env_config, "tool_format", "hermes")
        resample = bool(_option(env_config, "resample_names", False))
        skills = bool(_option(env_config, "include_skills", True))
        self.env = make_env(
            self.harness, extras.get("suite", "builtin"), sandbox=_option(env_config, "sandbox", None),
            max_steps=_option(env_config, "max_steps", None), resample_names=resample, include_skills=skills,
        )  # fmt: skip
        try:
            check_harness("skyrl", self.env.harness_spec, resample_names=resample, include_skills=skills)
        except ValueError:
            self.env.close()
            raise
        self.max_turns = int(self.env.harness_spec["budget"]["max_steps"])
        self.last_info: dict[str, Any] = {}

    def init(self, prompt: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The episode's opening messages (the row's own prompt is replaced by the harness's)."""
        options = {"task_id": self.task_id} if self.task_id else None
        observation, info = self.env.reset(seed=self.seed, options=options)
        self.turns = 0
        metadata = {
            "task_id": info["task_id"],
            "harness": self.env.harness_spec["name"],
            "spec_hash": info["spec_hash"],
        }
        return chat_messages(observation["messages"], observation["tools"], self.tool_format), metadata

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        _, reward, terminated, truncated, info = self.env.step(action)
        self.last_info = info
        done = terminated or truncated
        return BaseTextEnvStepOutput(
            observations=[] if done else chat_messages(info["new_messages"], (), self.tool_format),
            reward=float(reward),
            done=done,
            metadata={k: info.get(k) for k in ("step", "parse_errors", "tool_errors", "terminated_reason")},
        )

    def get_metrics(self) -> dict[str, Any]:
        return {"steps": self.env.steps, "reward": float(self.env.last_grade.reward) if self.env.last_grade else 0.0}

    def close(self) -> None:
        self.env.close()


def register_skyrl_env(env_class: str = ENV_CLASS) -> str:
    """Register :class:`HarnessTextEnv` in SkyRL-gym's registry under ``env_class`` (idempotent)."""
    import skyrl_gym  # the optional skyrl extra, needed only to register there

    if env_class not in skyrl_gym.registry:
        skyrl_gym.register(id=env_class, entry_point="harness_gym.integrations.skyrl:HarnessTextEnv")
    return env_class
