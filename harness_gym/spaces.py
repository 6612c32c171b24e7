"""Gymnasium spaces for chat observations and assistant actions.

An observation is ``{"messages": [...], "tools": [...]}``: chat messages that each carry ``role``,
``content`` and ``source``, and OpenAI function schemas. An action is the assistant's text or an
OpenAI-style assistant message (``{"role": "assistant", "content": ..., "tool_calls": [...]}``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

ROLES = frozenset({"system", "user", "assistant", "tool"})
SOURCES = frozenset({"system", "task", "policy", "tool", "hook", "workflow", "summary", "skill"})


def is_message(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and value.get("role") in ROLES
        and isinstance(value.get("content"), str)
        and value.get("source") in SOURCES
    )


class MessagesSpace(spaces.Space[list]):
    """Lists of chat messages, each with ``role``, ``content`` (a string) and ``source``."""

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(None, None, seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(is_message(m) for m in x)

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, str]]:
        words = ("list", "the", "files", "fix", "bug", "run", "tests", "ok")
        text = " ".join(words[int(i)] for i in self.np_random.integers(len(words), size=5))
        return [{"role": "user", "content": text, "source": "task"}]

    def __repr__(self) -> str:
        return "MessagesSpace()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessagesSpace)


class ToolSchemasSpace(spaces.Space[list]):
    """Lists of OpenAI function schemas (``{"type": "function", "function": {"name", ...}}``)."""

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(None, None, seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(t, Mapping)
            and t.get("type") == "function"
            and isinstance(t.get("function"), Mapping)
            and isinstance(t["function"].get("name"), str)
            for t in x
        )

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, Any]]:
        return [
            {
                "type": "function",
                "function": {"name": "noop", "description": "", "parameters": {"type": "object", "properties": {}}},
            }
        ]

    def __repr__(self) -> str:
        return "ToolSchemasSpace()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ToolSchemasSpace)


class AssistantActionSpace(spaces.Space[Any]):
    """Assistant text, or an assistant message mapping with optional ``tool_calls``.

    ``sample()`` returns short random prose (no tool call), which a harness answers with feedback;
    it exists so generic tooling such as Gymnasium's ``check_env`` can drive the environment.
    """

    _WORDS = ("let", "me", "look", "at", "the", "repository", "first", "then", "fix", "it", "carefully", "now")

    def __init__(self, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(None, None, seed)

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return True
        if isinstance(x, Mapping):
            content_ok = x.get("content") is None or isinstance(x.get("content"), (str, list))
            calls_ok = x.get("tool_calls") is None or isinstance(x.get("tool_calls"), Sequence)
            return x.get("role", "assistant") == "assistant" and content_ok and calls_ok
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        count = int(self.np_random.integers(3, 9))
        return " ".join(self._WORDS[int(i)] for i in self.np_random.integers(len(self._WORDS), size=count))

    def __repr__(self) -> str:
        return "AssistantActionSpace()"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AssistantActionSpace)


def chat_observation_space() -> spaces.Dict:
    return spaces.Dict({"messages": MessagesSpace(), "tools": ToolSchemasSpace()})
