import itertools
import json
import time

import gymnasium as gym
import pytest
from conftest import requires_bwrap
from gymnasium.utils.env_checker import check_env

from harness_gym import HarnessEnv, all_configs
from harness_gym.design import TRAINING_SET
from harness_gym.space import FACTORS, LEVELS, HarnessConfig
from harness_gym.spaces import SOURCES
from harness_gym.tool_calls import ActionError

pytestmark = requires_bwrap


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def test_readme_example_runs_as_written():
    env = gym.make("Harness-S1T2O0C1W2")
    obs, info = env.reset(seed=0)
    assert set(obs) == {"messages", "tools"}
    assert [m["source"] for m in obs["messages"]] == ["system", "task", "workflow"]
    assert all(t["type"] == "function" for t in obs["tools"])
    obs, reward, terminated, truncated, info = env.step("Let me start by looking around.")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert obs["messages"][-2] == {
        "role": "assistant",
        "content": "Let me start by looking around.",
        "source": "policy",
    }
    assert obs["messages"][-1]["source"] == "workflow" and "No tool call" in obs["messages"][-1]["content"]
    for key in (
        "config",
        "spec_hash",
        "parsed_calls",
        "parse_errors",
        "exit_codes",
        "durations",
        "context_reset",
        "reward_breakdown",
    ):
        assert key in info
    assert info["config"] == "S1T2O0C1W2"
    env.close()


def test_all_243_registered():
    registered = {env_id for env_id in gym.registry if env_id.startswith("Harness-S")}
    assert registered == {c.env_id for c in all_configs()}


def check_env_sample() -> list[HarnessConfig]:
    """The configurations the default suite runs check_env on: the 18 OA training configurations
    (alone, every pair of levels) and the three corners (every factor at one level); all 243, the
    held-out configurations among them, behind ``-m slow``."""
    corners = [HarnessConfig(*[level] * len(FACTORS)) for level in range(LEVELS)]
    return sorted({*TRAINING_SET, *corners})


def test_check_env_sample_covers_every_pair_of_levels():
    sample = check_env_sample()
    for first, second in itertools.combinations(range(len(FACTORS)), 2):
        pairs = {(config[first], config[second]) for config in sample}
        assert pairs == set(itertools.product(range(LEVELS), repeat=2)), (FACTORS[first], FACTORS[second])
    assert len(sample) < len(all_configs()) // 5


@pytest.mark.parametrize("config", check_env_sample(), ids=lambda config: config.code)
def test_check_env_passes_on_a_covering_sample(config):
    env = gym.make(config.env_id)
    check_env(env.unwrapped)
    env.close()


@pytest.mark.slow
def test_check_env_passes_on_every_configuration():
    started = time.perf_counter()
    for config in all_configs():
        env = gym.make(config.env_id)
        check_env(env.unwrapped)
        env.close()
    assert time.perf_counter() - started < 600


def test_tool_call_runs_and_reports(tmp_path):
    env = HarnessEnv("S0T0O0C0W0")
    env.reset(seed=1, options={"task_id": "workspace-organize-logs"})
    obs, _, _, _, info = env.step("Listing.\n" + call("execute_bash", command="ls *.log | wc -l; exit 3"))
    assert obs["messages"][-1]["content"].startswith("4\n")
    assert (
        obs["messages"][-1]["role"] == "tool" and obs["messages"][-1]["tool_call_id"] == info["parsed_calls"][0]["id"]
    )
    assert info["exit_codes"] == [3] and len(info["durations"]) == 1 and info["durations"][0] > 0
    assert info["parsed_calls"][0]["arguments"] == {"command": "ls *.log | wc -l; exit 3"}
    env.close()


def test_openai_style_action_keeps_the_protocol():
    env = HarnessEnv("S0T1O0C0W0")
    env.reset(seed=0)
    bash = env.tool_interface.name_for("execute_bash")
    action = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": bash, "arguments": json.dumps({"command": "echo hi"})},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "search_internet", "arguments": json.dumps({"query": "x"})},
            },
        ],
    }
    obs, _, _, _, info = env.step(action)
    assistant, first, second = obs["messages"][-3:]
    assert [c["id"] for c in assistant["tool_calls"]] == ["c1", "c2"]
    assert (first["tool_call_id"], first["content"]) == ("c1", "hi\n")
    assert second["tool_call_id"] == "c2" and "unavailable" in second["content"]
    env.close()


