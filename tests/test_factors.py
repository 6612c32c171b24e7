"""Each factor's behaviour, observed through the real environment and sandbox."""

import json
import re

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.factors import level_name
from harness_gym.factors.context import TurnRecord
from harness_gym.summarizers import DeterministicSummarizer, OpenAISummarizer


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def tool_names(env):
    return {t["function"]["name"] for t in env._observation()["tools"]}


# ----------------------------------------------------------------------------- S


def test_system_prompts_differ_but_state_the_same_rules():
    prompts = [HarnessEnv(f"S{s}T0O0C0W0").harness_spec["system_prompt"] for s in range(3)]
    assert len(set(prompts)) == 3
    for prompt in prompts:
        lowered = prompt.lower()
        for rule in ("workspace", "tool", "test", "question", "submit"):
            assert rule in lowered, (rule, prompt[:80])
    assert [level_name("S", s) for s in range(3)] == ["direct", "product-context", "narrative-persona"]


# ----------------------------------------------------------------------------- T


def test_tool_sets_per_level():
    t0, t1, t2 = (tool_names(HarnessEnv(f"S0T{t}O0C0W0")) for t in range(3))
    assert t0 == {"execute_bash", "file_editor", "finish"}
    assert {"run_shell_command", "edit_workspace_file", "submit_solution"} < t1 and len(t1) == 7
    assert len(t2) == 7 and all(re.fullmatch(r"tool_[0-9a-f]{4}", n) for n in t2)


@requires_bwrap
def test_resampled_names_are_seeded_per_episode():
    env = HarnessEnv("S0T2O0C0W0", resample_names=True)
    _, first = env.reset(seed=1)
    _, again = env.reset(seed=1)
    _, other = env.reset(seed=2)
    assert first["tool_names"] == again["tool_names"] and first["spec_hash"] == again["spec_hash"]
    assert first["tool_names"] != other["tool_names"] and first["spec_hash"] != other["spec_hash"]
    assert first["spec_hash"] != env.spec_hash
    bash = other["tool_names"]["execute_bash"]
    obs, *_ = env.step(call(bash, command="echo works"))
    assert obs["messages"][-1]["content"] == "works\n"
    env.close()
    alias_env = HarnessEnv("S0T1O0C0W0", resample_names=True)
    names = {alias_env.reset(seed=s)[1]["tool_names"]["execute_bash"] for s in range(30)}
    assert len(names) > 1 and names <= {
        "run_shell_command",
        "shell_exec",
        "terminal_run",
        "bash_command",
        "run_command",
    }
    alias_env.close()


# ----------------------------------------------------------------------------- O


@requires_bwrap
@pytest.mark.parametrize("level", [0, 1, 2])
def test_observation_formats_keep_the_raw_output(level):
    env = HarnessEnv(f"S0T0O{level}C0W0")
    env.reset(seed=4)
    obs, *_ = env.step(call("execute_bash", command="printf 'line one\\n{braces} {output}\\n'; sh -c 'exit 2'"))
    content = obs["messages"][-1]["content"]
    raw = "line one\n{braces} {output}\n"
    assert raw in content
    if level == 0:
        assert content == raw
    if level == 1:
        assert re.search(r"pod=agent-exec-\w+-\w+ node=ip-10-", content) and "namespace=" in content
    if level == 2:
        assert re.match(
            r'<tool_result tool="execute_bash" exit_code="2" pid="\d+" duration_ms="\d+" node="ip-10-', content
        )
        assert content.endswith("</output>\n</tool_result>")
    env.close()


# ----------------------------------------------------------------------------- C


@requires_bwrap
def test_c1_summary_keeps_last_five_turns():
    env = HarnessEnv("S0T0O0C1W0")
    env.reset(seed=0)
    resets = []
    for i in range(1, 12):
        obs, _, _, _, info = env.step(call("execute_bash", command=f"echo step{i}"))
        resets.append(info["context_reset"])
    assert resets[:8] == [False] * 8 and resets[8] is True  # 9 turns > trigger of 8
    messages = obs["messages"]
    summary = [m for m in messages if m["source"] == "summary"]
    assert len(summary) == 1 and "Step 1:" in summary[0]["content"] and "echo step1" in summary[0]["content"]
    assistant = [m for m in messages if m["role"] == "assistant"]
    assert len(assistant) == 7  # 5 kept at step 9, then two more appended
    assert "echo step5" in assistant[0]["content"]
    assert [m["source"] for m in messages[:3]] == ["system", "task", "summary"]
    assert len([m for m in env.transcript if m["role"] == "assistant"]) == 11
    env.close()


