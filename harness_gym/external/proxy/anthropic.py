"""Anthropic Messages (``POST /v1/messages``, ``/v1/messages/count_tokens``): Claude Code.

Claude Code's extras (``thinking``, ``context_management``, ``output_config``, ``metadata``,
``cache_control`` on blocks, server tools without ``input_schema``) have no canonical counterpart and
are dropped; ``thinking`` blocks in the history are dropped; a ``role: "system"`` message inside
``messages`` (Claude Code sends one) becomes a system message; ``tool_result`` blocks become ``tool``
messages in order, followed by the user text of the same turn.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from harness_gym.external.policies import PolicyReply, PolicyRequest, estimate_tokens, text_of
from harness_gym.external.proxy.wire import (
    OBJECT,
    DialectError,
    arguments_object,
    as_list,
    finish_of,
    function_tool,
    new_id,
    objects,
    policy_request,
    require,
    sse,
    with_call_ids,
)

DIALECT = "anthropic"
_STOP = {"stop": "end_turn", "tool_calls": "tool_use", "length": "max_tokens"}


def _blocks(content: Any) -> list[Mapping[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return objects(content, "content", "content block")


def _tool_result_text(block: Mapping[str, Any]) -> str:
    content = block.get("content")
    text = content if isinstance(content, str) else text_of(_blocks(content)) if content is not None else ""
    return f"Error: {text}" if block.get("is_error") and not text.startswith("Error") else text


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One pass over each message's blocks (every CLI request resends the whole conversation)."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        messages.append({"role": "system", "content": text_of(_blocks(system))})
    dumps = json.dumps
    for message in as_list(body.get("messages"), "messages"):
        if not isinstance(message, OBJECT):
            raise DialectError("every message must be an object")
        role = message.get("role")
        if role not in ("user", "assistant", "system"):
            raise DialectError(f"unknown role {role!r}")
        blocks = _blocks(message.get("content"))
        if role == "system":
            messages.append({"role": "system", "content": text_of(blocks)})
            continue
        texts: list[str] = []
        if role == "assistant":
            calls = []
            for b in blocks:
                kind = b.get("type")
                if kind == "text":
                    texts.append(str(b.get("text", "")))
                elif kind == "tool_use" or kind == "server_tool_use":
                    calls.append(
                        {
                            "id": str(b.get("id") or ""),
                            "type": "function",
                            "function": {"name": str(b.get("name") or ""), "arguments": dumps(b.get("input") or {})},
                        }
                    )
            out: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
            if calls:
                out["tool_calls"] = calls
            messages.append(out)
            continue
        for block in blocks:
            kind = block.get("type")
            if kind == "tool_result":
                messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(block.get("tool_use_id") or ""),
                        "content": _tool_result_text(block),
                    }
                )
            elif kind == "text":
                texts.append(str(block.get("text", "")))
            elif kind == "image" or kind == "document":
                texts.append(f"[{kind} omitted]")
        if texts:
            messages.append({"role": "user", "content": "\n".join(texts)})
    require(len(messages) > 0, "messages must not be empty")
    return messages


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    tools = []
    for tool in as_list(body.get("tools"), "tools"):
        require(isinstance(tool, OBJECT), "every tool must be an object")
        if "input_schema" in tool:  # server tools (web_search_2025..., ...) have a type and no schema
            tools.append(function_tool(tool.get("name"), tool.get("description"), tool.get("input_schema")))
    return tools


def parse(body: Mapping[str, Any], model: str | None = None) -> PolicyRequest:
    return policy_request(body, model, _messages(body), _tools(body), max_tokens_keys=("max_tokens",))


def count_tokens(body: Mapping[str, Any]) -> dict[str, Any]:
    """``/v1/messages/count_tokens``: an estimate over the canonical request (no policy call)."""
    request = parse(body)
    return {"input_tokens": estimate_tokens([request.messages, request.tools])}


def wants_stream(body: Mapping[str, Any], query: Mapping[str, str]) -> bool:
    return bool(body.get("stream"))


def _content(reply: PolicyReply, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.content or not calls:
        blocks.append({"type": "text", "text": reply.content})
    blocks += [
        {"type": "tool_use", "id": c["id"], "name": c["name"], "input": arguments_object(c["arguments"])} for c in calls
    ]
    return blocks


def render(reply: PolicyReply, body: Mapping[str, Any], model: str) -> dict[str, Any]:
    calls = with_call_ids(reply, "toolu_")
    return {
        "id": new_id("msg_"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": _content(reply, calls),
        "stop_reason": _STOP[finish_of(reply, calls)],
        "stop_sequence": None,
        "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": reply.completion_tokens},
    }


def render_stream(reply: PolicyReply, body: Mapping[str, Any], model: str) -> Iterator[bytes]:
    """``message_start``, per block start / one delta / stop, ``message_delta``, ``message_stop``."""
    message = render(reply, body, model)
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": reply.prompt_tokens, "output_tokens": 0},
    }
    yield sse({"type": "message_start", "message": start}, "message_start")
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            head: dict[str, Any] = {"type": "text", "text": ""}
            delta: dict[str, Any] = {"type": "text_delta", "text": block["text"]}
        else:
            head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        yield sse({"type": "content_block_start", "index": index, "content_block": head}, "content_block_start")
        yield sse({"type": "content_block_delta", "index": index, "delta": delta}, "content_block_delta")
        yield _block_stop(index)
    yield sse(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": reply.completion_tokens},
        },
        "message_delta",
    )
    yield _MESSAGE_STOP


_MESSAGE_STOP = sse({"type": "message_stop"}, "message_stop")
_BLOCK_STOPS: dict[int, bytes] = {}  # index -> its content_block_stop event (the same bytes every reply)


def _block_stop(index: int) -> bytes:
    event = _BLOCK_STOPS.get(index)
    if event is None:
        event = sse({"type": "content_block_stop", "index": index}, "content_block_stop")
        if index < 64:
            _BLOCK_STOPS[index] = event
    return event


def error(status: int, message: str) -> dict[str, Any]:
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        413: "request_too_large",
        429: "rate_limit_error",
    }.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}}
