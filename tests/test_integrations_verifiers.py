"""The verifiers adapter against verifiers 0.4 itself: its evaluation path (``Env.serving`` +
``run_slot``) drives a harness-gym episode through its own ``null`` chat agent program, whose model
is a scripted OpenAI-compatible endpoint on 127.0.0.1 answering with the reference agent's actions.

verifiers runs its agent program as a uv script: its first run installs ``uv`` and the program's
dependencies from the package registry (about a minute, once per machine)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import requires_bwrap

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


@pytest.mark.parametrize("harness", ["S1T2O1C0W2", pytest.param("HarnessAdapt-H1", marks=pytest.mark.slow)])
def test_verifiers_episode_reaches_reward_one(harness, monkeypatch):
    import verifiers.v1 as vf

    from harness_gym.integrations.verifiers import HarnessEnvConfig, HarnessVerifiersEnv

    server = ScriptedModel()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("SCRIPTED_API_KEY", "x")
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
