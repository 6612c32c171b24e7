"""The OpenRLHF agent executor, end to end against OpenRLHF's real base classes, a real tokenizer and
chat template (SmolLM2's), real sandboxes, and a real small model behind a vLLM-style generate()."""

from __future__ import annotations

import asyncio
import importlib.util
import itertools
import json
import os
import socket
import threading
from pathlib import Path

import pytest

pytest.importorskip("openrlhf.utils.agent", reason="needs `pip install --no-deps openrlhf` (see README)")
pytest.importorskip("transformers")

from conftest import requires_bwrap

from harness_gym.agents import ReferenceAgent, run_episode
from harness_gym.env import HarnessEnv
from harness_gym.factors import compile_config
from harness_gym.prompting import text_messages
from harness_gym.tasks import load_tasks
from trainers.engines import SamplingParams, ScriptedEngine, TransformersEngine
from trainers.executor_settings import ExecutorSettings, RolloutError, RolloutRequest
from trainers.rollout import HarnessAgentExecutor
from trainers.turns import ChatTurns, TemplateError

pytestmark = requires_bwrap
SUITE = "builtin:train"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def turns(tokenizer):
    return ChatTurns(tokenizer)


@pytest.fixture(scope="module")
def task():
    return load_tasks(SUITE)[0]


def reference_replies(task, **env_args):
    """The reference agent's replies on ``task`` (a deterministic policy that solves it), and the
    full conversation with the tools it was shown."""
    env = HarnessEnv(tasks=[task], **env_args)
    try:
        result = run_episode(env, ReferenceAgent(), seed=3, task_id=task.id)
        tools = env.tool_interface.schemas()
    finally:
        env.close()
    assert result.reward == 1.0
    return [m["content"] for m in result.transcript if m["role"] == "assistant"], result.transcript, tools


def run(executor, label, engine, tokenizer, max_length=16384, **params):
    return asyncio.run(executor.execute("ignored", label, SamplingParams(**params), max_length, tokenizer, engine))


def stop_id(turns):
    return turns.encode(turns.closing)[0]


