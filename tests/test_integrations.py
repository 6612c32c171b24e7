"""RL-library adapters against the real libraries: every aspect of the factor-support table
(``harness_gym.integrations.base.SUPPORT``) runs an episode to reward 1 through the library's own
interface with a scripted policy (the privileged reference agent), or is refused naming the factor."""

from __future__ import annotations

import importlib.util
import json
from typing import Any

import pytest
from conftest import requires_bwrap

from harness_gym.agents.base import encode_call
from harness_gym.agents.reference import ReferenceAgent
from harness_gym.chat import chat_messages
from harness_gym.env import HarnessEnv
from harness_gym.factors import compile_config
from harness_gym.integrations.base import ASPECTS, LIBRARIES, SUPPORT, UnsupportedHarness, harness_aspects
from harness_gym.tool_calls import parse_action

pytestmark = requires_bwrap
TASK = "workspace-sort-unique"  # a two-step reference solution: episodes stay short
SKILLED = {**compile_config("S0T0O0C0W0"), "name": "skilled", "skills": ["Read the task's files before editing."]}
SKILLED.pop("config")
# one harness per aspect of the table; (harness, resample_names, padding steps before the solution)
CASES: dict[str, tuple[Any, bool, int]] = {
    "S": ("S2T0O0C0W0", False, 0),
    "T": ("S0T2O0C0W0", False, 0),
    "T-resampled": ("S0T1O0C0W0", True, 0),
    "O": ("S0T0O2C0W0", False, 0),
    "C0": ("S0T0O0C0W0", False, 0),
    "C1/C2": ("S0T0O0C2W0", False, 6),  # C2 rewrites once more than 5 turns are in the context
    "W0": ("S1T1O1C0W0", False, 0),
    "W1/W2": ("S0T0O0C0W2", False, 3),
    "hooks": ("HarnessAdapt-H1", False, 0),
    "skills": (SKILLED, False, 0),
}


def test_every_aspect_has_a_case_and_a_decision_per_library():
    assert set(CASES) == set(ASPECTS)
    for library in LIBRARIES:
        assert set(SUPPORT[library]) == set(ASPECTS), library
    for aspect, (harness, resample, _) in CASES.items():
        env = HarnessEnv(**_arguments(harness))
        assert aspect in harness_aspects(env.harness_spec, resample_names=resample), aspect
        env.close()


def _arguments(harness: Any) -> dict[str, Any]:
    from harness_gym.rollout_requests import harness_env_arguments

    return harness_env_arguments(harness)


class Policy:
    """The reference agent, after ``pad`` harmless shell calls (the first one carrying a plan)."""

    def __init__(self, env: HarnessEnv, pad: int = 0, fmt: str = "hermes") -> None:
        self.env, self.pad, self.fmt = env, pad, fmt
        self.agent = ReferenceAgent(fmt)
        self.agent.reset(env)
        self.padded = 0

    def act(self) -> Any:
        if self.padded < self.pad:
            self.padded += 1
            call = encode_call(self.env.tool_interface.name_for("execute_bash"), {"command": "true"}, self.fmt)
            return ("Plan:\n1. Look around.\n2. Apply the fix.\n" if self.padded == 1 else "") + str(call)
        return self.agent.act({"messages": self.env.messages})


def _expect(library: str, aspect: str) -> bool:
    return SUPPORT[library][aspect].supported


def _refused(excinfo: pytest.ExceptionInfo, aspect: str) -> None:
    message = str(excinfo.value)
    assert f"({aspect})" in message and "refused because" in message


# --------------------------------------------------------------------------- GEM


gem_required = pytest.mark.skipif(importlib.util.find_spec("gem") is None, reason="gem-llm is not installed")


@gem_required
@pytest.mark.parametrize("aspect", ASPECTS)
def test_gem_episode_per_aspect(aspect):
    from harness_gym.integrations.gem import HarnessGemEnv

    harness, resample, pad = CASES[aspect]
    env = HarnessGemEnv(harness, "builtin", task_id=TASK, resample_names=resample)
    text, _ = env.reset(seed=3)
    assert env.env.messages[1]["content"] in text and env.env.messages[0]["content"].split("\n")[0] in text
    policy, resets = Policy(env.env, pad), 0
    for _ in range(30):
        text, reward, terminated, truncated, info = env.step(policy.act())
        if info["context_reset"]:
            resets += 1
            assert "Older turns were removed from the context" in text  # the observation is the new context
        if terminated or truncated:
            break
    assert (terminated, reward) == (True, 1.0)
    assert resets >= (1 if aspect == "C1/C2" else 0)
    env.close()


@gem_required
def test_gem_new_observation_mode_refuses_c1_c2():
    from harness_gym.integrations.gem import HarnessGemEnv

    with pytest.raises(UnsupportedHarness) as excinfo:
        HarnessGemEnv("S0T0O0C1W0", observation="new")
    _refused(excinfo, "C1/C2")
    assert "factor C1" in str(excinfo.value)


