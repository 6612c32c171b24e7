"""The agent interface and the loop that runs one episode.

An agent is anything with ``act(observation) -> action`` (sync or async); an optional
``reset(env)`` is called at the start of each episode. A plain callable
``(messages, tools) -> assistant message`` becomes an agent with :func:`as_agent`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym

from harness_gym.env import HarnessEnv
from harness_gym.errors import AgentError

CALL_FORMATS = ("hermes", "xml", "openai")


class ContextOverflow(AgentError):
    """The prompt no longer fits the model's context: an episode outcome (a failure), not an error."""


class Agent(Protocol):
    """Anything that answers an observation with an action (text or an assistant message)."""

    def act(self, observation: Mapping[str, Any]) -> str | dict[str, Any]: ...


class CallableAgent:
    """Wraps ``function(messages, tools) -> assistant message or text`` (sync or async) as an agent."""

    def __init__(self, function: Callable[..., Any], name: str | None = None) -> None:
        self.function = function
        self.name = name or getattr(function, "__name__", "callable")

    def act(self, observation: Mapping[str, Any]) -> Any:
        return self.function(observation["messages"], observation["tools"])


def as_agent(agent: Any) -> Any:
    """An agent object from an agent, or from a plain ``(messages, tools)`` callable."""
    if hasattr(agent, "act"):
        return agent
    if callable(agent):
        return CallableAgent(agent)
    raise TypeError(f"an agent needs an act(observation) method or must be callable, got {type(agent).__name__}")


def _resolve(value: Any) -> Any:
    """Await an async agent's answer (each episode runs in its own thread, so asyncio.run is safe)."""
    return asyncio.run(_awaited(value)) if inspect.isawaitable(value) else value


async def _awaited(value: Awaitable[Any]) -> Any:
    """Any awaitable (not only a coroutine) as a coroutine, which asyncio.run takes."""
    return await value


def encode_call(
    name: str, arguments: Mapping[str, Any], fmt: str = "hermes", call_id: str = "call_0"
) -> str | dict[str, Any]:
    """One tool call written the way a model in format ``fmt`` would write it."""
    if fmt == "hermes":
        return (
            "<tool_call>\n"
            + json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
            + "\n</tool_call>"
        )
    if fmt == "xml":
        params = "".join(
            f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
            for k, v in arguments.items()
        )
        return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"
    if fmt == "openai":
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(dict(arguments), ensure_ascii=False)},
                }
            ],
        }
    raise ValueError(f"unknown call format {fmt!r}; choose one of {CALL_FORMATS}")


def _with_text(action: str | dict[str, Any], text: str) -> str | dict[str, Any]:
    if not text:
        return action
    if isinstance(action, dict):
        return dict(action, content=text)
    return f"{text}\n{action}"


def _unwrap(env: gym.Env) -> HarnessEnv:
    inner = env.unwrapped
    if not isinstance(inner, HarnessEnv):
        raise TypeError(f"this agent needs a harness_gym environment, got {type(inner).__name__}")
    return inner


@dataclass
class EpisodeResult:
    """The outcome of one episode."""

    task_id: str
    config: str | None
    reward: float
    steps: int
    terminated: bool
    truncated: bool
    infos: list[dict[str, Any]] = field(default_factory=list)
    transcript: list[dict[str, Any]] = field(default_factory=list)
    spec_hash: str = ""
    grader_log: str = ""
    agent_s: float = 0.0
    outcome: str = "finished"  # or "context_overflow": the agent could not take another step

    @property
    def final_info(self) -> dict[str, Any]:
        return self.infos[-1] if self.infos else {}

    def render(self, limit: int = 4000) -> str:
        """A compact text view of the episode for a teacher model (harness evolution, skill
        extraction): the outcome, then each non-system message cut to 300 characters."""
        lines = [
            f"task {self.task_id}: reward {self.reward}, {self.steps} steps, "
            f"{'truncated' if self.truncated else 'finished'}"
        ]
        for message in self.transcript:
            if message["source"] in ("system",):
                continue
            lines.append(f"[{message['source']}] {message['content'][:300]}")
        text = "\n".join(lines)
        return text if len(text) <= limit else text[: limit // 2] + "\n...\n" + text[-limit // 2 :]


def run_episode(env: gym.Env, agent: Any, *, seed: int | None = None, task_id: str | None = None) -> EpisodeResult:
    """Reset ``env`` (on ``task_id`` if given), let ``agent`` act until the episode ends.

    An agent that raises :class:`ContextOverflow` ends the episode with outcome
    ``context_overflow`` and reward 0 (the workspace is not graded: the episode failed)."""
    agent = as_agent(agent)
    options = {"task_id": task_id} if task_id is not None else None
    observation, info = env.reset(seed=seed, options=options)
    if hasattr(agent, "reset"):
        _resolve(agent.reset(env))
    infos = [info]
    reward, terminated, truncated = 0.0, False, False
    agent_s = 0.0
    outcome = "finished"
    while not (terminated or truncated):
        started = time.perf_counter()
        try:
            action = _resolve(agent.act(observation))
        except ContextOverflow as exc:
            agent_s += time.perf_counter() - started
            outcome, reward, truncated = "context_overflow", 0.0, True
            info = {**info, "truncation_reason": f"context overflow: {exc}", "terminated_reason": "truncated"}
            infos.append(info)
            break
        agent_s += time.perf_counter() - started
        observation, step_reward, terminated, truncated, info = env.step(action)
        reward = float(step_reward)
        infos.append(info)
    inner = _unwrap(env)
    transcript = [dict(m) for m in inner.transcript]
    return EpisodeResult(
        info["task_id"],
        info.get("config"),
        float(reward),
        info["step"],
        terminated,
        truncated,
        infos,
        transcript,
        info.get("spec_hash", ""),
        inner.last_grade.log if inner.last_grade and outcome == "finished" else "",
        agent_s,
        outcome,
    )
