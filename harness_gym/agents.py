"""Agents that drive an environment, and the loop that runs one episode.

An agent is anything with ``act(observation) -> action``; an optional ``reset(env)`` is called at
the start of each episode. The reference agent is privileged: it reads the task's reference
solution and the harness's tool names, so it can prove a task solvable under any harness.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import gymnasium as gym

from harness_gym.env import HarnessEnv

CALL_FORMATS = ("hermes", "xml", "openai")


class Agent(Protocol):
    def act(self, observation: Mapping[str, Any]) -> str | dict[str, Any]: ...


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


class ReferenceAgent:
    """Replays the task's reference solution through the harness's own tools, then finishes.

    It follows the workflow: writes a plan first, answers progress checks, and repeats a call the
    workflow refused. ``fmt`` chooses how calls are written (hermes, xml or openai).
    """

    def __init__(self, fmt: str = "hermes") -> None:
        if fmt not in CALL_FORMATS:
            raise ValueError(f"unknown call format {fmt!r}; choose one of {CALL_FORMATS}")
        self.fmt = fmt
        self.env: HarnessEnv | None = None
        self.queue: list[tuple[str, dict[str, Any]]] = []
        self.pending: tuple[str, dict[str, Any]] | None = None
        self.planned = False

    def reset(self, env: gym.Env) -> None:
        self.env = _unwrap(env)
        assert self.env.task is not None, "reset the environment before the agent"
        self.queue = [(step["tool"], dict(step["arguments"])) for step in self.env.task.solution]
        self.queue.append(("finish", {"message": "Reference solution applied and checked."}))
        self.pending = None
        self.planned = False

    def act(self, observation: Mapping[str, Any]) -> str | dict[str, Any]:
        assert self.env is not None, "call reset(env) first"
        last = observation["messages"][-1]
        refused = last.get("source") == "workflow" and last.get("role") == "tool"
        if not refused or self.pending is None:
            self.pending = self.queue.pop(0) if self.queue else ("finish", {"message": "done"})
        canonical, arguments = self.pending
        name = self.env.tool_interface.name_for(canonical)
        text = ""
        if not self.planned:
            steps = [f"{i}. {c} {json.dumps(a)[:60]}" for i, (c, a) in enumerate([self.pending, *self.queue], 1)]
            text = "Plan:\n" + "\n".join(steps)
            self.planned = True
        elif last.get("source") == "workflow" and last.get("role") == "user":
            text = f"Progress check: {self.env.steps} steps done, following the plan; {len(self.queue) + 1} actions remain."
        return _with_text(encode_call(name, arguments, self.fmt, call_id=f"ref_{self.env.steps}"), text)


class NullAgent:
    """Does nothing: submits at once (or, with ``finish=False``, only talks until the budget ends)."""

    def __init__(self, finish: bool = True) -> None:
        self.finish = finish
        self.env: HarnessEnv | None = None

    def reset(self, env: gym.Env) -> None:
        self.env = _unwrap(env)

    def act(self, observation: Mapping[str, Any]) -> str | dict[str, Any]:
        if not self.finish or self.env is None:
            return "I will not do anything."
        name = self.env.tool_interface.name_for("finish")
        return "Plan:\n1. Submit without changes.\n" + str(encode_call(name, {"message": "nothing done"}))


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

    @property
    def final_info(self) -> dict[str, Any]:
        return self.infos[-1] if self.infos else {}


def run_episode(env: gym.Env, agent: Any, *, seed: int | None = None, task_id: str | None = None) -> EpisodeResult:
    """Reset ``env`` (on ``task_id`` if given), let ``agent`` act until the episode ends."""
    options = {"task_id": task_id} if task_id is not None else None
    observation, info = env.reset(seed=seed, options=options)
    if hasattr(agent, "reset"):
        agent.reset(env)
    infos = [info]
    reward, terminated, truncated = 0.0, False, False
    while not (terminated or truncated):
        observation, reward, terminated, truncated, info = env.step(agent.act(observation))
        infos.append(info)
    return EpisodeResult(info["task_id"], info.get("config"), float(reward), info["step"], terminated, truncated, infos)