@gem_required
def test_gem_registry_and_async_vector_loop():
    import gem

    from harness_gym.integrations.gem import close_vector_env, register_gem_envs

    ids = register_gem_envs()
    assert len(ids) == 243 + 5 and register_gem_envs() == ids  # idempotent
    vec = gem.make_vec(["harness_gym/Harness-S1T2O0C1W1"] * 2, async_mode=True, seed=5, tasks="builtin", task_id=TASK)
    observations, _ = vec.reset(seed=5)
    policies = [Policy(e.env) for e in vec.envs]
    rewards = [None, None]
    for _ in range(20):
        actions = {i: policies[i].act() for i in range(2) if rewards[i] is None}
        if not actions:
            break
        _, step_rewards, terminated, truncated, _ = vec.step(actions)
        for (i, r), t, u in zip(zip(actions, step_rewards, strict=True), terminated, truncated, strict=True):
            if t or u:
                rewards[i] = float(r)
    assert rewards == [1.0, 1.0]
    vec.reset(seed=6)
    harness_envs = [e.env for e in vec.envs]
    assert all(e.sandbox is not None for e in harness_envs)
    close_vector_env(vec)  # GEM's vector env has no close() of its own
    assert all(e.sandbox is None for e in harness_envs)


@gem_required
def test_gem_environments_close_their_sandboxes_when_collected():
    import gc

    from harness_gym.integrations.gem import HarnessGemEnv

    env = HarnessGemEnv("S0T0O0C0W0", "builtin", task_id=TASK)
    env.reset(seed=0)
    inner = env.env
    del env
    gc.collect()
    assert inner.sandbox is None


# --------------------------------------------------------------------------- SkyRL-gym


skyrl_required = pytest.mark.skipif(importlib.util.find_spec("skyrl_gym") is None, reason="skyrl-gym is not installed")


@skyrl_required
@pytest.mark.parametrize("aspect", ASPECTS)
def test_skyrl_episode_per_aspect(aspect):
    import skyrl_gym

    from harness_gym.integrations.skyrl import register_skyrl_env

    harness, resample, pad = CASES[aspect]
    extras = {"harness": harness, "task_id": TASK, "seed": 3, "suite": "builtin"}
    config = {"resample_names": resample}
    if not _expect("skyrl", aspect):
        with pytest.raises(UnsupportedHarness) as excinfo:
            skyrl_gym.make(register_skyrl_env(), env_config=config, extras=extras)
        _refused(excinfo, aspect)
        return
    env = skyrl_gym.make(register_skyrl_env(), env_config=config, extras=extras)
    messages, metadata = env.init([{"role": "user", "content": "ignored"}])
    assert messages[0]["role"] == "system" and "<tools>" in messages[0]["content"]
    assert metadata["task_id"] == TASK
    policy = Policy(env.env, pad)
    for _ in range(30):
        output = env.step(policy.act())
        if output["done"]:
            break
        assert output["observations"] and all(m["role"] in ("user", "assistant") for m in output["observations"])
    assert output["done"] and output["reward"] == 1.0
    env.close()


# --------------------------------------------------------------------------- TRL


trl_required = pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl is not installed")


def _trl_row(harness: Any, resample: bool = False) -> dict[str, Any]:
    env = HarnessEnv(**_arguments(harness), tasks="builtin", resample_names=resample)
    observation, _ = env.reset(seed=3, options={"task_id": TASK})
    env.close()
    return {"prompt": chat_messages(observation["messages"], (), "openai"), "harness": harness, "task_id": TASK,
            "seed": 3}  # fmt: skip


def _trl_episode(instance: Any, pad: int) -> float:
    """What GRPOTrainer does with an environment: reset(**row), tool methods called with the
    arguments it parsed, get_reward() at the end; HarnessGRPOTrainer also binds the messages."""
    policy = Policy(instance._env, pad)
    turns: list[dict[str, Any]] = []
    instance._bind_turns(turns)
    for _ in range(30):
        action = policy.act()
        parsed = parse_action(action, "hermes")
        turns.append({"role": "assistant", "content": parsed.text, "tool_calls": [c.as_dict() for c in parsed.calls]})
        for call in parsed.calls:
            result = getattr(instance, call.name)(**call.arguments)
            assert isinstance(result, str)
            turns.append({"role": "tool", "name": call.name, "content": result})
        if instance._env.done:
            break
    return instance.get_reward()


@trl_required
@pytest.mark.parametrize("aspect", ASPECTS)
def test_trl_episode_per_aspect(aspect):
    from harness_gym.integrations.trl import _bound_factory, environment_factory

    harness, resample, pad = CASES[aspect]
    if not _expect("trl", aspect):
        with pytest.raises(UnsupportedHarness) as excinfo:
            environment_factory(harness, resample_names=resample)
        _refused(excinfo, aspect)
        return
    factory = environment_factory(harness)
    instance = _bound_factory(factory)()  # as HarnessGRPOTrainer creates it
    assert instance.reset(**_trl_row(harness)) is None
    assert _trl_episode(instance, pad) == 1.0


