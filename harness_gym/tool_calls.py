"""Parsing tool calls from what models actually emit.

An action is text or an assistant message mapping. A mapping's ``tool_calls`` (OpenAI native tool
calling, ``function.arguments`` a JSON string) are read directly; text is read in a model family's
format from :mod:`harness_gym.tool_formats` (vLLM's ``--tool-call-parser`` names: ``hermes``,
``qwen3_xml``, ``llama3_json``, ``mistral``, ``deepseek_v3``, ``openai`` (gpt-oss harmony), ...;
``xml`` is kept as an alias of ``qwen3_xml``), or detected per action with ``auto``.

Every call gets an id, even a malformed one, so the error can be answered in a tool message the
model can match to its attempt. Whatever the text or message holds, parsing never raises; only an
action that is neither text nor a mapping is an :class:`ActionError`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from typing import Any

from harness_gym.errors import ToolCallError
from harness_gym.tool_formats import ParsedAction, ToolCall, format_names, parse_text
from harness_gym.tool_formats.base import arguments_object, dumps_safe

FORMATS = format_names()
_FORMAT_SET = frozenset(FORMATS)
_OPENAI_CALL_EXAMPLE = (
    'each tool call must look like {"id": ..., "type": "function", "function": {"name": ..., "arguments": "<JSON>"}}'
)

__all__ = ["FORMATS", "ActionError", "ParsedAction", "ToolCall", "coerce_arguments", "message_text", "parse_action"]


class ActionError(ToolCallError):
    """The action is not text or an assistant message."""


def parse_action(action: str | Mapping[str, Any], fmt: str = "auto", id_prefix: str = "call") -> ParsedAction:
    """Split an action into prose and tool calls in the given format (or detect it with ``auto``)."""
    if fmt not in _FORMAT_SET:
        raise ValueError(f"unknown tool-call format {fmt!r}; choose one of {FORMATS}")
    if type(action) is str:  # the usual case, before an ABC isinstance check
        return parse_text(action, fmt, id_prefix)
    if isinstance(action, Mapping):
        content = message_text(action.get("content"))
        tool_calls = action.get("tool_calls")
        if tool_calls:
            return ParsedAction(content.strip(), _parse_openai(tool_calls, id_prefix), format="openai")
        return parse_text(content, fmt, id_prefix)
    if not isinstance(action, str):
        raise ActionError(f"an action must be a string or an assistant message mapping, got {type(action).__name__}")
    return parse_text(action, fmt, id_prefix)


def message_text(content: Any) -> str:
    """Message content as text: OpenAI content parts (``[{"type": "text", "text": ...}]``) joined,
    None empty, anything else as its string form."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text") for part in content if isinstance(part, Mapping)]
        return "".join(p for p in parts if isinstance(p, str))
    return dumps_safe(content)


def _parse_openai(tool_calls: Any, id_prefix: str) -> list[ToolCall]:
    if not isinstance(tool_calls, list):
        return [ToolCall(f"{id_prefix}_0", "", {}, "openai", dumps_safe(tool_calls), "`tool_calls` must be a list")]
    calls: list[ToolCall] = []
    for index, item in enumerate(tool_calls):
        call_id = f"{id_prefix}_{index}"
        if not isinstance(item, Mapping) or not isinstance(item.get("function"), Mapping):
            calls.append(ToolCall(call_id, "", {}, "openai", dumps_safe(item), _OPENAI_CALL_EXAMPLE))
            continue
        given_id = item.get("id")
        call_id = given_id if isinstance(given_id, str) and given_id else call_id
        function = item["function"]
        name = function.get("name")
        raw = dumps_safe(function)
        if not isinstance(name, str) or not name:
            calls.append(ToolCall(call_id, "", {}, "openai", raw, "the tool call has no function name"))
            continue
        arguments, error = arguments_object(function.get("arguments", "{}"))
        calls.append(ToolCall(call_id, name, arguments, "openai", raw, error))
    return calls


def coerce_arguments(arguments: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """XML parameters arrive as strings: decode those whose schema type is not a string."""
    properties = schema.get("properties", {}) if isinstance(schema, Mapping) else {}
    out = dict(arguments)
    for key, value in arguments.items():
        spec = properties.get(key) if isinstance(properties, Mapping) else None
        expected = spec.get("type") if isinstance(spec, Mapping) else None
        if isinstance(value, str) and expected not in (None, "string"):
            with contextlib.suppress(json.JSONDecodeError, RecursionError):
                out[key] = json.loads(value)
    return out
