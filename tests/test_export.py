"""`harness-gym export prompts|sft`: datasets that TRL, OpenRLHF and SkyRL read as they are, and
SFT conversations whose train mask TRL's SFTTrainer applies."""

from __future__ import annotations

import copy
import importlib.util
import json

import pytest
from conftest import requires_bwrap

from harness_gym.cli import main
from harness_gym.env import HarnessEnv
from harness_gym.export import sft_rows
from harness_gym.records import write_trajectory
from harness_gym.rollout_requests import RolloutRequest

pytestmark = requires_bwrap
TASK = "workspace-sort-unique"


def test_export_prompts_rows_load_in_datasets_openrlhf_and_the_adapters(tmp_path, tokenizer):
    out = tmp_path / "prompts.jsonl"
    assert main(["export", "prompts", "--tasks", "builtin:train", "--harnesses", "S0T0O0C0W0,S2T2O1C1W0",
                 "--task-limit", "2", "--repeats", "2", "--out", str(out)]) == 0  # fmt: skip
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 2 * 2 * 2 and len({r["seed"] for r in rows}) == 4  # seeds per (task, repeat)
    datasets = pytest.importorskip("datasets")
    loaded = datasets.load_dataset("json", data_files=str(out), split="train")
    assert loaded.num_rows == 8 and loaded[0]["prompt"][0]["role"] == "system"
    for row in rows:
        request = RolloutRequest.from_label(row["label"])  # what the OpenRLHF executor reads
        assert (request.task_id, request.harness, request.seed) == (row["task_id"], row["harness"], row["seed"])
        env = HarnessEnv(row["harness"], tasks="builtin:train")
        observation, _ = env.reset(seed=row["seed"], options={"task_id": row["task_id"]})
        assert [m["content"] for m in row["prompt"]] == [m["content"] for m in observation["messages"]]
        env.close()
    if importlib.util.find_spec("openrlhf") is not None:
        from openrlhf.datasets.prompts_dataset import preprocess_data

        text, label = preprocess_data(
            rows[0], input_key="prompt", label_key="label", apply_chat_template=tokenizer.apply_chat_template
        )
        assert (
            label == rows[0]["label"]
            and rows[0]["prompt"][1]["content"] in text
            and text.endswith("<|im_start|>assistant\n")
        )
    if importlib.util.find_spec("trl") is not None:
        from harness_gym.integrations.trl import environment_factory

        assert environment_factory("S0T0O0C0W0")().reset(**loaded[0]) is None  # TRL passes the row as is


def test_export_prompts_fails_clearly_on_a_bad_harness(tmp_path, capsys):
    assert main(["export", "prompts", "--harnesses", "S9T0O0C0W0", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "S9T0O0C0W0" in capsys.readouterr().err


def _trajectory(tmp_path, config: str, pad: int, name: str):
    """Run the reference agent (after ``pad`` shell calls) and write the trajectory as bench does."""
    from test_integrations import Policy

    env = HarnessEnv(config, tasks="builtin")
    observation, info = env.reset(seed=4, options={"task_id": TASK})
    infos = [info]
    policy = Policy(env, pad)
    while True:
        observation, reward, terminated, truncated, info = env.step(policy.act())
        infos.append(info)
        if terminated or truncated:
            break
    header = {"harness": f"Harness-{config}", "task_id": TASK, "seed": 4, "reward": reward,
              "spec_hash": infos[0]["spec_hash"], "run": 0}  # fmt: skip
    path = tmp_path / f"{name}.jsonl"
    write_trajectory(path, header, env.transcript, infos)
    env.close()
    return path, infos


def test_export_sft_masks_the_policy_and_stops_at_a_context_rewrite(tmp_path):
    plain, _ = _trajectory(tmp_path, "S0T0O0C0W1", 0, "plain")
    compressed, infos = _trajectory(tmp_path, "S0T0O0C2W0", 6, "compressed")
    out = tmp_path / "sft.jsonl"
    assert main(["export", "sft", str(tmp_path), "--out", str(out)]) == 0
    rows = {r["harness"]: r for r in map(json.loads, out.read_text().splitlines())}
    row = rows["Harness-S0T0O0C0W1"]
    assert not row["context_truncated"] and row["reward"] == 1.0
    assert [m["train"] for m in row["messages"]] == [m["role"] == "assistant" for m in row["messages"]]
    assert "Plan:" in next(m["content"] for m in row["messages"] if m["train"])
    assert "<tools>" in row["messages"][0]["content"]  # the tools as the policy saw them
    cut = rows["Harness-S0T0O0C2W0"]
    first_reset = next(i["step"] for i in infos[1:] if i["context_reset"])
    assert cut["context_truncated"] and sum(m["train"] for m in cut["messages"]) == first_reset
    rows_openai, skipped = sft_rows([plain], tool_format="openai")
    assert skipped == 0 and rows_openai[0]["tools"] and rows_openai[0]["messages"][-1]["role"] == "tool"


def test_sft_trainer_trains_only_on_the_policy_messages(tmp_path, tokenizer):
    trl = pytest.importorskip("trl")
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, LlamaConfig
    from trl.chat_template_utils import qwen2_5_chat_template

    path, _ = _trajectory(tmp_path, "S0T0O0C0W0", 0, "plain")
    rows, _ = sft_rows([path])
    tokenizer = copy.deepcopy(tokenizer)  # the module's tokenizer keeps its own template
    tokenizer.chat_template = qwen2_5_chat_template  # ChatML with tool support; SmolLM2 shares the tokens
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=4096)  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config)
    args = trl.SFTConfig(output_dir=str(tmp_path / "sft"), max_steps=1, per_device_train_batch_size=1,
                         assistant_only_loss=True, use_cpu=True, report_to=[], save_strategy="no", max_length=4096)  # fmt: skip
    trainer = trl.SFTTrainer(model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    example = trainer.train_dataset[0]
    # TRL folds the assistant mask into the labels: -100 on every token left out of the loss
    trained = tokenizer.decode(
        [t for t, label in zip(example["input_ids"], example["labels"], strict=True) if label != -100]
    )
    policy = [m["content"] for m in rows[0]["messages"] if m["train"]]
    assert all(text.strip() in trained for text in policy)
    assert (
        sum(label != -100 for label in example["labels"]) < len(example["input_ids"]) / 2
    )  # tool output, prompt: not trained
    result = trainer.train()
    assert result.training_loss > 0