@trl_required
def test_trl_plain_grpo_trainer_refuses_plan_first_workflows():
    from harness_gym.integrations.trl import environment_factory

    instance = environment_factory("S0T0O0C0W1")()
    with pytest.raises(UnsupportedHarness) as excinfo:
        instance.reset(**_trl_row("S0T0O0C0W1"))
    _refused(excinfo, "W1/W2")
    assert "factor W1" in str(excinfo.value) and "HarnessGRPOTrainer" in str(excinfo.value)


@trl_required
def test_trl_tools_are_the_harness_tools_as_trl_reads_them():
    import inspect

    from transformers.utils import get_json_schema

    from harness_gym.integrations.trl import environment_factory

    env = HarnessEnv("S0T2O0C0W0")
    expected = {t["function"]["name"]: t["function"] for t in env.tool_interface.schemas()}
    env.close()
    factory = environment_factory("S0T2O0C0W0")
    methods = {n for n, _ in inspect.getmembers(factory, inspect.isfunction) if not n.startswith("_")}
    assert methods - {"reset", "get_reward"} == set(expected)  # opaque names and distractors, nothing else
    instance = factory()
    for name, schema in expected.items():
        shown = get_json_schema(getattr(instance, name))["function"]
        assert shown["description"].startswith(schema["description"].strip())
        assert set(shown["parameters"]["properties"]) == set(schema["parameters"].get("properties", {}))
        assert set(shown["parameters"].get("required", [])) == set(schema["parameters"].get("required", []))


@trl_required
def test_trl_rejects_a_row_for_another_harness_or_without_a_task():
    from harness_gym.integrations.trl import environment_factory

    instance = environment_factory("S0T0O0C0W0")()
    with pytest.raises(ValueError, match="runs harness 'S0T0O0C0W0' but the row asks for 'S1T0O0C0W0'"):
        instance.reset(**_trl_row("S1T0O0C0W0"))
    with pytest.raises(ValueError, match="no task_id"):
        instance.reset(prompt=[{"role": "user", "content": "x"}])
    row = _trl_row("S0T0O0C0W0")
    row["prompt"][0]["content"] = "another system prompt"
    with pytest.raises(ValueError, match="not this episode's opening"):
        instance.reset(**row)


@trl_required
def test_trl_unfinished_rollout_is_graded_as_it_stands_and_finished_episodes_refuse_calls():
    from harness_gym.integrations.trl import environment_factory

    instance = environment_factory("S0T0O0C0W0")()
    instance.reset(**_trl_row("S0T0O0C0W0"))
    assert "hi" in instance.execute_bash(command="echo hi")
    assert instance.get_reward() == 0.0  # nothing fixed: graded, not dropped
    with pytest.raises(RuntimeError, match="episode is over"):
        instance.execute_bash(command="echo again")
    assert json.loads(json.dumps(instance.get_reward())) == 0.0


@trl_required
@pytest.mark.slow
def test_trl_grpo_step_with_smollm2(tmp_path, monkeypatch):
    """One real GRPO step (generation, tool loop, environment rewards, backward) with SmolLM2-135M."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM
    from trl import GRPOConfig
    from trl.chat_template_utils import qwen2_5_chat_template

    from harness_gym.agents.huggingface import converted_gguf, default_model, load_tokenizer
    from harness_gym.export import prompt_rows
    from harness_gym.integrations.trl import HarnessGRPOTrainer, HarnessToolEnvironment, environment_factory

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    try:
        folder, gguf = default_model()
    except RuntimeError as exc:
        pytest.skip(str(exc))
    tokenizer = load_tokenizer(folder, gguf)
    tokenizer.chat_template = qwen2_5_chat_template  # ChatML with Hermes tool calls: TRL can parse them
    model = AutoModelForCausalLM.from_pretrained(
        converted_gguf(folder, gguf), dtype=torch.float32
    )  # trained: not the shared one
    rows = prompt_rows("builtin", "S0T0O0C0W1", task_limit=1)
    args = GRPOConfig(
        output_dir=str(tmp_path), max_steps=1, per_device_train_batch_size=2, num_generations=2,
        max_completion_length=16, max_tool_calling_iterations=1, use_cpu=True, report_to=[], save_strategy="no",
        logging_steps=1,
    )  # fmt: skip
    trainer = HarnessGRPOTrainer(
        model, args=args, train_dataset=Dataset.from_list(rows * 2), processing_class=tokenizer,
        environment_factory=environment_factory("S0T0O0C0W1", tasks="builtin"),
    )  # fmt: skip
    result = trainer.train()
    assert result.global_step == 1
    environments = [e for e in trainer.environments if isinstance(e, HarnessToolEnvironment)]
    assert len(environments) == 2 and all(e._env.task is not None and e._reward is not None for e in environments)
    logged = trainer.state.log_history[0]
    reward_key = next(k for k in logged if k.startswith("rewards/HarnessEnv") and k.endswith("/mean"))
    assert logged[reward_key] == sum(e._reward for e in environments) / 2  # the graders' rewards, averaged


@trl_required
def test_trl_refuses_tools_a_python_signature_cannot_present():
    from harness_gym.integrations.trl import environment_factory

    with pytest.raises(UnsupportedHarness, match=r"tool 'Grep': parameter '-i' is not a Python identifier.*factor T"):
        environment_factory("Harness-ClaudeCodeStyle")
