"""Gymnasium conformance: check_env without skips, render modes, step budget and TimeLimit,
async vector environments with default arguments, namespaced versioned ids."""

import json
import os
import subprocess
import sys
import warnings

import gymnasium as gym
import pytest
from conftest import requires_bwrap
from gymnasium.utils.env_checker import check_env

from harness_gym import HarnessEnv, all_configs
from harness_gym.factors import compile_config
from harness_gym.presets import PRESETS
from harness_gym.registration import versioned_id

pytestmark = requires_bwrap


def call(name, **arguments):
    return f"Plan: one step.\n<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


@pytest.mark.parametrize(
    "env_id",
    [
        "Harness-S0T0O0C0W0",
        "Harness-S1T2O0C1W2",
        "Harness-S2T1O2C2W1",
        "harness_gym/Harness-S2T2O1C2W2-v0",
        "HarnessAdapt-H1",
    ],
)
def test_check_env_passes_without_skips_or_warnings(env_id):
    env = gym.make(env_id)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any complaint of Gymnasium's checker fails the test
        check_env(env.unwrapped)
    env.close()


def test_every_configuration_registers_its_step_budget():
    for config in all_configs():
        budget = compile_config(config)["budget"]["max_steps"]
        assert gym.spec(config.env_id).max_episode_steps == budget
        assert gym.spec(versioned_id(config.env_id)).max_episode_steps == budget
    for env_id in PRESETS:
        env = gym.make(env_id)
        assert env.spec.max_episode_steps == env.unwrapped.harness_spec["budget"]["max_steps"]
        env.close()


def test_namespaced_versioned_ids_make_the_same_environment():
    short, versioned = gym.make("Harness-S1T2O0C1W2"), gym.make("harness_gym/Harness-S1T2O0C1W2-v0")
    assert versioned.spec.namespace == "harness_gym" and versioned.spec.version == 0
    assert short.unwrapped.spec_hash == versioned.unwrapped.spec_hash
    for env_id in [*PRESETS, "HarnessAdapt"]:
        assert versioned_id(env_id) in gym.registry
    short.close()
    versioned.close()


def test_time_limit_truncation_is_graded_at_the_harness_budget():
    env = gym.make("Harness-S0T0O0C0W0", max_steps=3)
    env.reset(seed=0, options={"task_id": "workspace-organize-logs"})
    for step in range(1, 4):
        _, reward, terminated, truncated, info = env.step(call("execute_bash", command="true"))
        assert (terminated, truncated) == (False, step == 3)
    assert "step budget of 3 steps exhausted" in info["truncation_reason"]
    assert info["reward_breakdown"], "the truncated episode was graded"
    env.close()


def test_max_steps_moves_the_time_limit_with_the_budget():
    longer = gym.make("Harness-S0T0O0C0W0", max_steps=45)
    assert longer.spec.max_episode_steps == 45 and longer.unwrapped.harness_spec["budget"]["max_steps"] == 45
    shorter = gym.make("harness_gym/Harness-S0T0O0C0W0-v0", max_steps=5)
    assert shorter.spec.max_episode_steps == 5
    explicit = gym.make("Harness-S0T0O0C0W0", max_steps=45, max_episode_steps=40)  # as given
    assert explicit.spec.max_episode_steps == 40
    for env in (longer, shorter, explicit):
        env.close()


def test_a_time_limit_below_the_budget_is_graded():
    # TimeLimit cuts at 2 of the harness's 30 steps: the GradeTruncation wrapper grades that step
    env = gym.make("Harness-S0T0O0C0W0", max_episode_steps=2)
    assert env.spec.max_episode_steps == 2 and env.unwrapped.harness_spec["budget"]["max_steps"] == 30
    env.reset(seed=0, options={"task_id": "workspace-organize-logs"})
    _, _, _, truncated, info = env.step(call("execute_bash", command="mkdir -p logs && mv *.log logs/"))
    assert not truncated and "reward_breakdown" in info and not info["reward_breakdown"]
    _, reward, terminated, truncated, info = env.step(call("execute_bash", command="true"))
    assert truncated and not terminated and info["terminated_reason"] == "truncated"
    assert info["truncation_reason"] == "Gymnasium TimeLimit of 2 steps reached"
    assert info["reward_breakdown"] and info["parsed_calls"]  # graded, and the step's own info kept
    assert env.unwrapped.done and env.unwrapped.last_grade.reward == reward
    env.close()


def test_render_ansi_returns_the_transcript():
    env = gym.make("Harness-S0T0O0C0W0", render_mode="ansi")
    env.reset(seed=0)
    env.step(call("execute_bash", command="echo rendered-output"))
    text = env.render()
    assert text.startswith("[system/system]") and "[task/user]" in text
    assert "-> execute_bash" not in text  # text actions carry the call in their content
    assert "[tool/tool] execute_bash" in text and "rendered-output" in text
    env.close()


def test_render_human_prints_each_new_message_once(capsys):
    env = HarnessEnv("S0T0O0C0W0", render_mode="human")
    env.reset(seed=0)
    first = capsys.readouterr().out
    assert "[task/user]" in first and "[policy/assistant]" not in first
    env.step(call("execute_bash", command="echo printed-once"))
    second = capsys.readouterr().out
    assert "[task/user]" not in second and second.count("printed-once") == 2  # the call and its output
    assert env.render() is None
    env.close()