@requires_bwrap
def test_c2_summary_goes_to_a_file_the_agent_can_read():
    env = HarnessEnv("S0T0O0C2W0")
    env.reset(seed=0, options={"task_id": "workspace-sales-report"})
    for i in range(1, 7):
        obs, _, _, _, info = env.step(call("execute_bash", command=f"echo step{i}"))
    assert info["context_reset"] is True
    pointer = next(m for m in obs["messages"] if m["source"] == "summary")
    assert "/workspace/.harness_context/summary.md" in pointer["content"] and "echo step1" not in pointer["content"]
    assert len([m for m in obs["messages"] if m["role"] == "assistant"]) == 3
    obs, *_ = env.step(call("execute_bash", command="cat /workspace/.harness_context/summary.md"))
    assert "echo step1" in obs["messages"][-1]["content"] and "echo step3" in obs["messages"][-1]["content"]
    env.close()


def test_deterministic_summarizer_is_a_running_log():
    first = DeterministicSummarizer()(
        None,
        [
            TurnRecord(
                1,
                "Looking",
                [{"name": "execute_bash", "arguments": {"command": "ls"}, "exit_code": 0, "output": "a\nb\n"}],
            )
        ],
    )
    second = DeterministicSummarizer()(first, [TurnRecord(2, "", feedback=["No tool call was found"])])
    assert first == 'Step 1: said "Looking"; called execute_bash {"command": "ls"} -> exit 0, last line: b'
    assert second.splitlines() == [first, "Step 2: harness said: No tool call was found"]


def test_openai_summarizer_speaks_the_chat_completions_protocol(chat_server):
    chat_server["replies"].append("  The agent listed files.  ")
    summarizer = OpenAISummarizer(chat_server["url"], "tiny", api_key="k")
    turn = TurnRecord(
        1, "hi", [{"name": "execute_bash", "arguments": {"command": "ls"}, "exit_code": 0, "output": "x"}]
    )
    assert summarizer("old summary", [turn]) == "The agent listed files."
    request = chat_server["requests"][-1]
    assert (
        request["path"] == "/v1/chat/completions"
        and request["auth"] == "Bearer k"
        and request["body"]["model"] == "tiny"
    )
    assert (
        "old summary" in request["body"]["messages"][1]["content"]
        and "execute_bash" in request["body"]["messages"][1]["content"]
    )


def test_openai_summarizer_falls_back_when_the_endpoint_is_down():
    summarizer = OpenAISummarizer("http://127.0.0.1:9/v1", "tiny", timeout_s=2)
    with pytest.warns(UserWarning, match="using the deterministic summary"):
        text = summarizer(None, [TurnRecord(1, "hello")])
    assert text == 'Step 1: said "hello"'


# ----------------------------------------------------------------------------- W


@requires_bwrap
def test_w1_refuses_tool_calls_until_a_plan_exists():
    env = HarnessEnv("S0T0O0C0W1")
    obs, _ = env.reset(seed=0)
    assert obs["messages"][-1]["source"] == "workflow" and "plan" in obs["messages"][-1]["content"].lower()
    obs, _, _, _, info = env.step(call("execute_bash", command="touch made.txt"))
    assert not (env.workspace / "made.txt").exists()
    assert info["workflow_feedback"] and obs["messages"][-1]["source"] == "workflow"
    assert "not executed" in obs["messages"][-1]["content"]
    obs, _, _, _, info = env.step(
        "Plan:\n1. create the file\n2. submit\n" + call("execute_bash", command="touch made.txt")
    )
    assert (env.workspace / "made.txt").exists() and not info["workflow_feedback"]
    env.close()


@requires_bwrap
def test_w2_asks_for_verification_every_three_steps():
    env = HarnessEnv("S0T0O0C0W2")
    env.reset(seed=0)
    checks = []
    for _ in range(1, 8):
        obs, *_ = env.step("Plan:\n1. echo\n" + call("execute_bash", command="echo x"))
        last = obs["messages"][-1]
        checks.append(last["source"] == "workflow" and "Progress check" in last["content"])
    assert checks == [False, False, True, False, False, True, False]
    env.close()
