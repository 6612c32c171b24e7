"""The Gemini API (``/v1beta/models/{m}:generateContent``, ``:streamGenerateContent``, ``:countTokens``):
Gemini CLI.

Gemini has no tool-call ids: a ``functionCall`` part gets the id it carries or ``gemini_call_<n>``, and
a ``functionResponse`` is matched to the oldest unanswered call of the same name. Schemas given as
``parameters`` (OpenAPI subset, upper-case types) are lower-cased into JSON Schema;
``parametersJsonSchema`` is taken as is. ``thought`` parts, ``thinkingConfig``, ``safetySettings``,
``cachedContent`` and non-function tools (``googleSearch``, ...) are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from harness_gym.external.policies import PolicyReply, PolicyRequest, estimate_tokens, text_of
from harness_gym.external.proxy.wire import (
    OBJECT,
    DialectError,
    arguments_object,
    as_list,
    finish_of,
    function_tool,
    objects,
    policy_request,
    require,
    sse,
    with_call_ids,
)

DIALECT = "gemini"
_NESTED = (dict, list, Mapping)
_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS"}


def _json_schema(schema: Any) -> Any:
    """OpenAPI-style Gemini schema (``type: "OBJECT"``) to JSON Schema (``type: "object"``)."""
    if isinstance(schema, OBJECT):
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key == "type" and isinstance(value, str):
                out[key] = value.lower()
            elif key in ("properties", "$defs", "definitions") and isinstance(value, OBJECT):
                out[key] = {k: _json_schema(v) for k, v in value.items()}
            else:
                out[key] = _json_schema(value) if isinstance(value, _NESTED) else value
        return out
    if isinstance(schema, list):
        return [_json_schema(v) for v in schema]
    return schema


def _parts(content: Any) -> list[Mapping[str, Any]]:
    require(isinstance(content, OBJECT), "every content must be an object")
    return objects(content.get("parts"), "parts", "part")


def _responses(parts: list[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """A user content's functionResponse objects: one canonical tool message each."""
    return [p["functionResponse"] for p in parts if isinstance(p.get("functionResponse"), OBJECT)]


def function_responses(body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The functionResponse objects of a request (parsed already), in the order of the tool messages
    :func:`parse` makes of them: the raw shape a CLI's masking rule is checked on (:mod:`.masking`)."""
    responses: list[Mapping[str, Any]] = []
    for content in as_list(body.get("contents"), "contents"):
        if isinstance(content, OBJECT) and content.get("role", "user") != "model":
            responses += _responses(_parts(content))
    return responses


def _messages(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    system = body.get("systemInstruction") or body.get("system_instruction")
    if isinstance(system, str):
        messages.append({"role": "system", "content": system})
    elif system:
        messages.append({"role": "system", "content": text_of(_parts(system))})
    pending: list[tuple[str, str]] = []  # (name, id) of calls not answered yet
    counter = 0
    for content in as_list(body.get("contents"), "contents"):
        parts = _parts(content)
        role = content.get("role", "user")
        if role not in ("user", "model", "function"):
            raise DialectError(f"unknown role {role!r}")
        texts = [str(p["text"]) for p in parts if isinstance(p.get("text"), str) and not p.get("thought")]
        if role == "model":
            calls = []
            for part in parts:
                call = part.get("functionCall")
                if isinstance(call, OBJECT):
                    call_id = str(call.get("id") or f"gemini_call_{counter}")
                    counter += 1
                    pending.append((str(call.get("name") or ""), call_id))
                    calls.append(
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": str(call.get("name") or ""),
                                "arguments": json.dumps(call.get("args") or {}),
                            },
                        }
                    )
            message: dict[str, Any] = {"role": "assistant", "content": "\n".join(texts)}
            if calls:
                message["tool_calls"] = calls
            messages.append(message)
            continue
        for response in _responses(parts):
            name = str(response.get("name") or "")
            call_id = str(response.get("id") or "")
            match = next((p for p in pending if (call_id and p[1] == call_id) or (not call_id and p[0] == name)), None)
            if match is not None:
                pending.remove(match)
                call_id = match[1]
            value = response.get("response")
            output = value.get("output", value) if isinstance(value, OBJECT) and len(value) == 1 else value
            text = output if isinstance(output, str) else json.dumps(output)
            messages.append({"role": "tool", "tool_call_id": call_id or name, "content": text})
        if texts:
            messages.append({"role": "user", "content": "\n".join(texts)})
    require(len(messages) > 0, "contents must not be empty")
    return messages


def _tools(body: Mapping[str, Any]) -> list[dict[str, Any]]:
    tools = []
    for tool in as_list(body.get("tools"), "tools"):
        require(isinstance(tool, OBJECT), "every tool must be an object")
        declarations = tool.get("functionDeclarations") or tool.get("function_declarations") or []
        for declaration in as_list(declarations, "functionDeclarations"):
            require(isinstance(declaration, OBJECT), "every function declaration must be an object")
            schema = declaration.get("parametersJsonSchema")
            if schema is None:
                schema = _json_schema(declaration.get("parameters"))
            tools.append(function_tool(declaration.get("name"), declaration.get("description"), schema))
    return tools


def parse(body: Mapping[str, Any], model: str | None = None) -> PolicyRequest:
    config = body.get("generationConfig") or body.get("generation_config") or {}
    require(isinstance(config, OBJECT), "generationConfig must be an object")
    return policy_request(
        body, model, _messages(body), _tools(body), max_tokens_keys=("maxOutputTokens",), settings=config
    )


def count_tokens(body: Mapping[str, Any]) -> dict[str, Any]:
    inner = body.get("generateContentRequest")
    request = parse(inner if isinstance(inner, OBJECT) else body)
    return {"totalTokens": estimate_tokens([request.messages, request.tools])}


def wants_stream(body: Mapping[str, Any], query: Mapping[str, str]) -> bool:
    return False  # the route (``:streamGenerateContent``) decides


def render(reply: PolicyReply, body: Mapping[str, Any], model: str) -> dict[str, Any]:
    calls = with_call_ids(reply, "gemini_call_")
    parts: list[dict[str, Any]] = []
    if reply.content or not calls:
        parts.append({"text": reply.content})
    parts += [{"functionCall": {"name": c["name"], "args": arguments_object(c["arguments"])}} for c in calls]
    return {
        "candidates": [
            {"content": {"role": "model", "parts": parts}, "finishReason": _FINISH[finish_of(reply, calls)], "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": reply.prompt_tokens,
            "candidatesTokenCount": reply.completion_tokens,
            "totalTokenCount": reply.prompt_tokens + reply.completion_tokens,
        },
        "modelVersion": model,
    }


def render_stream(reply: PolicyReply, body: Mapping[str, Any], model: str) -> Iterator[bytes]:
    """One ``data:`` event with the whole candidate (what Gemini CLI accepted)."""
    yield sse(render(reply, body, model))


def models(names: Sequence[str], one: str | None = None) -> dict[str, Any]:
    entries = [
        {
            "name": f"models/{m}",
            "displayName": m,
            "version": "harness-gym",
            "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
            "inputTokenLimit": 1_048_576,
            "outputTokenLimit": 65_536,
        }
        for m in (list(names) or ["harness-gym"])
    ]
    if one is not None:
        return next((e for e in entries if e["name"] == f"models/{one}"), {**entries[0], "name": f"models/{one}"})
    return {"models": entries}


def error(status: int, message: str) -> dict[str, Any]:
    kind = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED"}.get(
        status, "INTERNAL"
    )
    return {"error": {"code": status, "message": message, "status": kind}}
