"""The replication pipeline's pieces: train masks cover exactly the policy's turns, both arms get
equal budgets, evaluation is held out from training by seed and template, the masked loss and the
prefix cache agree with plain transformers; ``--small`` end to end behind the slow marker."""

import json
import math
from pathlib import Path

import pytest
from conftest import requires_bwrap

from harness_gym.design import TRAINING_SET, heldout_set, random_training_set
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


def test_concurrent_calls_are_decoded_together_as_the_model_decodes_each():
    """Four threads' prompts of different lengths (two extending cached ones) decoded in one
    left-padded batch give the tokens plain greedy generate gives each, stopping at end of turn."""
    import threading

    from harness_gym.replication.evaluate import MIN_SHARED_PREFIX, PrefixCachingModel

    torch, model = _tiny_llama()
    options = {"max_new_tokens": 10, "do_sample": False, "pad_token_id": 0}
    prompts = [torch.randint(1, 64, (1, MIN_SHARED_PREFIX + n)) for n in (3, 11, 20, 7)]
    with torch.no_grad():
        plain = [model.generate(p, attention_mask=torch.ones_like(p), **options) for p in prompts]
    model.generation_config.eos_token_id = int(plain[1][0, prompts[1].shape[1] + 3])  # prompt 1 stops by its 4th
    with torch.no_grad():
        plain = [model.generate(p, attention_mask=torch.ones_like(p), **options) for p in prompts]
    batched = PrefixCachingModel(model, batch_size=4, window_s=30.0)
    for rounds in range(2):  # the second round's prompts extend the first's outputs: cached prefixes
        got: dict[int, object] = {}

        def call(index: int, prompt: object, out: dict[int, object]) -> None:
            with torch.no_grad():
                out[index] = batched.generate(prompt, attention_mask=torch.ones_like(prompt), **options)

        threads = [threading.Thread(target=call, args=(i, p, got)) for i, p in enumerate(prompts)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        for index in range(4):
            assert torch.equal(got[index], plain[index]), (rounds, index)
        if rounds == 0:  # prompt 1 stopped at the end-of-turn token
            assert plain[1].shape[1] < prompts[1].shape[1] + 10
        prompts = [torch.cat([g, torch.randint(1, 64, (1, 3))], dim=1) for g in plain]
        with torch.no_grad():
            plain = [model.generate(p, attention_mask=torch.ones_like(p), **options) for p in prompts]
    assert batched.batches == [4, 4] and batched.reused_tokens > 4 * MIN_SHARED_PREFIX


@pytest.mark.slow
def test_the_batched_decoder_gives_generates_tokens_on_real_bench_prompts(tmp_path):
    """SmolLM2 on the first prompts of real bench episodes (the base harness and held-out
    configurations, Hermes tool calls, 1.5k-1.9k tokens): the in-place batched decode gives
    token for token what transformers' greedy ``generate`` gives each prompt alone, in a batch of
    one and of four, and again when each prompt is extended and prefilled from its cached prefix."""
    import sys

    torch = pytest.importorskip("torch")
    from harness_gym.model_export import export_model
    from harness_gym.replication.evaluate import PrefixCachingModel, _Request

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
    from hf_decode import real_prompts

    folder = export_model(tmp_path / "model")
    from harness_gym.agents.huggingface import load_model

    _, model, _ = load_model(str(folder))
    prompts = real_prompts(folder, 4)
    options = {"max_new_tokens": 24, "do_sample": False, "pad_token_id": model.generation_config.eos_token_id}

    def plain(ids):
        with torch.no_grad():
            return model.generate(ids, attention_mask=torch.ones_like(ids), **options)

    for size in (1, 4):
        decoder = PrefixCachingModel(model, batch_size=size)
        batch = prompts[:size]
        for _ in range(2):  # the second round extends each output: its prefix comes from the cache
            requests = [_Request(ids, dict(options)) for ids in batch]
            decoder._decode(requests)
            for request, ids in zip(requests, batch, strict=True):
                assert torch.equal(request.result, plain(ids)), (size, ids.shape)
            batch = [torch.cat([r.result, ids[:, -40:]], dim=1) for r, ids in zip(requests, batch, strict=True)]
        assert decoder.reused_tokens >= sum(int(ids.shape[1]) for ids in prompts[:size])  # each first prompt reused


@pytest.mark.slow
@requires_bwrap
def test_small_profile_end_to_end(tmp_path):
    pytest.importorskip("matplotlib")
    from benchmarks.replication import main

    assert main(["--small", "--quiet", "--out", str(tmp_path / "out"), "--work", str(tmp_path / "work")]) == 0
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["data"]["base"]["trained_tokens"] == results["data"]["oa18"]["trained_tokens"]
    assert set(results["models"]) == {"untrained", "base", "oa18", "base/seed0", "oa18/seed0"}
    assert (
        set(results["over_seeds"]) == {"base", "oa18"}
        and "heldout_templates" in results["models"]["base"]["eval_classes"]
    )
    assert results["models"]["untrained"]["episodes"] > 0  # the base harness only in --small
    for arm in ("base", "oa18"):
        entry = results["models"][arm]
        assert entry["classes"]["heldout"]["episodes"] > 0 and 0.0 <= entry["classes"]["heldout"]["pass_at_1"] <= 1.0
        assert entry["tool_call_rate"] is not None
    for name in ("report.md", "pass_by_class.png", "gap_by_arm.png", "factor_effects.png"):
        assert (tmp_path / "out" / name).stat().st_size > 0
    assert (tmp_path / "work" / "small" / "model-oa18-seed0" / "config.json").exists()  # checkpoints kept
    assert results["timings_s"] and not results["reused_stages"]


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


# ----------------------------------------------------------------- the instrument: arms, seeds, classes


def test_every_arm_spec_runs_each_task_twice_in_its_harnesses():
    from harness_gym.replication.data import ARM_SPECS

    ids = [f"t{i}" for i in range(12)]
    for name, spec in ARM_SPECS.items():
        pairs = spec.pairs(ids, seed=1)
        assert [t for t, _ in pairs] == [t for t in ids for _ in range(spec.trajectories)], name  # in a row
    harness = {n: [getattr(h, "env_id", h) for _, h in ARM_SPECS[n].pairs(ids)] for n in ARM_SPECS}
    assert set(harness["base"]) == {BASE_CONFIG.env_id}
    assert set(harness["h1"]) == {"HarnessAdapt-H1"}
    assert ARM_SPECS["oa18-k1"].trajectories == 1 and len(ARM_SPECS["oa18-k1"].pairs(ids)) == 12
    k4 = ARM_SPECS["oa18-k4"].pairs(ids)
    assert all(len({c for _, c in k4[i : i + 4]}) == 4 for i in range(0, len(k4), 4))  # 4 distinct per task
    oa18 = ARM_SPECS["oa18"].pairs(ids)
    assert all(a != b for (_, a), (_, b) in zip(oa18[::2], oa18[1::2], strict=True))
    assert {c for _, c in ARM_SPECS["random18"].pairs(ids)} <= set(random_training_set(18, 0))


def _examples(sizes, harness="h"):
    return [Example(tuple(range(n + 1)), (False,) + (True,) * n, harness, f"t{i // 2}") for i, n in enumerate(sizes)]


def test_trimming_is_proportional_and_exact():
    from harness_gym.replication.data import trim_to

    examples = _examples([10, 30, 60])
    trimmed, excess = trim_to(examples, 80)
    assert excess == 20 and sum(e.trained_tokens for e in trimmed) == 80
    assert [e.trained_tokens for e in trimmed] == [8, 24, 48]  # each loses its share, from its end
    assert trimmed[0].trained[-2:] == (False, False) and trimmed[0].trained[1]
    with pytest.raises(ValueError, match="cannot trim"):
        trim_to(examples, 101)


def test_every_arm_keeps_the_same_tasks_and_equal_budgets():
    from harness_gym.replication.data import ArmData, equalise_same_tasks

    ids = ["t0", "t1", "t2"]
    pools = {
        "base": [_examples([5, 5], "A")[:2], _examples([6, 6], "A"), _examples([7, 7], "A")],
        "oa18": [_examples([9, 4], "B"), _examples([8, 8], "B"), _examples([1, 1], "B")],
    }
    arms = equalise_same_tasks(pools, ids, 2)
    assert arms["base"].task_ids == arms["oa18"].task_ids == ["t0", "t1"]
    assert arms["base"].trained_tokens == arms["oa18"].trained_tokens == 22
    assert (arms["base"].trimmed_tokens, arms["oa18"].trimmed_tokens) == (0, 7)
    again = ArmData.from_json(json.loads(json.dumps(arms["oa18"].to_json())))
    assert again.examples == arms["oa18"].examples and again.summary() == arms["oa18"].summary()
    # K=1 keeps twice the tasks, K=4 half: the same trajectories either way
    k1 = [[e] for e in _examples([3, 3, 3, 3, 3, 3], "C")]
    k4 = [_examples([2, 2, 2, 2], "D")]
    mixed = equalise_same_tasks({"base": pools["base"], "k1": k1, "k4": k4}, ["t0", "t1", "t2", "t3"], 2)
    assert [len(mixed[n].task_ids) for n in ("base", "k1", "k4")] == [2, 4, 1]
    assert {a.trajectories for a in mixed.values()} == {4} and len({a.trained_tokens for a in mixed.values()}) == 1
    with pytest.raises(ValueError, match="cannot keep 4 trajectories"):
        equalise_same_tasks({"base": pools["base"][:1], "oa18": pools["oa18"]}, ids, 2)


def test_ladder_evaluation_is_held_out_by_seed_words_and_template():
    from harness_gym.replication.data import ladder_suite

    training = load_tasks(ladder_suite(7, 12))
    tasks, _ = evaluation_tasks(ladder_suite(1007, 12, words="heldout"), training)
    assert {t.metadata["words"] for t in tasks} == {"heldout"}
    with pytest.raises(ValueError, match="held-out templates"):
        check_held_out(load_tasks(ladder_suite(3, 12, templates="all")), tasks)


def _record(config: str, steps: int, passed: bool, klass: str = "heldout") -> dict:
    parsed = HarnessConfig.parse(config)
    return {
        "episode_id": f"{config}|t{steps}|0", "harness": parsed.env_id, "config": parsed.code, "class": klass,
        "task_id": f"t{steps}-{passed}", "passed": passed, "outcome": "passed" if passed else "failed",
        "steps": steps, "role": "model", "eval_class": klass,
    }  # fmt: skip


def test_factor_effects_count_only_episodes_where_the_factor_acted():
    from harness_gym.replication.evaluate import acted_effects

    # C2 folds after 5 turns, seen from step 7: short episodes say nothing about C
    records = [_record("S0T0O0C0W0", 2, True), _record("S0T0O0C2W0", 2, False)]
    records += [_record("S0T0O0C0W0", 8, True), _record("S0T0O0C2W0", 8, True)]
    effects = acted_effects(records)
    assert effects["C"]["after_steps"] == 6 and effects["C"]["acted"] == 2 and effects["C"]["share"] == 0.5
    assert effects["C"]["effects"]["0"] == effects["C"]["effects"]["2"] == 0.0  # no C effect where C acted
    assert effects["S"]["acted"] == 4 and effects["O"]["acted"] == 4


def test_seed_intervals_and_class_figures():
    from harness_gym.replication.evaluate import class_figures, over_seeds

    figures = over_seeds([0.5, 0.6, 0.7])
    assert figures["mean"] == pytest.approx(0.6) and figures["seeds"] == 3
    assert figures["ci95"][0] == pytest.approx(0.6 - 4.303 * 0.1 / 3**0.5)
    assert math.isnan(over_seeds([0.5])["ci95"][0])
    records = [_record("S0T0O0C0W0", 2, True, "base"), _record("S2T2O2C2W2", 2, False, "heldout_renamed")]
    classes = class_figures(records, resamples=50)
    assert classes["base"]["pass_at_1"] == 1.0 and classes["heldout_renamed"]["pass_at_1"] == 0.0


def test_a_reused_stage_reports_the_time_that_produced_it(capsys):
    from benchmarks.replication import Stages

    stages = Stages(2)
    stages.start("sft")
    stages.finish(produced_s=700.0)  # a kept checkpoint: read back at once, trained in 700 s
    stages.start("bench")
    stages.finish()
    assert stages.times["sft"] == 700.0 and stages.reused == ["sft"] and stages.times["bench"] < 5
    assert "produced in 700s" in capsys.readouterr().out


def test_bench_records_of_another_checkpoint_are_not_read_back(tmp_path, capsys):
    """Bench records resume by episode: after a retrain with other settings (or another reply
    cap) the model's old records must go, or the new checkpoint would be scored by the old one."""
    from benchmarks.replication import PROFILES, _discard_stale_bench

    model, bench = tmp_path / "model", tmp_path / "bench" / "base-seed0"
    model.mkdir()
    (model / "train_log.json").write_text(json.dumps({"config": {"epochs": 1}, "trained_tokens": 10}))
    (bench / "base").mkdir(parents=True)
    (bench / "base" / "results.jsonl").write_text("{}\n")  # records from before keys were written
    _discard_stale_bench(PROFILES["small"], model, bench, 256)
    assert not (bench / "base").exists() and "discarded" in capsys.readouterr().out
    (bench / "base").mkdir()
    _discard_stale_bench(PROFILES["small"], model, bench, 256)  # same checkpoint and settings: kept
    assert (bench / "base").exists()
    (model / "train_log.json").write_text(json.dumps({"config": {"epochs": 3}, "trained_tokens": 10}))
    _discard_stale_bench(PROFILES["small"], model, bench, 256)  # retrained
    assert not (bench / "base").exists()
    (bench / "base").mkdir()
    _discard_stale_bench(PROFILES["small"], model, bench, 96)  # another reply cap
    assert not (bench / "base").exists()


def test_the_profiles_plan_their_classes_and_estimate_their_cost():
    from benchmarks.replication import PROFILES, estimate_cost, eval_runs

    full = {r.klass: r for r in eval_runs(PROFILES["full"], trained=True)}
    assert set(full) == {"base", "training", "heldout", "heldout_renamed", "presets", "external", "heldout_templates"}
    assert dict(full["heldout_renamed"].env_options) == {"resample_names": True}
    assert {h.klass for h in full["presets"].harnesses} == {"out_of_space"}
    assert [r.klass for r in eval_runs(PROFILES["full"], trained=False)] == ["base"]
    assert PROFILES["full"].arms == ("base", "oa18") and len(PROFILES["full"].training_seeds) >= 3
    assert set(PROFILES["ablation"].arms) >= {"random18", "oa18-k1", "oa18-k4", "h1"}
    costs = {name: estimate_cost(PROFILES[name])["total_s"] for name in ("small", "full", "ablation")}
    assert costs["small"] < costs["full"] < costs["ablation"]
    # a session's machine holds 3 hours, everything else included; the rates were measured at load
    # 3-5 with one torch thread and every trained episode is costed as a loop to max_steps
    assert costs["full"] <= 3 * 3600
    assert PROFILES["full"].max_steps > 8  # above the ladder's longest reference episode


def test_later_training_seeds_run_the_core_classes_only():
    """With ``full_eval_seeds=1`` the first seed runs every class and the others the gap's core
    classes, whose intervals over seeds the report gives; the estimate counts each seed's own."""
    from dataclasses import replace

    from benchmarks.replication import CORE_CLASSES, PROFILES, bench_estimate_s, eval_runs

    profile = replace(PROFILES["full"], full_eval_seeds=1)
    first = [r.klass for r in eval_runs(profile, trained=True, seed_index=0)]
    later = [r.klass for r in eval_runs(profile, trained=True, seed_index=2)]
    assert set(first) > set(later) and tuple(later) == CORE_CLASSES
    assert eval_runs(profile, trained=False, seed_index=2) == eval_runs(profile, trained=False)
    assert bench_estimate_s(profile, trained=True, seed_index=1) < bench_estimate_s(profile, trained=True)
    every = replace(profile, full_eval_seeds=0)
    assert [r.klass for r in eval_runs(every, trained=True, seed_index=2)] == first


def test_real_clis_are_an_evaluation_class_served_the_checkpoint(tmp_path):
    """The full profile evaluates claude-code --bare and mini-swe-agent as class ``external``, and
    their agent is the bench's ``hf`` agent on the very checkpoint (what bench/external.py serves
    behind a CLI), not the in-process agent a CLI cannot drive."""
    from benchmarks.replication import PROFILES, eval_runs
    from harness_gym.bench.external import _agent_name
    from harness_gym.replication.evaluate import bench_agent_factory

    external = {r.klass: r for r in eval_runs(PROFILES["full"], trained=True)}["external"]
    assert [h.env_id for h in external.harnesses] == ["external:claude-code-bare", "external:mini-swe-agent"]
    assert {h.klass for h in external.harnesses} == {"external"} and external.count == PROFILES["full"].eval_tasks
    factory = bench_agent_factory(tmp_path / "ckpt", external.harnesses, max_new_tokens=96)
    assert _agent_name(factory) == ("hf", {"model": str(tmp_path / "ckpt"), "max_new_tokens": 96})
    in_process = bench_agent_factory(tmp_path / "ckpt", external.harnesses[:0], max_new_tokens=96)
    assert _agent_name(in_process) == (None, {})
    assert "external" not in {r.klass for r in eval_runs(PROFILES["easy"], trained=True)}


@pytest.mark.slow
@requires_bwrap
def test_the_reply_cap_holds_the_references_longest_reply(tokenizer, tmp_path):
    """The ladder's upper rung starts with a plan of every step and then the call: the profile's
    reply cap must hold that whole reply, or a faithful imitation is cut off before its call (the
    former cap of 96 tokens did that)."""
    from benchmarks.replication import PROFILES
    from harness_gym.export import sft_rows
    from harness_gym.replication.data import ladder_suite, record_trajectories

    suite = ladder_suite(7, 2, rungs="4")
    tasks = load_tasks(suite)
    paths = record_trajectories(suite, tasks, [(t.id, BASE_CONFIG) for t in tasks], tmp_path)
    rows, _ = sft_rows(paths, tasks=suite, tool_format="hermes")
    longest = 0
    for row in rows:
        example = tokenize_row(row, tokenizer)
        run = 0
        for trained in (*example.trained, False):
            run = run + 1 if trained else 0
            longest = max(longest, run)
    assert 96 < longest <= min(p.max_new_tokens for name, p in PROFILES.items() if p.suite == "ladder")


@requires_bwrap
def test_every_arm_records_the_same_ladder_tasks(tokenizer, tmp_path):
    """The real data step (reference agent in sandboxes, SFT export, tokenizer) for all six arms."""
    from harness_gym.replication.data import ARM_SPECS, equalise_same_tasks, ladder_suite, record_arm_pools

    suite = ladder_suite(5, 4, rungs="2")
    specs = list(ARM_SPECS.values())
    pools, ids = record_arm_pools(suite, specs, lambda row: tokenize_row(row, tokenizer), trajectories=4)
    assert {n: len(p) for n, p in pools.items()}["oa18-k4"] == 1  # only what 4 trajectories need
    arms = equalise_same_tasks(pools, ids, 2)
    assert {a.trajectories for a in arms.values()} == {4}
    assert len({a.trained_tokens for a in arms.values()}) == 1
    assert arms["base"].task_ids == arms["oa18"].task_ids == arms["h1"].task_ids == ids[:2]
    assert len(arms["oa18-k1"].task_ids) == 4 and len(arms["oa18-k4"].task_ids) == 1
    assert set(arms["h1"].harness_counts) == {"HarnessAdapt-H1"}