def test_agent_file_defines_an_openrlhf_executor():
    from openrlhf.utils.agent import AgentExecutorBase, AgentInstanceBase

    from trainers.rollout import HarnessAgentInstance

    # loaded the way OpenRLHF's rollout actor loads --train.agent_func_path
    spec = importlib.util.spec_from_file_location("agent_module", ROOT / "trainers" / "agent_func.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert issubclass(module.AgentExecutor, AgentExecutorBase)
    assert issubclass(HarnessAgentInstance, AgentInstanceBase)
    assert isinstance(module.AgentExecutor(), AgentExecutorBase)  # built with no arguments, as OpenRLHF does


def test_turn_boundaries_masks_and_reward_are_token_exact(tokenizer, turns, task):
    replies, transcript, tools = reference_replies(task, config="S0T0O0C0W0")
    engine = ScriptedEngine(tokenizer, replies, stop_id(turns))
    label = RolloutRequest(SUITE, task.id, "S0T0O0C0W0", seed=3).to_label()
    out = run(HarnessAgentExecutor(ExecutorSettings()), label, engine, tokenizer, logprobs=1)

    tokens, ranges = out["observation_tokens"], out["action_ranges"]
    assert out["reward"] == 1.0 and out["scores"] == 1.0
    assert out["extra_logs"]["pass"] == 1.0 and out["extra_logs"]["segments"] == 1.0
    # the action mask covers exactly the tokens the engine generated, in order
    assert [tokens[a:b] for a, b in ranges] == engine.outputs
    # at every turn the policy saw exactly the tokens that precede its action in the trained sequence
    assert [tokens[:a] for a, _ in ranges] == engine.prompts
    # the whole sequence is what the chat template renders for the conversation: the end-of-turn
    # token and the separator after it appear once per message, never duplicated or lost
    last_action = max(i for i, m in enumerate(transcript) if m["role"] == "assistant")
    seen = text_messages(transcript[: last_action + 1], tools)  # the finish tool's answer is never shown
    expected = turns.render(seen, add_generation_prompt=False)
    assert tokenizer.decode(tokens, skip_special_tokens=False) + turns.closing_rest(tokens) == expected
    end_of_turn = stop_id(turns)
    assert tokens.count(end_of_turn) == len(seen)
    # every reply ends with the end-of-turn token inside the action span; the "\n" after it is masked
    assert all(tokens[b - 1] == end_of_turn and tokenizer.decode(tokens[b : b + 1]) == "\n" for _, b in ranges[:-1])
    assert ranges[-1][1] == len(tokens)  # the reward lands on the last action token
    # tool output, workflow text and the task are all outside the action spans
    masked = "".join(tokenizer.decode(tokens[b:a]) for (_, b), (a, _) in itertools.pairwise(ranges))
    assert "<tool_response>" in masked and "<|im_start|>user" in masked
    assert len(out["rollout_log_probs"]) == len(tokens)


def test_context_compression_never_trains_on_an_unseen_context(tokenizer, turns, task):
    spec = compile_config("S0T0O0C1W0")
    spec["context"].update(trigger_turns=1, keep_last_turns=1)
    replies, _, _ = reference_replies(task, spec=spec)
    label = RolloutRequest(SUITE, task.id, spec, seed=3).to_label()
    results = {}
    for segment in ("last", "first"):
        engine = ScriptedEngine(tokenizer, list(replies), stop_id(turns))
        out = run(HarnessAgentExecutor(ExecutorSettings(segment=segment)), label, engine, tokenizer)
        results[segment] = (out, engine)
        tokens, ranges = out["observation_tokens"], out["action_ranges"]
        assert out["extra_logs"]["context_resets"] >= 1
        assert out["extra_logs"]["segments"] == out["extra_logs"]["context_resets"] + 1
        assert 0 < out["extra_logs"]["trained_policy_token_share"] < 1
        # each trained action follows exactly the context the engine was given for it
        for start, end in ranges:
            prefix, action = tokens[:start], tokens[start:end]
            index = engine.prompts.index(prefix)
            assert engine.outputs[index] == action
        assert out["reward"] == 1.0
    last, last_engine = results["last"]
    first, first_engine = results["first"]
    # the last segment starts from the rewritten context (a summary, masked), not the first prompt
    assert last["observation_tokens"][: last["action_ranges"][0][0]] != last_engine.prompts[0]
    assert "Summary of the earlier part" in tokenizer.decode(last["observation_tokens"][: last["action_ranges"][0][0]])
    assert first["observation_tokens"][: first["action_ranges"][0][0]] == first_engine.prompts[0]
    assert last["action_ranges"][-1][1] == len(last["observation_tokens"])


def test_a_reply_cut_for_length_gets_the_whole_closing_masked(tokenizer, turns, task):
    engine = ScriptedEngine(tokenizer, ["I will look around first. " * 30, "done"], stop_id(turns))
    label = RolloutRequest(SUITE, task.id, "S0T0O0C0W0").to_label()
    executor = HarnessAgentExecutor(ExecutorSettings(max_steps=2))
    out = run(executor, label, engine, tokenizer, max_tokens=12)
    tokens, ranges = out["observation_tokens"], out["action_ranges"]
    first_end = ranges[0][1]
    assert ranges[0][1] - ranges[0][0] == 12 and stop_id(turns) not in tokens[ranges[0][0] : first_end]
    assert tokenizer.decode(tokens[first_end : first_end + 2], skip_special_tokens=False) == turns.closing
    assert out["extra_logs"]["episode_truncated"] == 1.0  # the two-step budget ended it
    assert out["truncated"] is True


def test_running_out_of_tokens_ends_and_grades_the_episode(tokenizer, turns, task):
    engine = ScriptedEngine(tokenizer, ["Let me list the files."] * 5, stop_id(turns))
    label = RolloutRequest(SUITE, task.id, "S0T0O0C0W0").to_label()
    prompt_length = len(asyncio.run(_prompt_ids(label, turns)))
    out = run(HarnessAgentExecutor(ExecutorSettings()), label, engine, tokenizer, max_length=prompt_length + 40)
    assert len(engine.prompts) == 1  # the feedback would not fit: no second turn
    assert out["extra_logs"]["episode_truncated"] == 1.0 and out["reward"] == 0.0
    assert len(out["observation_tokens"]) <= prompt_length + 40


async def _prompt_ids(label, turns):
    from trainers.rollout import HarnessAgentInstance

    instance = HarnessAgentInstance(turns, ExecutorSettings())
    try:
        reset = await instance.reset({"observation": "", "label": label})
        return turns.prompt_ids(reset["messages"])
    finally:
        await instance.close()


def test_environment_work_runs_off_the_event_loop(tokenizer, turns, task, monkeypatch):
    threads = []
    original = HarnessEnv.step

    def step(self, action):
        threads.append(threading.current_thread())
        return original(self, action)

    replies, _, _ = reference_replies(task, config="S1T1O1C0W1")
    monkeypatch.setattr(HarnessEnv, "step", step)
    executor = HarnessAgentExecutor(ExecutorSettings())
    label = RolloutRequest(SUITE, task.id, "S1T1O1C0W1", seed=3).to_label()

    async def main():
        loop_thread = threading.current_thread()
        engines = [ScriptedEngine(tokenizer, list(replies), stop_id(turns)) for _ in range(3)]
        outs = await asyncio.gather(
            *(executor.execute("", label, SamplingParams(), 16384, tokenizer, e) for e in engines)
        )
        return loop_thread, outs

    loop_thread, outs = asyncio.run(main())
    assert [o["reward"] for o in outs] == [1.0, 1.0, 1.0]
    assert threads and all(t is not loop_thread and t.name.startswith("harness-env") for t in threads)


def test_turns_are_built_once_per_tokenizer_not_per_request(tokenizer):
    import copy

    executor = HarnessAgentExecutor(ExecutorSettings())
    # Ray hands the executor a fresh copy of the tokenizer with every request
    assert executor.turns_for(copy.deepcopy(tokenizer)) is executor.turns_for(tokenizer)
    assert len(executor._turns) == 1


def test_rollout_log_and_extra_logs_are_numeric(tokenizer, turns, task, tmp_path):
    replies, _, _ = reference_replies(task, config="S2T2O2C0W0")
    log = tmp_path / "rollouts.jsonl"
    executor = HarnessAgentExecutor(ExecutorSettings(rollout_log=str(log)))
    label = RolloutRequest(SUITE, task.id, "S2T2O2C0W0", seed=3, step=7, slot=1).to_label()
    out = run(executor, label, ScriptedEngine(tokenizer, replies, stop_id(turns)), tokenizer)
    assert all(isinstance(v, float) for v in out["extra_logs"].values())
    assert out["extra_logs"]["harness_index"] == float(int("22200", 3))
    (actor_log,) = tmp_path.glob("rollouts.*.jsonl")  # this actor's own log, merged by trainers.metrics
    assert actor_log.name == f"rollouts.{socket.gethostname()}-{os.getpid()}.jsonl" and not log.exists()
    record = json.loads(actor_log.read_text())
    assert record["step"] == 7 and record["slot"] == 1 and record["passed"] is True
    assert record["harness"] == "S2T2O2C0W0" and record["policy_tokens"] > 0


@pytest.mark.parametrize(
    "label, message",
    [
        ("What is 2+2?", "not a harness-gym rollout request"),
        (json.dumps({"harness_gym": 9, "suite": SUITE, "task_id": "x", "harness": "S0T0O0C0W0"}), "version"),
        (json.dumps({"harness_gym": 1, "suite": SUITE, "harness": "S0T0O0C0W0"}), r"lacks \['task_id'\]"),
        (json.dumps({"harness_gym": 1, "suite": SUITE, "task_id": "nope", "harness": "S0T0O0C0W0"}), "no task 'nope'"),
    ],
)
def test_bad_labels_fail_with_a_clear_error(tokenizer, label, message):
    engine = ScriptedEngine(tokenizer, ["x"], 2)
    with pytest.raises(RolloutError, match=message):
        run(HarnessAgentExecutor(ExecutorSettings()), label, engine, tokenizer)


def test_unknown_harness_and_bad_settings_are_reported(tokenizer, task, monkeypatch):
    label = RolloutRequest(SUITE, task.id, "S9T0O0C0W0").to_label()
    with pytest.raises(RolloutError, match="unknown harness"):
        run(HarnessAgentExecutor(ExecutorSettings()), label, ScriptedEngine(tokenizer, ["x"], 2), tokenizer)
    monkeypatch.setenv("HARNESS_GYM_EXECUTOR", '{"segment": "middle"}')
    with pytest.raises(ValueError, match="segment must be one of"):
        ExecutorSettings.from_env()
    monkeypatch.setenv("HARNESS_GYM_EXECUTOR", '{"segmnet": "last"}')
    with pytest.raises(ValueError, match="unknown keys"):
        ExecutorSettings.from_env()


def test_a_template_that_rewrites_history_is_refused(tokenizer):
    class Rewriting:
        chat_template = "x"
        eos_token_id = 0

        def apply_chat_template(self, messages, tokenize=False, add_generation_prompt=False):
            # renders the conversation newest first: every added message changes the prefix
            return "".join(f"[{m['role']}]{m['content']}" for m in reversed(messages))

    with pytest.raises(TemplateError, match="re-renders earlier turns"):
        ChatTurns(Rewriting())


def test_a_real_model_rollout(tokenizer, turns, task):
    from harness_gym.agents.huggingface import load_model

    _, model, _ = load_model()

    class Recording(TransformersEngine):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.replies = []

        async def generate(self, prompt_token_ids, sampling_params, multi_modal_data=None):
            output = await super().generate(prompt_token_ids, sampling_params, multi_modal_data)
            self.replies.append((list(prompt_token_ids), output.outputs[0]))
            return output

    engine = Recording(model, tokenizer, stop_token_ids=turns.stop_token_ids, seed=1)
    label = RolloutRequest(SUITE, task.id, "S0T0O2C0W0").to_label()
    out = run(HarnessAgentExecutor(ExecutorSettings(max_steps=2)), label, engine, tokenizer,
              max_tokens=32, temperature=0.8, logprobs=1)  # fmt: skip
    tokens, ranges, log_probs = out["observation_tokens"], out["action_ranges"], out["rollout_log_probs"]
    assert len(ranges) == len(engine.replies) == 2
    for (start, end), (prompt, reply) in zip(ranges, engine.replies, strict=True):
        assert tokens[:start] == prompt and tokens[start:end] == list(reply.token_ids)
        assert log_probs[start:end] == [
            entry[t].logprob for t, entry in zip(reply.token_ids, reply.logprobs, strict=True)
        ]
        assert all(value <= 0 for value in log_probs[start:end])
    inside = {i for start, end in ranges for i in range(start, end)}
    assert all(log_probs[i] == 0.0 for i in range(len(tokens)) if i not in inside)
    assert len(log_probs) == len(tokens)
    assert out["extra_logs"]["steps"] == 2.0 and isinstance(out["reward"], float)


def test_try_rollouts_runs_dataset_rows_through_the_executor(tmp_path, capsys):
    from trainers.dataset import main as dataset_main
    from trainers.try_rollouts import main as try_main

    data = tmp_path / "prompts.jsonl"
    assert dataset_main(["--suite", SUITE, "--out", str(data), "--tasks-per-step", "2", "--max-steps", "1"]) == 0
    report = tmp_path / "report.json"
    argv = [str(data), "--limit", "1", "--samples", "2", "--max-new-tokens", "16", "--max-steps", "1"]
    assert try_main([*argv, "--show", "--out", str(report)]) == 0
    rows = json.loads(report.read_text())
    assert len(rows) == 2 and all(r["turns"] == 1 and 0 < r["policy_tokens"] <= 16 for r in rows)
    assert "«" in capsys.readouterr().out  # the policy span is marked in the printed sequence
    (tmp_path / "bad.jsonl").write_text('{"prompt": "no label"}\n')
    assert try_main([str(tmp_path / "bad.jsonl")]) == 2
    assert "no 'label'" in capsys.readouterr().err
