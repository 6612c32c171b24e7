"""The public turn API: info["new_messages"], info["context_reset"] with info["context"], rendering
in every tool-call format with a real chat template, and areset/astep off the event loop."""

import asyncio
import json
import time

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.chat import chat_messages, formats, native_tools, register_format, render, render_observation

pytestmark = requires_bwrap


def bash(command: str) -> str:
    return "<tool_call>" + json.dumps({"name": "execute_bash", "arguments": {"command": command}}) + "</tool_call>"


def test_new_messages_extend_the_context_until_a_rewrite_then_the_context_is_given_whole():
    env = HarnessEnv("S0T0O0C1W0", max_steps=30)
    observation, info = env.reset(seed=0)
    assert info["new_messages"] == observation["messages"]
    context = observation["messages"]
    resets = 0
    for i in range(12):
        action = bash(f"echo step{i}")
        observation, _, terminated, truncated, info = env.step(action)
        assert not (terminated or truncated)
        assert info["new_messages"][0]["role"] == "tool" and f"step{i}" in info["new_messages"][0]["content"]
        if info["context_reset"]:
            resets += 1
            assert info["context"] == observation["messages"]
            assert any(m["source"] == "summary" for m in info["context"])
            assert observation["messages"][-len(info["new_messages"]) :] == info["new_messages"]
        else:
            assert "context" not in info
            assistant = {"role": "assistant", "content": action, "source": "policy"}
            assert observation["messages"] == [*context, assistant, *info["new_messages"]]
        context = observation["messages"]
    assert resets >= 1  # C1 folds turns once more than 8 are in the context
    env.close()


def test_terminal_step_reports_what_it_appended():
    env = HarnessEnv("S0T0O0C0W0")
    env.reset(seed=0)
    _, _, terminated, _, info = env.step(
        "<tool_call>" + json.dumps({"name": "finish", "arguments": {"message": "x"}}) + "</tool_call>"
    )
    assert terminated and [m["role"] for m in info["new_messages"]] == ["tool"]
    env.close()


def test_areset_and_astep_leave_the_event_loop_free():
    envs = [HarnessEnv("S0T0O0C0W0") for _ in range(2)]

    async def main() -> tuple[int, list[tuple[float, float, str]]]:
        ticks = 0
        done = asyncio.Event()

        async def ticker() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.005)

        async def episode(env: HarnessEnv) -> tuple[float, float, str]:
            await env.areset(seed=0)
            started = time.monotonic()
            observation, *_ = await env.astep(bash("sleep 1; echo slept"))
            return started, time.monotonic(), observation["messages"][-1]["content"]

        tick = asyncio.create_task(ticker())
        results = await asyncio.gather(*(episode(e) for e in envs))
        done.set()
        await tick
        return ticks, results

    ticks, results = asyncio.run(main())
    assert [r[2] for r in results] == ["slept\n", "slept\n"]
    (start_a, end_a, _), (start_b, end_b, _) = results
    assert start_a < end_b and start_b < end_a  # both steps were in flight at once
    assert ticks >= 10  # the loop kept running while both sandboxes slept
    for env in envs:
        env.close()


def test_chat_messages_in_each_format():
    env = HarnessEnv("S0T0O0C0W0")
    observation, _ = env.reset(seed=0)
    _, _, _, _, info = env.step(bash("echo hi"))
    messages = [*observation["messages"], {"role": "assistant", "content": bash("echo hi"), "source": "policy"}]
    messages += info["new_messages"]
    tools = observation["tools"]
    for fmt in ("hermes", "xml"):
        out = chat_messages(messages, tools, fmt)
        assert out[0]["role"] == "system" and "<tools>" in out[0]["content"] and "execute_bash" in out[0]["content"]
        assert out[-1] == {"role": "user", "content": "<tool_response>\nhi\n\n</tool_response>"}
        assert all("source" not in m for m in out)
    assert "<parameter=" in chat_messages(messages, tools, "xml")[0]["content"]
    openai = chat_messages(messages, tools, "openai")
    assert openai[-1]["role"] == "tool" and openai[-1]["tool_call_id"] == info["parsed_calls"][0]["id"]
    assert native_tools("openai") and not native_tools("hermes")
    with pytest.raises(ValueError, match="unknown tool-call format 'nope'"):
        chat_messages(messages, tools, "nope")
    env.close()


def test_a_registered_format_plugs_into_render():
    register_format(
        "shout", lambda messages, tools: [{"role": m["role"], "content": m["content"].upper()} for m in messages]
    )
    assert "shout" in formats()

    class Template:
        def apply_chat_template(self, messages, **options):
            return "|".join(m["content"] for m in messages) + ("|>" if options["add_generation_prompt"] else "")

    assert render([{"role": "user", "content": "hi", "source": "task"}], [], Template(), "shout") == "HI|>"


def test_render_with_a_real_chat_template(tokenizer):
    env = HarnessEnv("S2T2O0C0W1")
    observation, _ = env.reset(seed=0)
    text = render_observation(observation, tokenizer, "hermes")
    assert text.startswith("<|im_start|>system\n") and text.endswith("<|im_start|>assistant\n")
    assert observation["messages"][1]["content"] in text and "<tools>" in text
    for tool in observation["tools"]:
        assert tool["function"]["name"] in text  # opaque identifiers and distractors alike
    env.close()


def test_openai_format_hands_tools_to_the_template(tokenizer):
    trl_templates = pytest.importorskip("trl.chat_template_utils")
    env = HarnessEnv("S0T0O0C0W0")
    observation, _ = env.reset(seed=0)
    text = render_observation(observation, tokenizer, "openai", chat_template=trl_templates.qwen2_5_chat_template)
    assert "<tools>" in text and '"name": "execute_bash"' in text  # the template's own tool section
    env.close()
