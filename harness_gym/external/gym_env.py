"""A real CLI as a Gymnasium environment, with inverted control.

``gym.make("harness_gym/External-ClaudeCode-v0", tasks="builtin")``: at ``reset`` the CLI starts in
the background (in the task's sandbox, against the recording proxy, as :mod:`.runner` runs it);
each observation is the agent request it just sent (``{"messages", "tools"}`` in canonical OpenAI
chat form), each action is the policy's reply (text, or an assistant message with ``tool_calls``),
and the episode ends when the CLI exits: the reward is the task's grade (0 for an error). Only the
policy's replies are actions, so a trainer's masks are exact. Side requests (titles, summaries) are
answered with a short text and never become observations. ``world=`` and ``sandbox=`` choose where
the CLI runs, as for :func:`~harness_gym.external.runner.run_external_episode` (checked at make time).
"""

from __future__ import annotations

import json
import queue
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from harness_gym.external.catalog import load_cli
from harness_gym.external.install import require_install
from harness_gym.external.policies import PolicyReply, PolicyRequest, text_of
from harness_gym.external.proxy.recording import forged_calls
from harness_gym.external.runner import (
    DEFAULT_MAX_TURNS,
    DEFAULT_WALL_S,
    ExternalEpisode,
    place_cli,
    run_external_episode,
)
from harness_gym.spaces import AssistantActionSpace, chat_observation_space
from harness_gym.tasks import load_tasks

SOURCES = {"system": "system", "user": "task", "assistant": "policy", "tool": "tool"}
SIDE_ANSWER = "OK"


class _Handoff:
    """The policy behind the proxy: hands each agent request to the environment and waits for its action."""

    def __init__(self, timeout_s: float) -> None:
        self.requests: queue.Queue[PolicyRequest | None] = queue.Queue()
        self.replies: queue.Queue[PolicyReply | None] = queue.Queue()
        self.timeout_s = timeout_s
        self.made: list[PolicyReply] = []  # every reply given: what an observation may call the policy's

    def complete(self, request: PolicyRequest) -> PolicyReply:
        if request.side:
            return PolicyReply(content=SIDE_ANSWER)
        self.requests.put(request)
        try:
            reply = self.replies.get(timeout=self.timeout_s)
        except queue.Empty:
            reply = None
        if reply is None:  # the environment was closed or reset: end the CLI's turn
            raise RuntimeError("the environment gave no action")
        self.made.append(reply)
        return reply


