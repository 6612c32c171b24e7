"""Parsing tool calls from what models actually emit.

Supported formats:

- ``openai``: an assistant message mapping with ``tool_calls`` (``function.arguments`` a JSON string);
- ``hermes``: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (Hermes, Qwen2.5/3);
- ``xml``: ``<function=name><parameter=key>value</parameter></function>`` (Qwen3-Coder style),
  bare or inside ``<tool_call>``;
- a bare JSON object ``{"name": ..., "arguments": {...}}`` as the whole message (``auto`` only).

``auto`` detects the format per action. Every call gets an id, even a malformed one, so the error
can be answered in a tool message the model can match to its attempt.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FORMATS = ("auto", "hermes", "openai", "xml")
HERMES_EXAMPLE = '<tool_call>{"name": "<tool name>", "arguments": {"<parameter>": <value>}}</tool_call>'
XML_EXAMPLE = "<function=<tool name>><parameter=<name>>value</parameter></function>"

_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\s]*)>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\s]*)>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL)
_FENCED_JSON = re.compile(r"^```(?:json)?\s*(\{.*\})\s*```$", re.DOTALL)


@dataclass
class ToolCall:
    """One tool call as the model wrote it. ``error`` is set when it could not be parsed."""

    id: str
    name: str
    arguments: dict[str, Any]
    format: str
    raw: str = ""
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments, "format": self.format}
        if self.error:
            out["error"] = self.error
        return out


@dataclass
class ParsedAction:
    """An assistant action split into its prose (``text``) and its tool calls."""

    text: str
    calls: list[ToolCall] = field(default_factory=list)

    @property
    def errors(self) -> list[str]:
        return [c.error for c in self.calls if c.error]

    @property
    def valid_calls(self) -> list[ToolCall]:
        return [c for c in self.calls if not c.error]


class ActionError(ValueError):
    """The action is not text or an assistant message."""


def parse_action(action: str | Mapping[str, Any], fmt: str = "auto", id_prefix: str = "call") -> ParsedAction:
    """Split an action into prose and tool calls in the given format (or detect it with ``auto``)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown tool-call format {fmt!r}; choose one of {FORMATS}")
    if isinstance(action, Mapping):
        content = action.get("content") or ""
        if not isinstance(content, str):
            content = _flatten_content(content)
        if action.get("tool_calls"):
            return ParsedAction(content.strip(), _parse_openai(action["tool_calls"], id_prefix))
        if fmt == "openai":
            return ParsedAction(content.strip())
        return parse_action(content, fmt, id_prefix)
    if not isinstance(action, str):
        raise ActionError(f"an action must be a string or an assistant message mapping, got {type(action).__name__}")
    if fmt == "openai":
        return ParsedAction(action.strip())
    calls: list[ToolCall] = []
    text = action
    if fmt in ("auto", "hermes") and "<tool_call>" in action:
        for block in _HERMES.findall(action):
            calls.extend(_parse_block(block.strip(), f"{id_prefix}_{len(calls)}", allow_xml=fmt == "auto"))
        text = _HERMES.sub("", action)
    elif fmt in ("auto", "xml") and "<function=" in action:
        for name, body in _FUNCTION.findall(action):
            calls.append(_parse_xml_function(name, body, f"{id_prefix}_{len(calls)}"))
        text = _FUNCTION.sub("", action)
    elif fmt == "auto":
        bare = _bare_json_call(action.strip(), f"{id_prefix}_0")
        if bare is not None:
            return ParsedAction("", [bare])
    return ParsedAction(text.strip(), calls)


def _flatten_content(content: Any) -> str:
    """OpenAI content parts (``[{"type": "text", "text": ...}]``) to plain text."""
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))
    return str(content)


