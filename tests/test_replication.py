"""The replication pipeline's pieces: train masks cover exactly the policy's turns, both arms get
equal budgets, evaluation is held out from training by seed and template, the masked loss and the
prefix cache agree with plain transformers; ``--small`` end to end behind the slow marker."""

import json

import pytest
from conftest import requires_bwrap

from harness_gym.design import TRAINING_SET, heldout_set
from harness_gym.records import classify_config
from harness_gym.replication.data import (
    ARMS,
    arm_assignments,
    build_arm_pools,
    check_held_out,
    easy_suite,
    equalise,
    evaluation_tasks,
)
from harness_gym.replication.evaluate import gap_interval, model_summary
from harness_gym.replication.report import model_entry
from harness_gym.replication.sft import Example, tokenize_row
from harness_gym.space import BASE_CONFIG, HarnessConfig, hamming
from harness_gym.tasks import load_tasks


@pytest.fixture(scope="module")
def pools(tokenizer):
    suite = easy_suite(5, 4)
    return suite, *build_arm_pools(suite, lambda row: tokenize_row(row, tokenizer))


def test_arm_a_is_the_base_harness_and_arm_b_the_locality_schedule():
    ids = [f"t{i}" for i in range(30)]
    base, oa18 = arm_assignments("base", ids), arm_assignments("oa18", ids)
    assert len(base) == len(oa18) == 2 * len(ids)
    assert {c for _, c in base} == {BASE_CONFIG}
    assert [t for t, _ in oa18] == [t for t in ids for _ in range(2)]  # a task's K=2 configurations in a row
    for (_, anchor), (_, second) in zip(oa18[::2], oa18[1::2], strict=True):
        assert anchor in TRAINING_SET and second in TRAINING_SET and anchor != second
        assert hamming(anchor, second) == min(hamming(anchor, c) for c in TRAINING_SET if c != anchor)
    assert len({c for _, c in oa18}) > 9  # spread over the set
    with pytest.raises(ValueError, match="unknown arm"):
        arm_assignments("claude", ids)


@requires_bwrap
def test_masks_cover_exactly_the_policys_turns(pools, tokenizer):
    _, arm_pools, _ = pools
    for arm in ARMS:
        for example in (e for group in arm_pools[arm] for e in group):
            trained = [i for i, t in zip(example.input_ids, example.trained, strict=True) if t]
            text = tokenizer.decode(trained)
            # the policy's turns only: its tool calls and end-of-turn tokens, no system prompt or tool output
            assert "<tool_call>" in text and text.count("<|im_end|>") == text.count("<tool_call>")
            assert "<|im_start|>" not in text and "<tool_response>" not in text and "Rules:" not in text
            assert 0 < example.trained_tokens < len(example.input_ids) / 4


@requires_bwrap
def test_equal_trajectories_and_trained_tokens(pools):
    _, arm_pools, task_ids = pools
    arms = equalise(arm_pools, task_ids, 2)
    base, oa18 = arms["base"], arms["oa18"]
    assert base.trajectories == oa18.trajectories == 4
    assert base.trained_tokens == oa18.trained_tokens
    assert set(base.harness_counts) == {BASE_CONFIG.env_id}
    assert {h.removeprefix("Harness-") for h in oa18.harness_counts} <= {c.code for c in TRAINING_SET}
    # whatever was trimmed is recorded, and only the larger arm was trimmed
    untrimmed = {n: sum(e.trained_tokens for g in arm_pools[n] for e in g) for n in arm_pools}
    assert min(base.trimmed_tokens, oa18.trimmed_tokens) == 0
    assert max(base.trimmed_tokens, oa18.trimmed_tokens) < 0.05 * base.trained_tokens
    assert all(untrimmed[n] >= arms[n].trained_tokens for n in arms)


def test_trimming_takes_the_loss_off_the_last_trained_tokens():
    example = Example((1, 2, 3, 4, 5), (False, True, True, False, True))
    assert example.trimmed(2).trained == (False, True, False, False, False)
    assert example.trimmed(0) == example
    with pytest.raises(ValueError, match="cannot trim"):
        example.trimmed(4)


def test_evaluation_is_held_out_by_seed_and_template():
    training = load_tasks(easy_suite(7, 20))
    tasks, dropped = evaluation_tasks(easy_suite(1007, 20), training)
    assert len(tasks) + dropped == 20
    assert {t.metadata["seed"] for t in tasks}.isdisjoint({t.metadata["seed"] for t in training})
    assert {t.instruction for t in tasks}.isdisjoint({t.instruction for t in training})
    with pytest.raises(ValueError, match="reuse the training seeds"):
        evaluation_tasks(easy_suite(7, 4), training)
    with pytest.raises(ValueError, match="held-out templates"):
        check_held_out(load_tasks(easy_suite(3, 8, "all")), load_tasks(easy_suite(4, 2)))


