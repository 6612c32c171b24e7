"""OpenAI Chat Completions (``POST /v1/chat/completions``): Qwen Code, opencode, OpenClaw,
mini-swe-agent, OpenHands. The canonical form is this dialect, so translation is mostly cleaning."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from harness_gym.external.policies import PolicyReply, PolicyRequest
from harness_gym.external.proxy.wire import (
    OBJECT,
    DialectError,
    as_list,
    finish_of,
    function_tool,
    new_id,
    policy_request,
    require,
    sse,
    with_call_ids,
)

DIALECT = "chat"
_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def _message(message: Any) -> dict[str, Any]:
    if not isinstance(message, OBJECT):
        raise DialectError("every message must be an object")
    role = message.get("role")
    if role not in _ROLES:  # the message is built only on failure
        raise DialectError(f"unknown role {role!r}")
    out: dict[str, Any] = {"role": "system" if role == "developer" else role, "content": message.get("content")}
    if role == "function":  # the legacy function-calling turn
        out = {"role": "tool", "tool_call_id": str(message.get("name") or ""), "content": message.get("content")}
    if role == "assistant":
        calls = as_list(message.get("tool_calls"), "tool_calls")
        legacy = message.get("function_call")
        if isinstance(legacy, OBJECT):
            calls.append({"id": str(legacy.get("name") or ""), "type": "function", "function": dict(legacy)})
        if calls:
            out["tool_calls"] = calls
    if role == "tool":
        out["tool_call_id"] = str(message.get("tool_call_id") or "")
    return out


def parse(body: Mapping[str, Any], model: str | None = None) -> PolicyRequest:
    messages = [_message(m) for m in as_list(body.get("messages"), "messages")]
    require(bool(messages), "messages must not be empty")
    tools = []
    for tool in as_list(body.get("tools"), "tools"):
        require(isinstance(tool, OBJECT), "every tool must be an object")
        if tool.get("type", "function") == "function" and isinstance(tool.get("function"), OBJECT):
            f = tool["function"]
            tools.append(function_tool(f.get("name"), f.get("description"), f.get("parameters")))
    for f in as_list(body.get("functions"), "functions"):
        if isinstance(f, OBJECT):
            tools.append(function_tool(f.get("name"), f.get("description"), f.get("parameters")))
    return policy_request(body, model, messages, tools, max_tokens_keys=("max_completion_tokens", "max_tokens"))


def wants_stream(body: Mapping[str, Any], query: Mapping[str, str]) -> bool:
    return bool(body.get("stream"))


def _usage(reply: PolicyReply) -> dict[str, int]:
    return {
        "prompt_tokens": reply.prompt_tokens,
        "completion_tokens": reply.completion_tokens,
        "total_tokens": reply.prompt_tokens + reply.completion_tokens,
    }


def render(reply: PolicyReply, body: Mapping[str, Any], model: str) -> dict[str, Any]:
    calls = with_call_ids(reply, "call_")
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or (None if calls else "")}
    if calls:
        message["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
            for c in calls
        ]
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_of(reply, calls), "logprobs": None}],
        "usage": _usage(reply),
    }


def render_stream(reply: PolicyReply, body: Mapping[str, Any], model: str) -> Iterator[bytes]:
    """A role chunk, the text, per call a header chunk (id, name) and an arguments chunk, the finish
    chunk, a usage chunk with ``choices: []`` and ``[DONE]``: the shape every CLI here accepted."""
    calls = with_call_ids(reply, "call_")
    base = {"id": new_id("chatcmpl-"), "object": "chat.completion.chunk", "created": int(time.time()), "model": model}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})

    yield chunk({"role": "assistant", "content": ""})
    if reply.content:
        yield chunk({"content": reply.content})
    for index, call in enumerate(calls):
        header = {
            "index": index,
            "id": call["id"],
            "type": "function",
            "function": {"name": call["name"], "arguments": ""},
        }
        yield chunk({"tool_calls": [header]})
        yield chunk({"tool_calls": [{"index": index, "function": {"arguments": call["arguments"]}}]})
    yield chunk({}, finish_of(reply, calls))
    yield sse({**base, "choices": [], "usage": _usage(reply)})
    yield sse("[DONE]")


def error(status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_exceeded"}.get(
        status, "server_error"
    )
    return {"error": {"message": message, "type": kind, "code": status}}
