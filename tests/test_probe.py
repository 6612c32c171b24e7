"""``harness-gym probe``: the teacher-forced score is the masked loss's negative, factor means and
rank agreement are computed as stated, and the CLI probes the real SmolLM2 on real renderings."""

import json
import math
from pathlib import Path

import pytest
from conftest import requires_bwrap

from harness_gym.replication.probe import factor_means, rank_agreement, spearman
from harness_gym.replication.sft import Example


def test_the_policy_logprob_is_minus_the_masked_loss():
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM

    from harness_gym.replication.probe import policy_logprob
    from harness_gym.replication.sft import masked_loss

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256,
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    example = Example(tuple(range(3, 23)), tuple(i in (5, 6, 7, 15) for i in range(20)))
    total, count = policy_logprob(model, example)
    with torch.no_grad():
        loss = float(masked_loss(model, example))
    assert count == 4 and math.isclose(total / count, -loss, rel_tol=1e-4)


def test_factor_means_are_level_means_minus_the_overall_mean():
    per = {
        "a": {"config": "S0T0O0C0W0", "per_token": -1.0},
        "b": {"config": "S2T0O0C0W0", "per_token": -3.0},
        "preset": {"config": None, "per_token": -9.0},  # outside the space: no factor level
    }
    means = factor_means(per)
    assert means["S"] == {"0": 1.0, "1": None, "2": -1.0}
    assert means["T"] == {"0": 0.0, "1": None, "2": None}


def test_rank_agreement_and_its_interval():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(spearman([1, 1, 1], [1, 2, 3]))
    probe = {"harnesses": {f"h{i}": {"per_token": -i / 10} for i in range(8)}}
    agreement = rank_agreement(probe, {f"h{i}": 1 - i / 10 for i in range(8)})
    assert agreement["spearman"] == pytest.approx(1.0) and agreement["harnesses"] == 8
    assert agreement["ci95"][0] <= agreement["spearman"] <= agreement["ci95"][1]
    with pytest.raises(ValueError, match="at least 3 harnesses"):
        rank_agreement(probe, {"h0": 1.0, "zz": 0.0})


def test_pass_at_1_per_harness_reads_one_bench_folder_per_class(tmp_path):
    """--compare takes a model's bench records of several classes (one results file each); an
    error is a failure and calibration roles are left out."""
    from harness_gym.replication.probe import bench_pass_at_1

    def write(name: str, rows: list[dict]) -> Path:
        path = tmp_path / name
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return path

    base = write("base.jsonl", [{"harness": "a", "passed": True}, {"harness": "a", "passed": False}])
    held = write(
        "heldout.jsonl",
        [{"harness": "b", "passed": True}, {"harness": "c", "outcome": "error"}, {"harness": "c", "role": "null"}],
    )
    assert bench_pass_at_1(f"{base},{held}") == {"a": 0.5, "b": 1.0, "c": 0.0}
    assert bench_pass_at_1([base]) == bench_pass_at_1(base) == {"a": 0.5}


@pytest.mark.slow
@requires_bwrap
def test_the_probe_cli_scores_smollm2_per_configuration(tmp_path, capsys):
    pytest.importorskip("transformers")
    from harness_gym.cli import main
    from harness_gym.model_export import export_model

    model = export_model(tmp_path / "model")
    out = tmp_path / "probe.json"
    argv = ["probe", "--model", str(model), "--configs", "S0T0O0C0W0,S2T2O2C2W2", "--out", str(out)]
    assert main([*argv, "--tasks", "ladder:1007#count=1,words=heldout,rungs=2"]) == 0
    result = json.loads(out.read_text())
    assert set(result["harnesses"]) == {"Harness-S0T0O0C0W0", "Harness-S2T2O2C2W2"}
    for figures in result["harnesses"].values():
        assert figures["per_token"] < 0 and all(t["tokens"] > 0 for t in figures["tasks"].values())
    assert set(result["factors"]) == set("STOCW")
    assert "nats/token" in out.with_suffix(".md").read_text()
    assert main(["probe", "--model", str(tmp_path), "--out", str(out)]) == 2  # not a model folder
    assert "no config.json" in capsys.readouterr().err
