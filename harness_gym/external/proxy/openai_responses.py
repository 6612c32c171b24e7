"""OpenAI Responses (``POST /v1/responses``): Codex.

Developer and system input items become system messages; ``function_call`` / ``function_call_output``
items become assistant tool calls and tool messages; ``custom`` (freeform) tools such as Codex's
``apply_patch`` become function tools with one string argument ``input`` and are rendered back as
``custom_tool_call`` items. ``reasoning`` items, ``store``, ``include``, ``reasoning`` and non-function
tool types (``web_search``, ``namespace``, ...) have no canonical counterpart and are dropped.
"""

from __future__ import annotations

import json
import time
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
    policy_request,
    require,
    sse,
    with_call_ids,
)

DIALECT = "responses"
_CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "the tool's freeform input"}},
    "required": ["input"],
}


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, OBJECT):  # {"content": ..., "success": ...} in some clients
        return text_of(output.get("content")) if "content" in output else str(output)
    return text_of(output)


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for item in as_list(items, "input"):
        require(isinstance(item, OBJECT), "every input item must be an object")
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                raise DialectError(f"unknown role {role!r}")
            messages.append(
                {"role": "system" if role == "developer" else role, "content": text_of(item.get("content"))}
            )
        elif kind in ("function_call", "custom_tool_call"):
            arguments = item.get("arguments", "{}") if kind == "function_call" else _custom_arguments(item.get("input"))
            call = {
                "id": str(item.get("call_id") or item.get("id") or ""),
                "type": "function",
                "function": {"name": str(item.get("name") or ""), "arguments": str(arguments)},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":  # parallel calls: one assistant turn
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id") or ""),
                    "content": _output_text(item.get("output")),
                }
            )
        # reasoning, web_search_call, ... carry nothing the policy reads
    require(len(messages) > 0, "input must not be empty")
    return messages


def _custom_arguments(value: Any) -> str:
    return json.dumps({"input": value if isinstance(value, str) else ""})


def custom_tools(body: Mapping[str, Any]) -> set[str]:
    return {
        str(t.get("name"))
        for t in as_list(body.get("tools"), "tools")
        if isinstance(t, OBJECT) and t.get("type") == "custom"
    }


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    tools = []
    for tool in as_list(body.get("tools"), "tools"):
        require(isinstance(tool, OBJECT), "every tool must be an object")
        if tool.get("type") == "function":
            tools.append(function_tool(tool.get("name"), tool.get("description"), tool.get("parameters")))
        elif tool.get("type") == "custom":
            tools.append(function_tool(tool.get("name"), tool.get("description"), _CUSTOM_PARAMETERS))
    return tools


def parse(body: Mapping[str, Any], model: str | None = None) -> PolicyRequest:
    # the proxy stores no responses: a continuation by id would silently lose the history
    require(not body.get("previous_response_id"), "previous_response_id is not supported: send the whole input")
    return policy_request(body, model, _messages(body), _tools(body), max_tokens_keys=("max_output_tokens",))


def count_tokens(body: Mapping[str, Any]) -> dict[str, Any]:
    request = parse(body)
    return {"object": "response.input_tokens", "input_tokens": estimate_tokens([request.messages, request.tools])}


def wants_stream(body: Mapping[str, Any], query: Mapping[str, str]) -> bool:
    return bool(body.get("stream"))


def _items(reply: PolicyReply, body: Mapping[str, Any]) -> list[dict[str, Any]]:
    calls = with_call_ids(reply, "call_")
    custom = custom_tools(body)
    items: list[dict[str, Any]] = []
    if reply.content or not calls:
        items.append(
            {
                "type": "message",
                "id": new_id("msg_"),
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": reply.content, "annotations": []}],
            }
        )
    for call in calls:
        if call["name"] in custom:
            value = arguments_object(call["arguments"]).get("input", "")
            items.append(
                {
                    "type": "custom_tool_call",
                    "id": new_id("ctc_"),
                    "status": "completed",
                    "call_id": call["id"],
                    "name": call["name"],
                    "input": str(value),
                }
            )
        else:
            items.append(
                {
                    "type": "function_call",
                    "id": new_id("fc_"),
                    "status": "completed",
                    "call_id": call["id"],
                    "name": call["name"],
                    "arguments": call["arguments"],
                }
            )
    return items


def _response(reply: PolicyReply, body: Mapping[str, Any], model: str, items: list[dict[str, Any]]) -> dict[str, Any]:
    length = finish_of(reply, []) == "length"
    return {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if length else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if length else None,
        "error": None,
        "model": model,
        "output": items,
        "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [],
        "usage": {
            "input_tokens": reply.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": reply.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
        },
    }


def render(reply: PolicyReply, body: Mapping[str, Any], model: str) -> dict[str, Any]:
    return _response(reply, body, model, _items(reply, body))


def render_stream(reply: PolicyReply, body: Mapping[str, Any], model: str) -> Iterator[bytes]:
    """created, in_progress, per item added / deltas / done, completed: each with a ``sequence_number``."""
    items = _items(reply, body)
    final = _response(reply, body, model, items)
    sequence = 0

    def event(kind: str, **data: Any) -> bytes:
        nonlocal sequence
        sequence += 1
        return sse({"type": kind, "sequence_number": sequence - 1, **data}, kind)

    pending = {**final, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    yield event("response.created", response=pending)
    yield event("response.in_progress", response=pending)
    for index, item in enumerate(items):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            yield event(
                "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []}
            )
            part = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            yield event("response.content_part.added", **where, part=part)
            yield event("response.output_text.delta", **where, delta=text, logprobs=[])
            yield event("response.output_text.done", **where, text=text, logprobs=[])
            yield event("response.content_part.done", **where, part={**part, "text": text})
        elif item["type"] == "function_call":
            yield event(
                "response.output_item.added",
                output_index=index,
                item={**item, "status": "in_progress", "arguments": ""},
            )
            where = {"item_id": item["id"], "output_index": index}
            yield event("response.function_call_arguments.delta", **where, delta=item["arguments"])
            yield event("response.function_call_arguments.done", **where, arguments=item["arguments"])
        else:
            yield event(
                "response.output_item.added", output_index=index, item={**item, "status": "in_progress", "input": ""}
            )
            where = {"item_id": item["id"], "output_index": index}
            yield event("response.custom_tool_call_input.delta", **where, delta=item["input"])
            yield event("response.custom_tool_call_input.done", **where, input=item["input"])
        yield event("response.output_item.done", output_index=index, item=item)
    yield event("response.incomplete" if final["status"] == "incomplete" else "response.completed", response=final)


def error(status: int, message: str) -> dict[str, Any]:
    kind = {400: "invalid_request_error", 401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(
        status, "server_error"
    )
    return {"error": {"message": message, "type": kind, "code": status, "param": None}}