def _parse_openai(tool_calls: Any, id_prefix: str) -> list[ToolCall]:
    calls: list[ToolCall] = []
    if not isinstance(tool_calls, list):
        return [ToolCall(f"{id_prefix}_0", "", {}, "openai", repr(tool_calls), "`tool_calls` must be a list")]
    for index, item in enumerate(tool_calls):
        call_id = f"{id_prefix}_{index}"
        if not isinstance(item, Mapping) or not isinstance(item.get("function"), Mapping):
            calls.append(
                ToolCall(
                    call_id,
                    "",
                    {},
                    "openai",
                    repr(item),
                    'each tool call must look like {"id": ..., "type": "function", "function": {"name": ..., "arguments": "<JSON>"}}',
                )
            )
            continue
        call_id = str(item.get("id") or call_id)
        function = item["function"]
        name = function.get("name")
        raw_args = function.get("arguments", "{}")
        if not isinstance(name, str) or not name:
            calls.append(
                ToolCall(
                    call_id, "", {}, "openai", json.dumps(function, default=str), "the tool call has no function name"
                )
            )
            continue
        arguments, error = _decode_arguments(raw_args)
        calls.append(ToolCall(call_id, name, arguments, "openai", json.dumps(function, default=str), error))
    return calls


def _decode_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, Mapping):
        return dict(raw), None
    if isinstance(raw, str):
        try:
            value = json.loads(raw)
        except json.JSONDecodeError as exc:
            return {}, f"the arguments are not valid JSON ({exc.msg} at character {exc.pos}): {_snippet(raw)}"
        if isinstance(value, dict):
            return value, None
        return {}, f"the arguments must be a JSON object, got {type(value).__name__}: {_snippet(raw)}"
    return {}, f"the arguments must be a JSON object, got {type(raw).__name__}"


def _parse_block(block: str, call_id: str, allow_xml: bool) -> list[ToolCall]:
    """The inside of one ``<tool_call>`` block: JSON, or (auto) Qwen3-Coder XML."""
    if allow_xml and block.startswith("<function="):
        return [
            _parse_xml_function(n, b, f"{call_id}_{i}" if i else call_id)
            for i, (n, b) in enumerate(_FUNCTION.findall(block))
        ]
    try:
        value = json.loads(block)
    except json.JSONDecodeError as exc:
        return [
            ToolCall(
                call_id,
                "",
                {},
                "hermes",
                block,
                f"could not parse the tool call as JSON ({exc.msg} at character {exc.pos}): {_snippet(block)}. "
                f"Expected {HERMES_EXAMPLE}",
            )
        ]
    return [_call_from_json(value, call_id, "hermes", block)]


def _call_from_json(value: Any, call_id: str, fmt: str, raw: str) -> ToolCall:
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return ToolCall(
            call_id,
            "",
            {},
            fmt,
            raw,
            f'a tool call needs a "name" and an "arguments" object. Expected {HERMES_EXAMPLE}',
        )
    raw_args = value.get("arguments", value.get("parameters", {}))
    arguments, error = _decode_arguments(raw_args)
    return ToolCall(call_id, value["name"], arguments, fmt, raw, error)


def _parse_xml_function(name: str, body: str, call_id: str) -> ToolCall:
    raw = f"<function={name}>{body}</function>"
    if not name:
        return ToolCall(call_id, "", {}, "xml", raw, f"the function tag has no name. Expected {XML_EXAMPLE}")
    arguments: dict[str, Any] = {}
    for key, value in _PARAMETER.findall(body):
        if not key:
            return ToolCall(call_id, name, {}, "xml", raw, f"a parameter tag has no name. Expected {XML_EXAMPLE}")
        if value.startswith("\n"):
            value = value[1:]
        if value.endswith("\n"):
            value = value[:-1]
        arguments[key] = value
    return ToolCall(call_id, name, arguments, "xml", raw)


def _bare_json_call(text: str, call_id: str) -> ToolCall | None:
    fenced = _FENCED_JSON.match(text)
    candidate = fenced.group(1) if fenced else text
    if not (candidate.startswith("{") and candidate.endswith("}")):
        return None
    try:
        value = json.loads(candidate)
    except json.JSONDecodeError:
        return None
    if isinstance(value, dict) and "name" in value and ("arguments" in value or "parameters" in value):
        return _call_from_json(value, call_id, "json", candidate)
    return None


def coerce_arguments(arguments: dict[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """XML parameters arrive as strings: decode those whose schema type is not a string."""
    properties = schema.get("properties", {})
    out = dict(arguments)
    for key, value in arguments.items():
        expected = properties.get(key, {}).get("type")
        if isinstance(value, str) and expected not in (None, "string"):
            with contextlib.suppress(json.JSONDecodeError):
                out[key] = json.loads(value)
    return out


def _snippet(text: str, limit: int = 200) -> str:
    text = text.strip()
    return "`" + (text if len(text) <= limit else text[:limit] + "…") + "`"
