"""GEM: harness-gym environments as ``gem.Env`` (string observations, string actions).

GEM's trainers treat each (observation, action) pair as one prompt and its completion, so the
observation is the policy's whole next prompt: the harness's context rendered in a tool-call format
(through a chat template when a tokenizer is given). After context management rewrites the history
(C1/C2) the observation simply is the new context — every harness of the space runs faithfully.

``observation="new"`` gives only what the environment appended (for GEM's concatenating
``ObservationWrapper``); that mode cannot show a rewritten history and refuses C1/C2.

    import gem
    from harness_gym.integrations.gem import register_gem_envs
    register_gem_envs()
    env = gem.make("harness_gym/Harness-S1T2O0C1W2", tasks="builtin:train")
    observation, info = env.reset(seed=0)
    observation, reward, terminated, truncated, info = env.step(model(observation))

GEM's own vector envs have no ``close()``: :func:`close_vector_env` closes their sub-environments,
and each environment also closes its sandboxes by finalizer when collected (or at exit).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from harness_gym.chat import chat_messages, plain_text, render
from harness_gym.integrations.base import check_harness, make_env
from harness_gym.presets import PRESETS
from harness_gym.space import all_configs
from harness_gym.tasks import Task

try:
    import gem
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError('the GEM adapter needs gem-llm: pip install "harness-gym[gem]"') from exc

NAMESPACE = "harness_gym"
OBSERVATION_MODES = ("context", "new")


class HarnessGemEnv(gem.Env):
    """One harness over a task suite, as a GEM environment.

    Args:
        harness: configuration id, preset, spec file or spec mapping.
        tasks: task suite or tasks.
        tokenizer: renders observations with its chat template (else plain role-headed text).
        tool_format: how tools and calls are written (``hermes``, ``xml``, ``openai``, or any
            registered with :func:`harness_gym.chat.register_format`).
        observation: ``context`` (the whole next prompt) or ``new`` (only what was appended).
        seed: seeds the first ``reset`` (``gem.make_vec`` passes one per environment).
        task_id: always run this task.
    """

    def __init__(
        self,
        harness: str | Mapping[str, Any] = "S0T0O0C0W0",
        tasks: str | Sequence[Task] | None = "builtin",
        *,
        tokenizer: Any = None,
        tool_format: str = "hermes",
        observation: str = "context",
        seed: int | None = None,
        task_id: str | None = None,
        sandbox: str | None = None,
        max_steps: int | None = None,
        resample_names: bool = False,
        include_skills: bool = True,
    ) -> None:
        super().__init__()
        if observation not in OBSERVATION_MODES:
            raise ValueError(f"observation must be one of {OBSERVATION_MODES}, got {observation!r}")
        self.env = make_env(
            harness, tasks, sandbox=sandbox, max_steps=max_steps, resample_names=resample_names,
            include_skills=include_skills,
        )  # fmt: skip
        refuse = {}
        if observation == "new":
            refuse["C1/C2"] = "observation='new' only appends; use observation='context' for C1/C2"
        try:
            check_harness("gem", self.env.harness_spec, resample_names=resample_names, include_skills=include_skills,
                          refuse=refuse)  # fmt: skip
        except ValueError:
            self.env.close()
            raise
        self._closer = weakref.finalize(self, self.env.close)  # a vector env GEM never closes
        self.tokenizer = tokenizer
        self.tool_format = tool_format
        self.observation_mode = observation
        self.task_id = task_id
        self._next_seed = seed
        self._tools: list[dict[str, Any]] = []

    def _text(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]) -> str:
        if self.tokenizer is not None:
            return render(messages, tools, self.tokenizer, self.tool_format)
        return plain_text(chat_messages(messages, tools, self.tool_format))

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        if seed is None:
            seed, self._next_seed = self._next_seed, None
        options = {"task_id": self.task_id} if self.task_id else None
        observation, info = self.env.reset(seed=seed, options=options)
        self._tools = observation["tools"]
        return self._text(observation["messages"], self._tools), info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        if self.observation_mode == "context":
            text = self._text(observation["messages"], self._tools)
        else:
            text = plain_text(chat_messages(info["new_messages"], (), self.tool_format))
        return text, reward, terminated, truncated, info

    def sample_random_action(self) -> str:
        return "I have nothing to do."

    def close(self) -> None:
        self.env.close()


def close_vector_env(vector_env: Any) -> None:
    """Close every sub-environment of a GEM vector env (``gem.make_vec``), which has no ``close()``
    of its own: their sandboxes would otherwise live until the process exits."""
    for env in getattr(vector_env, "envs", ()):
        close = getattr(env, "close", None)
        if callable(close):
            close()


def register_gem_envs(namespace: str = NAMESPACE) -> list[str]:
    """Register every configuration of the space and every preset as ``{namespace}/{env id}`` in
    GEM's registry (idempotent). Returns the ids."""
    registry = gem.envs.registration.ENV_REGISTRY
    ids = []
    for harness, env_id in [(c.code, c.env_id) for c in all_configs()] + [(p, p) for p in PRESETS]:
        name = f"{namespace}/{env_id}"
        if name not in registry:
            # GEM's register(env_id, entry_point, **kwargs): the harness goes in as a keyword argument
            gem.register(name, HarnessGemEnv, harness=harness)
        ids.append(name)
    return ids
