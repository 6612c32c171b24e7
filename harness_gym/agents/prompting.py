"""Turning observations into what a model reads: OpenAI chat messages (native tool calling), or
plain chat messages with the tools described in the system prompt (text tool calling)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness_gym.tool_formats import format_names, tools_block
from harness_gym.tool_formats import text_messages as _family_text_messages

#: text tool-call formats a prompt can ask for (vLLM parser names and aliases); ``auto`` is resolved
#: from the model by the agents (see :func:`harness_gym.tool_formats.format_for_model`)
TEXT_FORMATS = tuple(name for name in format_names() if name != "auto")


def tools_prompt(tools: Sequence[Mapping[str, Any]], fmt: str = "hermes") -> str:
    """The tool section of a system prompt, for models without native tool calling, in the layout
    of family ``fmt``."""
    if fmt not in TEXT_FORMATS:
        raise ValueError(f"unknown text tool-call format {fmt!r}; choose one of {TEXT_FORMATS}")
    return tools_block(tools, fmt)


def text_messages(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], fmt: str = "hermes"
) -> list[dict[str, str]]:
    """Plain ``role``/``content`` messages: tools described in the system message, calls and tool
    results written as family ``fmt`` writes them (Hermes/Qwen: results as user turns wrapped in
    ``<tool_response>``, consecutive results joined in one turn)."""
    if fmt not in TEXT_FORMATS:
        raise ValueError(f"unknown text tool-call format {fmt!r}; choose one of {TEXT_FORMATS}")
    return _family_text_messages(messages, tools, fmt)


def openai_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages (the ``source`` tag dropped; tool call ids kept)."""
    out = []
    for message in messages:
        item: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
        if message.get("tool_calls"):
            item["tool_calls"] = message["tool_calls"]
        if message["role"] == "tool":
            item["tool_call_id"] = message.get("tool_call_id", "")
        out.append(item)
    return out
