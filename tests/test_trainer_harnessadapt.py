"""The HarnessAdapt-RL loop across epochs: prep rollouts, skills, evolution with acceptance, then a
training epoch on the selected harness from the last model; the audit log and the final pair."""

from __future__ import annotations

import contextlib
import itertools
import json

import pytest
import yaml
from conftest import requires_bwrap

from harness_gym.agents import NullAgent, ReferenceAgent
from harness_gym.evolution import ScriptedProposer
from harness_gym.llm_client import ChatClient
from harness_gym.presets import load_preset
from harness_gym.skills import SkillTeacher
from harness_gym.spec import load_spec
from trainers.harnessadapt import PrintingEpochTrainer, harnessadapt_loop
from trainers.launch import main
from trainers.launch_plan import load_recipe

pytestmark = [
    requires_bwrap,
    pytest.mark.skipif(
        __import__("importlib").util.find_spec("openrlhf") is None, reason="needs `pip install --no-deps openrlhf`"
    ),
]
SKILL = (
    "When a change seems complete, run the project's own checks before declaring success, because a passing "
    "check is the only evidence the grader will accept and an unverified edit often misses a second case."
)


def budget(steps):
    return {**load_preset("HarnessAdapt-H0")["budget"], "max_steps": steps}


class CountingTrainer(PrintingEpochTrainer):
    """Prints each epoch's job like --dry-run and names a new model per epoch, as a real job would."""

    def train(self, epoch, launch):
        super().train(epoch, launch)
        return f"{launch.output_dir}/model"


def test_the_loop_evolves_trains_and_writes_the_model_harness_pair(tmp_path, chat_server):
    start = tmp_path / "h0-tight.yaml"
    start.write_text(yaml.safe_dump({"extends": "harnessadapt_h0", "name": "h0-tight", "budget": budget(1)}))
    recipe = load_recipe(
        "harnessadapt-grpo",
        [f"evolution.initial_harness={start}", "evolution.epochs=2", "evolution.rounds=2",
         "evolution.comparison_tasks=2", "evolution.prep_rollouts_per_task=2",
         "evolution.comparison_rollouts_per_task=2", "dataset.suite=builtin:train", "executor.sandbox=bubblewrap",
         "executor.max_steps=null", "dataset.task_limit=4"],
    )  # fmt: skip
    served = []

    @contextlib.contextmanager
    def serve_policy(model):
        served.append(model)
        agents = itertools.cycle([ReferenceAgent, NullAgent])  # one success, one failure per task group
        yield lambda: next(agents)()

    proposer = ScriptedProposer(
        [
            {"add_hooks": ["test_reminder"]},  # epoch 1: changes nothing measurable: rejected
            {"set": {"budget": budget(12)}},  # epoch 1: the policy can now finish: accepted
            {"set": {"budget": budget(1)}},  # epoch 2: pass rate would drop: rejected
        ]
    )
    chat_server["replies"] += [SKILL] * 4
    teacher = SkillTeacher(ChatClient(chat_server["url"], "teacher", retries=0))
    trainer = CountingTrainer(echo=lambda line: None)
    pair = harnessadapt_loop(
        recipe, output_dir=tmp_path / "run", serve_policy=serve_policy, proposer=proposer, trainer=trainer,
        skill_teacher=teacher, echo=lambda line: None,
    )  # fmt: skip

    audit = [json.loads(line) for line in (tmp_path / "run" / "audit.jsonl").read_text().splitlines()]
    assert [(e["epoch"], e["round"], e["decision"]) for e in audit] == [
        (1, 1, "rejected"), (1, 2, "accepted"), (2, 1, "rejected"), (2, 2, "rejected"),
    ]  # fmt: skip
    assert "neither rate rose" in audit[0]["reason"] and "pass rate dropped" in audit[2]["reason"]
    assert "no proposals left" in audit[3]["reason"]
    assert audit[1]["rates"]["candidate"]["pass_rate"] > audit[1]["rates"]["current"]["pass_rate"]

    # each epoch trains from the model the previous epoch produced, on that epoch's selected harness
    first, second = trainer.launches
    assert served == [recipe["model"], f"{first.output_dir}/model"]
    assert first.flags["actor.model_name_or_path"] == recipe["model"]
    assert second.flags["actor.model_name_or_path"] == f"{first.output_dir}/model"
    epoch1 = load_spec(tmp_path / "run" / "epoch-1" / "harness.yaml")
    epoch2 = load_spec(tmp_path / "run" / "epoch-2" / "harness.yaml")
    assert first.recipe["dataset"]["harness"].endswith("epoch-1/harness.yaml")
    assert epoch1["budget"]["max_steps"] == 12
    assert epoch1["skills"] == epoch2["skills"] == [SKILL]  # shown in training, written afresh each epoch
    assert len(chat_server["requests"]) == 4  # one skill per comparison task and epoch

    # the deliverable: the last model and the harness with skills removed (tools and hooks stay)
    final = json.loads((tmp_path / "run" / "final" / "pair.json").read_text())
    assert final["model"] == pair.model == f"{second.output_dir}/model"
    evaluation = load_spec(pair.harness_path)
    assert not evaluation.get("skills") and evaluation["budget"]["max_steps"] == 12
    assert [t["name"] for t in evaluation["tools"]] == [t["name"] for t in epoch2["tools"]]
    assert [e["epoch"] for e in final["epochs"]] == [1, 2]


def test_harnessadapt_dry_run_prints_the_first_epoch(capsys):
    assert main(["harnessadapt-grpo", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "# epoch 1: serve the policy: vllm serve Qwen/Qwen3.5-9B --port 8011" in out
    assert "--kind harness" in out and "epoch-1/harness.yaml" in out
    assert "openrlhf.cli.train_ppo_ray" in out and "--algo.advantage.estimator dr_grpo" in out
