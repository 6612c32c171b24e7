import json

import gymnasium as gym
import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.hooks import CallRecord, EpisodeState, Hook, HookRunner, register_hook_plugin
from harness_gym.presets import load_preset
from harness_gym.tools.roles import call_effects


def record(i, name="bash", args=None, error=False, edit=False, check=False):
    return CallRecord(i, name, name, args or {"command": "ls"}, 1 if error else 0, error, edit, check)


def test_state_measures():
    state = EpisodeState(step=4, max_steps=10)
    state.calls = [
        record(0),
        record(1, args={"command": "pwd"}),
        record(2),
        record(3, args={"command": "pwd"}),
        record(4),
        record(5, args={"command": "pwd"}),
    ]
    assert state.ping_pong_count() == 6 and state.repeat_count() == 1 and state.steps_remaining == 6
    state.calls += [record(6, args={"command": "pwd"})] * 2
    assert state.repeat_count() == 3 and state.ping_pong_count() == 0
    state.calls = [record(0, error=True), record(1, error=True), record(2, error=True)]
    assert state.consecutive_errors() == 3
    state.calls = [record(0, edit=True), record(1, check=True)]
    assert not state.edited_since_check()
    state.calls.append(record(2, edit=True))
    assert state.edited_since_check()


def test_classify_calls():
    assert call_effects("shell", {"command": "python -m pytest -q"}) == (False, True)
    assert call_effects("shell", {"command": "sed -i 's/a/b/' f.py"}) == (True, False)
    assert call_effects("shell", {"command": "ls 2>&1"}) == (False, False)
    assert call_effects("edit", {"command": "str_replace"}) == (True, False)
    assert call_effects("edit", {"command": "view"}) == (False, False)
    assert call_effects("test", {}) == (False, True)


def test_hook_templates_limits_and_unknown_conditions():
    hook = Hook(
        {
            "name": "h",
            "event": "step",
            "when": {"every_n_steps": 2},
            "message": "step {steps} of {max_steps}",
            "max_fires": 1,
        }
    )
    assert hook.fire(EpisodeState(step=1, max_steps=9), None) is None
    assert hook.fire(EpisodeState(step=2, max_steps=9), None).message == "step 2 of 9"
    assert hook.fire(EpisodeState(step=4, max_steps=9), None) is None  # max_fires reached
    with pytest.raises(ValueError, match="unknown condition"):
        Hook({"name": "bad", "event": "step", "when": {"phase_of_moon": 3}, "message": "x"})
    with pytest.raises(ValueError, match="no plugin registered"):
        Hook({"name": "p", "event": "step", "plugin": "nope"})


def test_plugin_hooks():
    register_hook_plugin(
        "every_error", lambda spec: lambda state, call: f"{call.name} failed" if call and call.error else None
    )
    runner = HookRunner([{"name": "p", "event": "tool_error", "plugin": "every_error"}])
    state = EpisodeState(step=1, max_steps=5)
    assert [f.message for f in runner.run("tool_error", state, record(0, error=True))] == ["bash failed"]


def bash(env, command):
    name = env.tool_interface.name_for("execute_bash")
    return env.step(f"<tool_call>{json.dumps({'name': name, 'arguments': {'command': command}})}</tool_call>")


@requires_bwrap
def test_repetition_budget_and_context_hooks_fire_in_episodes():
    spec = load_preset("HarnessAdapt-H1")
    spec["budget"]["max_steps"] = 9
    spec["budget"]["context_limit_chars"] = 2000
    env = HarnessEnv(spec=spec)
    env.reset(seed=0)
    fired = []
    for _step in range(1, 9):
        obs, _, _, truncated, info = bash(env, "echo same")
        fired.append(info["hooks_fired"])
    assert "repetition_alarm" in fired[2]  # third identical call
    assert "budget_reminder" in fired[3]  # 5 steps left after step 4
    assert any("context_pressure" in f for f in fired)
    hook_messages = [m for m in env.transcript if m["source"] == "hook"]
    assert any("same call" in m["content"] for m in hook_messages)
    assert all(m["role"] == "user" for m in hook_messages)
    env.close()


@requires_bwrap
def test_ping_pong_and_error_hooks():
    spec = load_preset("HarnessAdapt-H2")
    spec["hooks"].append({"use": "error_streak"})
    env = HarnessEnv(spec=spec)
    env.reset(seed=0)
    fired = []
    for step in range(6):
        _, _, _, _, info = bash(env, "ls" if step % 2 else "pwd")
        fired += info["hooks_fired"]
    assert "ping_pong_alarm" in fired
    for _ in range(3):
        _, _, _, _, info = bash(env, "false")
    assert "error_streak" in info["hooks_fired"]
    env.close()


@requires_bwrap
def test_test_reminder_turns_away_the_first_unverified_finish():
    env = gym.make("HarnessAdapt-H1")
    env.reset(seed=0, options={"task_id": "repair-word-frequency"})
    edit = {
        "name": "edit_file",
        "arguments": {"path": "textstats/counter.py", "old_text": "ranked[: n - 1]", "new_text": "ranked[:n]"},
    }
    env.step(f"<tool_call>{json.dumps(edit)}</tool_call>")
    obs, reward, terminated, _, info = env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    assert not terminated and info["hooks_fired"] == ["test_reminder"]
    assert obs["messages"][-1]["source"] == "hook" and obs["messages"][-1]["role"] == "tool"
    obs, reward, terminated, _, info = env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
    assert terminated and reward == 1.0  # max_fires 1: the second submit goes through
    env.close()


@requires_bwrap
def test_openclaw_loop_detection_warns_and_breaks():
    env = gym.make("Harness-OpenClawStyle")
    env.reset(seed=0)
    fired, truncated = {}, False
    for step in range(1, 31):
        _, _, terminated, truncated, info = env.step(
            '<tool_call>{"name": "exec", "arguments": {"command": "pwd"}}</tool_call>'
        )
        for name in info["hooks_fired"]:
            fired[name] = step
        if truncated:
            break
    assert fired == {"loop_warning": 10, "loop_critical": 20, "loop_breaker": 30}
    assert truncated and info["truncation_reason"] == "stopped by hook loop_breaker"
    env.close()


@requires_bwrap
def test_episode_start_hooks_and_skills():
    spec = load_preset("HarnessAdapt-H0")
    spec["hooks"] = [{"name": "hello", "event": "episode_start", "message": "You have {max_steps} steps."}]
    spec["skills"] = ["When a test fails after a change, re-read the failing assertion before editing again."]
    obs, info = HarnessEnv(spec=spec).reset(seed=0)
    sources = [m["source"] for m in obs["messages"]]
    assert sources == ["system", "task", "skill", "hook"]
    assert obs["messages"][-1]["content"] == "You have 60 steps."
    evaluation = HarnessEnv(spec=spec, include_skills=False)
    obs, _ = evaluation.reset(seed=0)
    assert "skill" not in [m["source"] for m in obs["messages"]]
    evaluation.close()