def test_errors_are_observations_and_the_episode_goes_on():
    env = HarnessEnv("S0T0O0C0W0")
    env.reset(seed=0)
    action = (
        call("execute_bash", cmd="ls")
        + call("run_sql", sql="x")
        + "<tool_call>{oops</tool_call>"
        + call("file_editor", command="delete", path="a")
    )
    obs, reward, terminated, truncated, info = env.step(action)
    contents = [m["content"] for m in obs["messages"][-4:]]
    assert "'command' is a required property" in contents[0] and "Expected arguments {command: string" in contents[0]
    assert "unknown tool 'run_sql'" in contents[1] and "execute_bash" in contents[1]
    assert "the tool call is not valid JSON" in contents[2]
    assert "is not one of ['view', 'create', 'str_replace', 'insert', 'undo_edit']" in contents[3]
    assert len(info["tool_errors"]) == 3 and len(info["parse_errors"]) == 1
    assert not (terminated or truncated)
    obs, *_ = env.step(call("execute_bash", command="echo still alive"))
    assert obs["messages"][-1]["content"] == "still alive\n"
    env.close()


def test_file_editor_round_trip_and_undo():
    env = HarnessEnv("S0T0O0C0W0")
    env.reset(seed=0, options={"task_id": "workspace-config-update"})
    obs, *_ = env.step(call("file_editor", command="view", path="config/app.ini", view_range=[2, 4]))
    assert "     2\t[server]" in obs["messages"][-1]["content"] and "     5\t" not in obs["messages"][-1]["content"]
    obs, *_ = env.step(call("file_editor", command="str_replace", path="config/app.ini", old_str="port", new_str="p"))
    assert "occurs 2 times" in obs["messages"][-1]["content"]
    obs, _, _, _, info = env.step(
        call(
            "file_editor",
            command="str_replace",
            path="/workspace/config/app.ini",
            old_str="workers = 4",
            new_str="workers = 8",
        )
    )
    assert info["exit_codes"] == [0] and "workers = 8" in obs["messages"][-1]["content"]
    env.step(call("file_editor", command="undo_edit", path="config/app.ini"))
    assert "workers = 4" in (env.workspace / "config/app.ini").read_text()
    obs, *_ = env.step(call("file_editor", command="create", path="notes/new.txt", file_text="a\nb"))
    assert (env.workspace / "notes/new.txt").read_text() == "a\nb"
    obs, *_ = env.step(call("file_editor", command="insert", path="notes/new.txt", insert_line=1, new_str="mid"))
    assert (env.workspace / "notes/new.txt").read_text() == "a\nmid\nb"
    obs, *_ = env.step(call("file_editor", command="view", path="."))
    assert "/workspace/config/app.ini" in obs["messages"][-1]["content"]
    env.close()


def test_step_budget_truncates_and_grades():
    env = HarnessEnv("S0T0O0C0W0", max_steps=2)
    env.reset(seed=0)
    env.step("thinking")
    obs, reward, terminated, truncated, info = env.step("still thinking")
    assert truncated and not terminated and reward == 0.0
    assert info["truncation_reason"] == "step budget of 2 steps exhausted"
    assert info["reward_breakdown"] and info["grader_error"] is None
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("more")
    env.close()


def test_truncate_from_outside_grades_the_workspace_as_it_stands():
    from harness_gym.agents import ReferenceAgent

    env = HarnessEnv("S0T0O0C0W0")
    with pytest.raises(RuntimeError, match="no episode is running"):
        env.truncate("too early")
    task_id = env.tasks[0].id
    env.reset(seed=0, options={"task_id": task_id})
    env.step("thinking")
    reward, info = env.truncate("token budget exhausted")
    assert reward == 0.0 and info["truncation_reason"] == "token budget exhausted"
    assert info["terminated_reason"] == "truncated" and info["reward_breakdown"]
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("more")
    # the reference agent's work, stopped just before it would call the finishing tool, still passes
    obs, _ = env.reset(seed=0, options={"task_id": task_id})
    agent = ReferenceAgent()
    agent.reset(env)
    while True:
        action = agent.act(obs)
        if '"name": "finish"' in str(action):
            break
        obs, *_ = env.step(action)
    reward, info = env.truncate("wall clock")
    assert reward == 1.0 and env.last_grade is not None and env.steps >= 1
    env.close()


