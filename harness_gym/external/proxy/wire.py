"""Small pieces every dialect module shares: errors, ids, SSE framing, tool-call arguments."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from harness_gym.external.policies import PolicyReply, PolicyRequest


class DialectError(ValueError):
    """The request does not have the dialect's shape: answered 400 with this message."""


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    """One server-sent event (``event:`` line only where the dialect names its events)."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()


def with_call_ids(reply: PolicyReply, prefix: str) -> list[dict[str, Any]]:
    """The reply's tool calls, each with an id (policies may leave it empty) and a string name."""
    calls = []
    for call in reply.tool_calls:
        arguments = call.get("arguments", "{}")
        calls.append(
            {
                "id": str(call.get("id") or new_id(prefix)),
                "name": str(call.get("name") or ""),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
            }
        )
    return calls


def arguments_object(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as an object; a policy's malformed JSON becomes ``{}`` (the CLI then
    reports the missing argument to the model, as it would for any bad call)."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def require(condition: bool, message: str) -> None:
    if not condition:
        raise DialectError(message)


def as_list(value: Any, what: str) -> list[Any]:
    if value is None:
        return []
    require(isinstance(value, list), f"{what} must be a list")
    return list(value)


def function_tool(name: Any, description: Any, parameters: Any) -> dict[str, Any]:
    require(isinstance(name, str) and bool(name), "every tool needs a name")
    if not isinstance(parameters, Mapping):
        parameters = {"type": "object", "properties": {}}
    return {
        "type": "function",
        "function": {"name": name, "description": str(description or ""), "parameters": dict(parameters)},
    }


def finish_of(reply: PolicyReply, calls: list[dict[str, Any]]) -> str:
    """stop | tool_calls | length, made consistent with whether the reply calls tools; a reply cut at
    the policy's own cap (``capped``), not at the CLI's limit, is not ``length`` to the CLI."""
    if reply.finish_reason == "length" and not reply.capped:
        return "length"
    return "tool_calls" if calls else "stop"


def policy_request(
    body: Mapping[str, Any],
    model: str | None,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]],
    *,
    max_tokens_keys: Sequence[str],
    settings: Mapping[str, Any] | None = None,
) -> PolicyRequest:
    """The canonical request every dialect's ``parse`` ends in: the route's model (else the body's),
    the translated messages and tools, the first of ``max_tokens_keys`` set and the temperature,
    read from ``settings`` (Gemini's ``generationConfig``; default the body itself); a value that
    is not a number is left out."""
    settings = body if settings is None else settings
    max_tokens = next((settings[k] for k in max_tokens_keys if settings.get(k) is not None), None)
    temperature = settings.get("temperature")
    return PolicyRequest(
        model=str(model or body.get("model") or ""),
        messages=messages,
        tools=tools,
        max_tokens=int(max_tokens) if isinstance(max_tokens, int | float) else None,
        temperature=float(temperature) if isinstance(temperature, int | float) else None,
    )