def test_render_mode_outside_metadata_is_refused():
    with pytest.raises(ValueError, match="render_mode must be one of"):
        HarnessEnv(render_mode="rgb_array")


@pytest.mark.parametrize("mode", ["async", "sync"])
def test_make_vec_with_default_arguments(mode):
    envs = gym.make_vec("Harness-S1T2O0C1W2", num_envs=2, vectorization_mode=mode)
    obs, info = envs.reset(seed=0)
    assert envs.observation_space.contains(obs)
    assert [m[1]["source"] for m in obs["messages"]] == ["task", "task"]
    bash = HarnessEnv("S1T2O0C1W2").tool_interface.name_for("execute_bash")
    obs, reward, terminated, truncated, info = envs.step(
        (call(bash, command="echo first-env"), call(bash, command="echo second-env"))
    )
    outputs = [[m["content"] for m in messages if m["role"] == "tool"] for messages in obs["messages"]]
    assert "first-env" in outputs[0][-1] and "second-env" in outputs[1][-1]
    assert list(reward) == [0.0, 0.0] and not terminated.any() and not truncated.any()
    envs.close()


def test_a_deep_copy_of_the_shared_observations_is_decoded_again_not_walked():
    """``AsyncVectorEnv`` deep-copies every step's observations: the copy must be independent of the
    slots' cache (a caller may change it) and made by decoding the slot's JSON again, not by
    ``copy.deepcopy`` of the history, which grew with the episode (10 of 18 ms of a 4-env step)."""
    import copy

    from harness_gym.vector_memory import JsonSlots, JsonSlotsView

    slots = JsonSlots(2)
    history = [{"role": "user", "content": "x" * 10, "parts": [{"n": i} for i in range(50)]}]
    slots.write(0, history)
    view = JsonSlotsView(slots)
    frozen = copy.deepcopy(view)
    assert frozen == (history, None) and isinstance(frozen, tuple)
    frozen[0][0]["content"] = "changed by the caller"
    assert slots.read(0) == history and copy.deepcopy(view)[0] == history  # the cache is untouched
    calls = []
    original = copy._deepcopy_dispatch[dict]
    copy._deepcopy_dispatch[dict] = lambda *args: calls.append(1) or original(*args)
    try:
        copy.deepcopy(view)
    finally:
        copy._deepcopy_dispatch[dict] = original
    assert calls == []  # not one dict of the history walked by copy.deepcopy
    slots.write(0, [{"role": "tool", "content": "next"}])
    assert frozen[0] == [{"role": "user", "content": "changed by the caller", "parts": history[0]["parts"]}]
    assert copy.deepcopy(view)[0] == [{"role": "tool", "content": "next"}]


def test_async_vector_env_leaves_no_shared_files():
    before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    code = (
        "import gymnasium as gym, harness_gym\n"
        "envs = gym.make_vec('Harness-S0T0O0C0W0', num_envs=2, vectorization_mode='async')\n"
        "envs.reset(seed=0); envs.close()\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env={**os.environ})
    after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    assert not {name for name in after - before if name.startswith("harness-gym-vector-")}


def test_check_env_passes_on_the_made_environment_and_its_spec_remakes_it():
    # check_env's render check remakes the env from env.spec: every wrapper must record its arguments
    env = gym.make("Harness-S1T2O0C1W2")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*different from the unwrapped version")
        check_env(env)
    again = gym.make(env.spec)
    assert type(again).__name__ == "GradeTruncation" and again.unwrapped.spec_hash == env.unwrapped.spec_hash
    from_json = gym.make(gym.envs.registration.EnvSpec.from_json(env.spec.to_json()))
    assert from_json.spec.max_episode_steps == env.spec.max_episode_steps
    for made in (env, again, from_json):
        made.close()


def test_a_made_environment_pickles_and_a_live_one_is_refused_by_name():
    import pickle

    env = pickle.loads(pickle.dumps(gym.make("Harness-S0T0O0C0W0")))
    env.reset(seed=0, options={"task_id": "workspace-organize-logs"})
    _, _, _, _, info = env.step(call("unknown_tool_name"))
    assert "unknown tool" in json.dumps(env.unwrapped.messages)  # validators were rebuilt
    with pytest.raises(TypeError, match="live sandboxes cannot be pickled"):
        pickle.dumps(env)
    env.close()
    assert pickle.loads(pickle.dumps(env)).unwrapped.spec_hash == env.unwrapped.spec_hash


def test_an_outside_time_limit_is_reported_and_grade_truncation_outside_it_grades():
    from harness_gym.wrappers import GradeTruncation

    env = gym.wrappers.TimeLimit(gym.make("Harness-S0T0O0C0W0"), max_episode_steps=1)
    env.reset(seed=0, options={"task_id": "workspace-organize-logs"})
    _, reward, _, truncated, info = env.step(call("execute_bash", command="true"))
    assert truncated and reward == 0.0 and info["graded"] is False  # says what happened
    _, info = env.reset(seed=1)
    assert info["previous_episode_ungraded"] is True
    env.close()
    graded = GradeTruncation(gym.wrappers.TimeLimit(gym.make("Harness-S0T0O0C0W0"), max_episode_steps=1))
    graded.reset(seed=0, options={"task_id": "workspace-organize-logs"})
    _, _, _, truncated, info = graded.step(call("execute_bash", command="true"))
    assert truncated and info["graded"] is True and info["reward_breakdown"]
    assert info["truncation_reason"] == "Gymnasium TimeLimit of 1 steps reached"
    graded.close()
