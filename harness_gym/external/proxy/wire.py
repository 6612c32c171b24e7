"""Small pieces every dialect module shares: errors, ids, SSE framing, tool-call arguments."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

from harness_gym.external.policies import OBJECT, PolicyReply, PolicyRequest

_orjson: ModuleType | None
try:  # optional, not a dependency: decodes the CLIs' 15-70 KB bodies and encodes SSE events 2-3x faster
    import orjson as _orjson
except ImportError:  # pragma: no cover - the stdlib then does it all
    _orjson = None

# one encoder: json.dumps with non-default arguments builds a JSONEncoder per call, a few us per event
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
# one pass over the body finds both what orjson must not decode: every digit becomes 0 (a run of 19
# is a number orjson may read otherwise) and every { becomes [ (one count bounds the depth)
_GUARD = bytes.maketrans(b"123456789{", b"000000000[")
_LONG_NUMBER = b"0" * 19  # orjson reads an integer past 64 bits as a float: the stdlib keeps it exact
# orjson (3.8) has no depth limit: it recurses on the C stack, and 200,000 nested brackets crash the
# process. A body with at most this many brackets is at most this deep, under the stdlib's limit.
_MAX_BRACKETS = 900


class DialectError(ValueError):
    """The request does not have the dialect's shape: answered 400 with this message."""


def new_id(prefix: str) -> str:
    """The prefix and 24 random hex digits."""
    return prefix + os.urandom(12).hex()


def loads(raw: bytes) -> Any:
    """JSON bytes decoded as :func:`json.loads` decodes them, by orjson where it is installed and
    gives the same result: a body it refuses (NaN, Infinity, lone surrogates, a BOM, bad JSON) or
    may read differently (a run of 19 or more digits: an integer past 64 bits becomes a float
    there) or could nest deeper than the stdlib allows (over ``_MAX_BRACKETS`` brackets) is decoded
    by the stdlib, so the result and the errors do not depend on the install."""
    if _orjson is not None:
        guarded = raw.translate(_GUARD)  # one translation, then two C scans of it (vs four passes over raw)
        if guarded.count(b"[") <= _MAX_BRACKETS and _LONG_NUMBER not in guarded:
            try:
                return _orjson.loads(raw)
            except _orjson.JSONDecodeError:
                pass
    return json.loads(raw)


def compact(data: Any) -> bytes:
    """Compact JSON, UTF-8: by orjson where installed (the same bytes as the stdlib's
    ``separators=(",", ":"), ensure_ascii=False`` but for exponents, ``1e16`` for ``1e+16``, and NaN
    or Infinity, ``null``: the stdlib's spelling is not JSON); what it cannot encode (keys that are
    not strings, integers past 64 bits, lone surrogates) goes to the stdlib."""
    if _orjson is not None:
        try:
            return _orjson.dumps(data)
        except TypeError:  # orjson.JSONEncodeError is one
            pass
    return _COMPACT.encode(data).encode()


def sse(data: Mapping[str, Any] | str, event: str | None = None) -> bytes:
    """One server-sent event (``event:`` line only where the dialect names its events)."""
    payload = data.encode() if isinstance(data, str) else compact(data)
    head = b"event: " + event.encode() + b"\n" if event else b""
    return head + b"data: " + payload + b"\n\n"


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
    if not isinstance(value, list):
        raise DialectError(f"{what} must be a list")
    return list(value)


def objects(value: Any, what: str, each: str) -> list[Mapping[str, Any]]:
    """``value`` itself (read, never copied or changed) once it is a list of objects; None is none.
    ``what``/``each`` name the list and its items in the error (built only on failure)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise DialectError(f"{what} must be a list")
    for item in value:
        if not isinstance(item, OBJECT):
            raise DialectError(f"every {each} must be an object")
    return value


def function_tool(name: Any, description: Any, parameters: Any) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise DialectError("every tool needs a name")
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description if type(description) is str else str(description or ""),
            "parameters": dict(parameters) if isinstance(parameters, OBJECT) else {"type": "object", "properties": {}},
        },
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