def test_bad_arguments_fail_clearly():
    with pytest.raises(ValueError, match="unknown task_id"):
        HarnessEnv().reset(options={"task_id": "nope"})
    with pytest.raises(ValueError, match="malformed harness configuration id"):
        HarnessEnv("S9T0O0C0W0")
    env = HarnessEnv()
    env.reset(seed=0)
    with pytest.raises(ActionError):
        env.step(3.14)
    env.close()
    with pytest.raises(RuntimeError, match="call reset"):
        HarnessEnv().step("x")


def test_task_selection_by_split_and_seed():
    env = HarnessEnv(tasks="builtin:eval")
    assert {t.split for t in env.tasks} == {"eval"}
    ids = {env.reset(seed=s)[1]["task_id"] for s in range(80)}
    assert ids == {t.id for t in env.tasks}
    assert env.reset(seed=5)[1]["task_id"] == env.reset(seed=5)[1]["task_id"]
    env.close()


def test_every_message_has_role_content_and_a_known_source():
    env = HarnessEnv("S2T2O2C2W2")
    obs, _ = env.reset(seed=3)
    for _ in range(8):
        obs, *_ = env.step("Plan:\n1. look\n" + call(env.tool_interface.name_for("execute_bash"), command="ls"))
    for message in obs["messages"] + env.transcript:
        assert isinstance(message["content"], str) and message["source"] in SOURCES
        assert message["role"] in {"system", "user", "assistant", "tool"}
    assert {m["source"] for m in env.transcript} >= {"system", "task", "workflow", "policy", "tool"}
    env.close()


def test_render_ansi():
    env = HarnessEnv(render_mode="ansi")
    env.reset(seed=0)
    assert "[task/user]" in env.render()
    env.close()


def test_task_time_limit_truncates_and_grades():
    from dataclasses import replace

    from harness_gym.tasks import load_tasks

    task = replace(load_tasks("builtin:eval")[0], time_limit_s=0.5)
    env = HarnessEnv(tasks=[task], max_steps=50)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(
        '<tool_call>{"name": "execute_bash", "arguments": {"command": "sleep 0.7"}}</tool_call>'
    )
    assert truncated and not terminated and info["truncation_reason"] == "time limit of 0.5 s exceeded"
    assert info["reward_breakdown"]  # graded
    env.close()


def test_editing_an_observation_never_reaches_the_engine():
    env = HarnessEnv("S0T0O0C0W0")
    observation, _ = env.reset(seed=0)
    original = env.messages[1]["content"]
    observation["messages"][1]["content"] = "rewritten by the consumer"
    observation["messages"].clear()
    observation["tools"].clear()
    following, *_ = env.step("Thinking, without a tool call.")
    assert env.messages[1]["content"] == original
    assert len(following["messages"]) == len(env.messages) and following["tools"]
    env.close()


def test_a_c2_fold_summary_file_is_there_for_the_next_command():
    """C2 writes the fold's summary through the tool server without waiting (``write_file_soon``):
    the agent's very next command already sees the file, with the summary in it."""
    env = HarnessEnv("S0T0O0C2W0", max_steps=30)
    env.reset(seed=0)
    try:
        name = env.tool_interface.name_for("execute_bash")
        call = f'<tool_call>{{"name": "{name}", "arguments": {{"command": "true"}}}}</tool_call>'
        for _ in range(12):
            info = env.step(call)[-1]
            if info["context_reset"]:
                break
        assert info["context_reset"], "no fold in 12 steps"
        path = env.context.summary_path
        assert path is not None and env.context.summary
        assert env.sandbox._sent_write is not None, "the step waited for the summary write"
        assert env.sandbox.run(f"cat {path}").output == env.context.summary + "\n"
    finally:
        env.close()
