"""The verifiers adapter against verifiers 0.4 itself: its evaluation path (``Env.serving`` +
``run_slot``) drives a harness-gym episode through its own ``null`` chat agent program, whose model
is a scripted OpenAI-compatible endpoint on 127.0.0.1 answering with the reference agent's actions.

verifiers would run its agent program as a uv script, fetching ``uv`` and the program's dependencies
from the network at first use; harness-gym's player runs it with this interpreter, so the episode is
run offline here: no uv on PATH, a fresh HOME, every proxy pointing at a closed port."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from conftest import readme_block, requires_bwrap

pytestmark = [
    requires_bwrap,
    pytest.mark.skipif(importlib.util.find_spec("verifiers") is None, reason="verifiers is not installed"),
]
TASK = "workspace-sort-unique"


class ScriptedModel(ThreadingHTTPServer):
    """``/v1/chat/completions`` answering with the reference agent's next action in the live episode."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.policies: dict[int, object] = {}
        self.replies: dict[tuple[int, int], str] = {}  # a retried request gets the same answer
        self.requests = 0

    def reply(self) -> str:
        from harness_gym.agents.reference import ReferenceAgent
        from harness_gym.integrations.verifiers import HarnessVerifiersEnv

        env = next(iter(HarnessVerifiersEnv.live.values()))
        if id(env) not in self.policies:
            agent = ReferenceAgent("hermes")
            agent.reset(env)
            self.policies[id(env)] = agent
        self.requests += 1
        key = (id(env), env.steps)
        if key not in self.replies:
            self.replies[key] = str(self.policies[id(env)].act({"messages": env.messages}))
        return self.replies[key]


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._send({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", 0))
        request = json.loads(self.rfile.read(length) or b"{}")
        text = self.server.reply()  # type: ignore[attr-defined]
        if request.get("stream"):
            self._stream(request, text)
            return
        self._send({
            "id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion", "created": int(time.time()),
            "model": request.get("model", "scripted"),
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        })  # fmt: skip

    def _stream(self, request: dict, text: str) -> None:
        """Server-sent events as OpenAI streams them: the content, a finishing chunk, [DONE]."""
        base = {"id": f"chatcmpl-{time.time_ns()}", "object": "chat.completion.chunk", "created": int(time.time()),
                "model": request.get("model", "scripted")}  # fmt: skip
        chunks = [
            {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}]},
            {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}},
        ]  # fmt: skip
        body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        data = body.encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send(self, payload: dict) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def offline(monkeypatch: pytest.MonkeyPatch, home) -> None:
    """No uv, a HOME without one, pip without an index, and every download through a closed port."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "uv").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


def test_readme_programmatic_verifiers_episode_runs_as_printed_offline(monkeypatch, tmp_path, capsys):
    server = ScriptedModel()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    offline(monkeypatch, tmp_path)
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{server.server_port}/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "x")
    monkeypatch.setenv("MODEL", "scripted")
    try:
        exec(compile(readme_block("verifiers-programmatic"), "README.md verifiers block", "exec"), {})
    finally:
        server.shutdown()
    assert capsys.readouterr().out.strip().splitlines()[-1] == "[] 1.0"
    assert server.requests >= 2


def test_the_player_program_needs_only_what_the_extra_installs():
    from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE

    from harness_gym.integrations.verifiers_player import missing_dependencies, script_dependencies

    wanted = script_dependencies(CHAT_PROGRAM_SOURCE)
    assert "mcp==2.0.0" in wanted and missing_dependencies(wanted) == []
    assert missing_dependencies(["no-such-package-hg30", "pytest==0.0.1"])[0] == "no-such-package-hg30"
    assert missing_dependencies(["pytest==0.0.1"])[0].startswith("pytest==0.0.1 (installed: ")


@pytest.mark.parametrize("harness", [pytest.param("HarnessAdapt-H1", marks=pytest.mark.slow)])
def test_verifiers_episode_reaches_reward_one(harness, monkeypatch, tmp_path):
    import verifiers.v1 as vf

    from harness_gym.integrations.verifiers import HarnessEnvConfig, HarnessVerifiersEnv

    server = ScriptedModel()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SCRIPTED_API_KEY", "x")
    offline(monkeypatch, tmp_path)
    config = HarnessEnvConfig(
        taskset={"id": "harness-gym-verifiers", "harness": harness, "suite": "builtin",
                 "task_ids": [TASK]},
    )  # fmt: skip
    env = HarnessVerifiersEnv(config)
    tasks = list(env.taskset)
    assert len(tasks) == 1 and "<tools>" in tasks[0].data.system_prompt
    client = vf.EvalClientConfig(base_url=f"http://127.0.0.1:{server.server_port}/v1", api_key_var="SCRIPTED_API_KEY")
    ctx = vf.ModelContext(model="scripted", client=client)

    async def evaluate():
        async with env.serving():
            return await env.run_slot(env.slots(tasks[0])[0], ctx)

    episode = asyncio.run(evaluate())
    server.shutdown()
    assert not episode.errors, episode.errors
    trace = episode.traces[0]
    assert trace.rewards["harness_reward"].score == 1.0 and server.requests >= 2


def test_verifiers_refuses_c1_c2():
    from harness_gym.integrations.base import UnsupportedHarness
    from harness_gym.integrations.verifiers import HarnessEnvConfig, HarnessVerifiersEnv

    env = HarnessVerifiersEnv(HarnessEnvConfig(taskset={"id": "harness-gym-verifiers",
                                                         "harness": "S0T0O0C1W0"}))  # fmt: skip
    with pytest.raises(UnsupportedHarness, match=r"factor C1 \(C1/C2\)"):
        list(env.taskset)