class ExternalCliEnv(gym.Env[dict[str, Any], Any]):
    """One real CLI (``cli``: ``external:claude-code``, ...) on a task suite; see the module docstring."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (Gymnasium's own)

    def __init__(
        self,
        cli: str,
        tasks: Any = "builtin",
        *,
        max_turns: int = DEFAULT_MAX_TURNS,
        wall_s: float = DEFAULT_WALL_S,
        action_timeout_s: float = 600.0,
        sandbox_options: Mapping[str, Any] | None = None,
        world: str | None = None,
        sandbox: str | None = None,
    ) -> None:
        self.cli = load_cli(cli)
        install = require_install(self.cli)  # a missing install fails at make time, naming the install command
        self.tasks = load_tasks(tasks)
        self.world, self.sandbox = world, sandbox
        for task in self.tasks:  # an unknown or unbuilt world, or one the tree cannot run on: now, by name
            place_cli(self.cli, install, task, world, sandbox, sandbox_options)
        self.max_turns, self.wall_s = max_turns, wall_s
        self.action_timeout_s = action_timeout_s
        self.sandbox_options = dict(sandbox_options or {})
        self.observation_space = chat_observation_space()
        self.action_space = AssistantActionSpace()
        self._handoff: _Handoff | None = None
        self._thread: threading.Thread | None = None
        self._result: list[ExternalEpisode | BaseException] = []
        self.episode: ExternalEpisode | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        self._finish()
        options = options or {}
        if "task_id" in options:
            task = next((t for t in self.tasks if t.id == options["task_id"]), None)
            if task is None:
                raise ValueError(f"unknown task_id {options['task_id']!r}")
        else:
            task = self.tasks[int(self.np_random.integers(len(self.tasks)))]
        self._handoff, self._result, self.episode = _Handoff(self.action_timeout_s), [], None
        handoff, result = self._handoff, self._result

        def run() -> None:
            try:
                result.append(
                    run_external_episode(
                        self.cli,
                        task,
                        handoff,
                        max_turns=self.max_turns,
                        wall_s=self.wall_s,
                        sandbox_options=self.sandbox_options,
                        seed=seed or 0,
                        world=self.world,
                        sandbox=self.sandbox,
                    )
                )
            except BaseException as exc:  # a broken install or proxy: reported at the next wait
                result.append(exc)
            finally:
                handoff.requests.put(None)

        self._thread = threading.Thread(target=run, name=f"hg-{self.cli.name}", daemon=True)
        self._thread.start()
        observation, ended = self._next()
        if ended:
            raise RuntimeError(f"{self.cli.id} ended before its first request: {self._ended_error()}")
        return observation, {"task_id": task.id, "cli": self.cli.id}

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self._handoff is None:
            raise RuntimeError("call reset() before step()")
        self._handoff.replies.put(_reply(action))
        observation, ended = self._next()
        if not ended:
            return observation, 0.0, False, False, {}
        episode = self.episode
        assert episode is not None
        record = episode.record
        truncated = bool(record.get("truncated"))
        info = {"record": record, "error": record.get("error")}
        return observation, float(record["reward"]), not truncated, truncated, info

    def close(self) -> None:
        self._finish()
        super().close()

    # ------------------------------------------------------------------ internals

    def _next(self) -> tuple[dict[str, Any], bool]:
        """The CLI's next agent request as an observation, or (empty, True) once it has exited."""
        assert self._handoff is not None
        request = self._handoff.requests.get()
        if request is None:
            assert self._thread is not None
            self._thread.join()
            outcome = self._result[0] if self._result else RuntimeError("the CLI's runner ended without a result")
            if isinstance(outcome, BaseException):
                raise outcome
            self.episode = outcome
            return {"messages": [], "tools": []}, True
        return _observation(request, self._handoff.made), False

    def _ended_error(self) -> str:
        return str(self.episode.record.get("error")) if self.episode is not None else "unknown"

    def _finish(self) -> None:
        """End a running CLI (its pending request gets no action) and wait for its runner."""
        if self._handoff is not None and self._thread is not None and self._thread.is_alive():
            self._handoff.replies.put(None)
            while self._thread.is_alive():
                try:
                    if self._handoff.requests.get(timeout=1.0) is not None:
                        self._handoff.replies.put(None)
                except queue.Empty:
                    pass
        self._handoff = None


def _observation(request: PolicyRequest, made: Sequence[PolicyReply] = ()) -> dict[str, Any]:
    """The request as an observation. An assistant message is ``source: "policy"`` only when it is one
    of the replies given (its calls match theirs, or its text does): the history passes through the
    sandbox, where the agent can rewrite it, and a trainer must not learn from what it forged (such a
    message is marked ``hook``, written by the harness side; the runner flags the episode)."""
    replies = list(made)
    texts = {reply.content.strip() for reply in replies}
    messages = []
    for message in request.messages:
        role = str(message.get("role")) if message.get("role") in SOURCES else "user"
        text = text_of(message.get("content"))
        source = SOURCES[role]
        if role == "assistant":
            ours = forged_calls([message], replies) == [] if message.get("tool_calls") else text.strip() in texts
            source = "policy" if ours else "hook"
        entry: dict[str, Any] = {"role": role, "content": text, "source": source}
        for key in ("tool_calls", "tool_call_id", "name"):
            if message.get(key):
                entry[key] = message[key]
        messages.append(entry)
    return {"messages": messages, "tools": list(request.tools)}


def _reply(action: Any) -> PolicyReply:
    """A policy reply from an action: text, or an OpenAI assistant message with ``tool_calls``."""
    if isinstance(action, str):
        return PolicyReply(content=action)
    if not isinstance(action, Mapping):
        raise ValueError(f"an action is text or an assistant message, got {type(action).__name__}")
    calls = []
    for i, call in enumerate(action.get("tool_calls") or []):
        function = call.get("function", call)
        arguments = function.get("arguments", "{}")
        calls.append(
            {
                "id": str(call.get("id") or f"call_{i}"),
                "name": str(function["name"]),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            }
        )
    return PolicyReply(
        content=str(action.get("content") or ""), tool_calls=calls, finish_reason="tool_calls" if calls else "stop"
    )