def _tiny_llama():
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    return torch, LlamaForCausalLM(config).eval()


def test_masked_loss_is_the_loss_over_trained_tokens_only():
    from harness_gym.replication.sft import masked_loss

    torch, model = _tiny_llama()
    ids = tuple(range(3, 23))
    trained = tuple(i in (5, 6, 7, 15, 16) for i in range(len(ids)))
    labels = torch.tensor([[t if m else -100 for t, m in zip(ids, trained, strict=True)]])
    with torch.no_grad():
        expected = model(input_ids=torch.tensor([ids]), labels=labels).loss
        got = masked_loss(model, Example(ids, trained))
    assert torch.allclose(got, expected, atol=1e-5)


def test_the_prefix_cache_generates_what_the_model_generates():
    from harness_gym.replication.evaluate import MIN_SHARED_PREFIX, PrefixCachingModel

    torch, model = _tiny_llama()
    cached = PrefixCachingModel(model)
    prompt = torch.randint(1, 64, (1, MIN_SHARED_PREFIX + 20))
    options = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0}
    for _ in range(3):  # the second and third prompts extend the first: their prefix is reused
        with torch.no_grad():
            plain = model.generate(prompt, attention_mask=torch.ones_like(prompt), **options)
            fast = cached.generate(prompt, attention_mask=torch.ones_like(prompt), **options)
        assert torch.equal(plain, fast)
        prompt = torch.cat([fast, torch.randint(1, 64, (1, 5))], dim=1)
    assert cached.reused_tokens > 2 * MIN_SHARED_PREFIX


@pytest.mark.slow
@requires_bwrap
def test_small_profile_end_to_end(tmp_path):
    pytest.importorskip("matplotlib")
    from benchmarks.replication import main

    assert main(["--small", "--quiet", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["data"]["base"]["trained_tokens"] == results["data"]["oa18"]["trained_tokens"]
    assert set(results["models"]) == {"untrained", "base", "oa18"}
    assert results["models"]["untrained"]["episodes"] > 0  # the base harness only in --small
    for arm in ("base", "oa18"):
        entry = results["models"][arm]
        assert entry["classes"]["heldout"]["episodes"] > 0 and 0.0 <= entry["classes"]["heldout"]["pass_at_1"] <= 1.0
        assert entry["tool_call_rate"] is not None
    for name in ("report.md", "pass_by_class.png", "gap_by_arm.png", "factor_effects.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert (tmp_path / "work" / "small" / "model-oa18" / "config.json").exists()


def _episode(task: str, config: HarnessConfig, passed: bool) -> dict:
    return {
        "episode_id": f"{config.env_id}|{task}|0",
        "harness": config.env_id,
        "class": classify_config(config),
        "config": config.code,
        "task_id": task,
        "passed": passed,
        "reward": float(passed),
        "steps": 2,
        "tool_calls": 1,
        "valid_tool_calls": 1,
        "no_call_steps": 1,
        "error": None,
    }


def test_the_gap_interval_carries_the_configurations_variation():
    # arm A's pattern: every base episode passes, and every task passes the same 2 of 18 held-out
    # configurations; with 3 tasks, resampling tasks alone would give an interval of width zero
    held = list(heldout_set())
    base = [_episode(f"t{t}", BASE_CONFIG, True) for t in range(16)]
    heldout = [_episode(f"t{t}", c, i < 2) for t in range(3) for i, c in enumerate(held)]
    gap = gap_interval(base, heldout, resamples=2000)
    assert gap["gap"] == pytest.approx(8 / 9)
    assert gap["ci95"][0] < 0.8 < gap["ci95"][1] == pytest.approx(1.0)
    # a model benched in the base harness only shows no training or held-out figure
    entry = model_entry(model_summary(base[:4], resamples=200))
    assert entry["classes"]["base"]["pass_at_1"] == 1.0
    assert entry["classes"]["training"]["episodes"] is None and entry["classes"]["heldout"]["pass_at_1"] is None
    both = model_entry(model_summary(base + heldout, resamples=200))
    assert both["classes"]["heldout"]["pass_at_1"] == pytest.approx(1 / 9) and both["main_effects"]
