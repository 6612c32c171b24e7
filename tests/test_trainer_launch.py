"""Datasets, recipes, the launch command, prompt order and training metrics."""

from __future__ import annotations

import json
import shlex
from collections import Counter, defaultdict
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from harness_gym.design import TRAINING_SET
from harness_gym.records import load_records
from harness_gym.space import HarnessConfig, hamming
from harness_gym.tasks import load_tasks
from trainers import dataset as ds
from trainers.launch import main
from trainers.launch_plan import RECIPES_DIR, RecipeError, load_recipe, plan
from trainers.metrics import main as metrics_main
from trainers.metrics import training_metrics
from trainers.openrlhf_args import FlagError, check_flags, openrlhf_parser
from trainers.ordering import is_schedule_dataset, ordered

RECIPES = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
needs_openrlhf = pytest.mark.skipif(
    __import__("importlib").util.find_spec("openrlhf") is None, reason="needs `pip install --no-deps openrlhf`"
)


def labels(rows):
    return [json.loads(r["label"]) for r in rows]


# ----------------------------------------------------------------------------- datasets


def test_schedule_rows_put_a_tasks_k_configurations_in_consecutive_steps():
    rows = ds.schedule_rows("builtin:train", tasks_per_step=4, k=2, seed=5)
    data = labels(rows)
    tasks = len(load_tasks("builtin:train"))
    assert len(rows) == tasks * 2  # every training task, once per slot
    by_task = defaultdict(list)
    for item in data:
        by_task[item["task_id"]].append(item)
    for items in by_task.values():
        steps = sorted(i["step"] for i in items)
        assert steps[1] == steps[0] + 1  # K = 2 consecutive steps
        anchor, neighbour = (HarnessConfig.parse(i["harness"]) for i in sorted(items, key=lambda i: i["slot"]))
        assert anchor in TRAINING_SET and neighbour in TRAINING_SET
        others = [c for c in TRAINING_SET if c != anchor]
        assert hamming(anchor, neighbour) == min(hamming(anchor, c) for c in others)  # its nearest neighbour
    # rows come in step order, and each step holds tasks_per_step rows (the last may be short)
    assert [d["step"] for d in data] == sorted(d["step"] for d in data)
    assert max(Counter(d["step"] for d in data).values()) == 4
    # the environment seed depends on the task and slot, not on the row's position
    assert len({d["seed"] for d in data}) == len(data)


def test_ablation_schedules_and_step_limits():
    repeat = labels(ds.schedule_rows("builtin:train", tasks_per_step=8, k=2, assignment="repeat"))
    per_task = defaultdict(set)
    for item in repeat:
        per_task[item["task_id"]].add(item["harness"])
    assert all(len(h) == 1 for h in per_task.values())  # Repeat-2: the anchor twice
    base = labels(ds.schedule_rows("builtin:train", tasks_per_step=8, k=1, training="base"))
    assert {b["harness"] for b in base} == {"S0T0O0C0W0"}
    limited = labels(ds.schedule_rows("builtin:train", tasks_per_step=4, k=2, epochs=3, max_steps=5))
    assert sorted({d["step"] for d in limited}) == [0, 1, 2, 3, 4]
    two_epochs = labels(ds.schedule_rows("builtin:train", tasks_per_step=10, k=2, epochs=2))
    tasks = len(load_tasks("builtin:train"))
    assert max(d["step"] for d in two_epochs) == 2 * 2 * -(-tasks // 10) - 1 and len(two_epochs) == 4 * tasks


def test_harness_and_grid_rows(tmp_path):
    rows = ds.harness_rows("builtin:train", "HarnessAdapt-H1", repeats=2, task_limit=3)
    assert [d["harness"] for d in labels(rows)] == ["HarnessAdapt-H1"] * 6
    grid = labels(ds.grid_rows("builtin:eval", ["heldout:2", "Harness-ClaudeCodeStyle"], task_limit=2))
    assert len(grid) == 3 * 2 and grid[-1]["harness"] == "Harness-ClaudeCodeStyle"
    with pytest.raises(ValueError, match="unknown"):
        ds.harness_rows("builtin:train", "HarnessAdapt-H9")


def test_the_dataset_cli_writes_rows_openrlhf_reads(tmp_path, capsys):
    out = tmp_path / "prompts.jsonl"
    assert ds.main(["--suite", "builtin:train", "--out", str(out), "--tasks-per-step", "6", "--seed", "1"]) == 0
    manifest = json.loads((tmp_path / "prompts.jsonl.manifest.json").read_text())
    tasks = len(load_tasks("builtin:train"))
    assert manifest["rows"] == 2 * tasks and manifest["tasks"] == tasks and manifest["steps"] == 2 * -(-tasks // 6)
    pytest.importorskip("datasets")
    prompts = pytest.importorskip("openrlhf.datasets.prompts_dataset")
    from openrlhf.datasets.utils import blending_datasets

    # OpenRLHF's own loading path: blending_datasets, then PromptDataset with our keys
    strategy = SimpleNamespace(
        print=lambda *a: None,
        is_rank_0=lambda: True,
        args=SimpleNamespace(
            use_ms=False, data=SimpleNamespace(input_key="prompt", label_key="label", apply_chat_template=False)
        ),
    )
    data = blending_datasets(str(out), None, strategy)
    dataset = prompts.PromptDataset(data, None, strategy)
    assert len(dataset) == 2 * tasks
    datasource, prompt, label, _ = dataset[0]
    assert datasource == "harness-gym" and prompt.startswith("[harness-gym] task")
    assert json.loads(label)["harness_gym"] == 1
    assert is_schedule_dataset(dataset)
    with pytest.raises(SystemExit) as stopped:
        ds.main(["--suite", "builtin:train", "--out", str(out), "--kind", "harness"])
    assert stopped.value.code == 2 and "--kind harness needs --harness" in capsys.readouterr().err
    assert ds.main(["--suite", "builtin:nope", "--out", str(out)]) == 2
    assert "error:" in capsys.readouterr().err


def test_schedule_datasets_keep_their_order_in_the_dataloader():
    """The worker hook's wrapper forces shuffle off for harness-gym datasets only."""
    from torch.utils.data import DataLoader

    class Strategy:  # the signature of DeepspeedStrategy.setup_dataloader, on a plain dataloader
        def setup_dataloader(self, dataset, batch_size, pin_memory=False, shuffle=True, collate_fn=None):
            return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, collate_fn=collate_fn)

    Strategy.setup_dataloader = ordered(Strategy.setup_dataloader)
    assert ordered(Strategy.setup_dataloader) is Strategy.setup_dataloader  # applying twice is harmless

    class Rows(list):
        labels: list

    rows = Rows(range(200))
    rows.labels = [json.dumps({"harness_gym": 1})] * 200
    in_order = [int(x) for batch in Strategy().setup_dataloader(rows, 1, True, True) for x in batch]
    assert in_order == list(range(200))
    rows.labels = ["42"] * 200
    shuffled = [int(x) for batch in Strategy().setup_dataloader(rows, 1, True, True) for x in batch]
    assert shuffled != list(range(200)) and sorted(shuffled) == list(range(200))


# ----------------------------------------------------------------------------- recipes and launch


@needs_openrlhf
@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_dry_runs_to_a_valid_command(name, capsys, tmp_path):
    assert main([name, "--dry-run", "--output-dir", str(tmp_path)]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ray job submit")]
    assert len(lines) == 1
    words = shlex.split(lines[0])
    runtime_env = json.loads(words[words.index("--runtime-env-json") + 1])
    settings = json.loads(runtime_env["env_vars"]["HARNESS_GYM_EXECUTOR"])
    assert settings["rollout_log"].startswith(str(tmp_path))
    argv = words[words.index("openrlhf.cli.train_ppo_ray") + 1 :]
    flags = vars(check_flags(argv))  # OpenRLHF's own parser accepts every word
    recipe = yaml.safe_load((RECIPES_DIR / f"{name}.yaml").read_text())
    assert flags["train.agent_func_path"] == "trainers/agent_func.py"
    assert flags["data.label_key"] == "label" and flags["data.input_key"] == "prompt"
    assert flags["algo.kl.init_coef"] == 0.0 and flags["actor.entropy_coef"] == 0.0  # no KL, no entropy
    assert flags["actor.adam.lr"] == 1e-6
    if recipe["algorithm"] == "grpo":
        assert flags["algo.advantage.estimator"] == "dr_grpo"  # group mean, no std normalisation
        assert flags["rollout.n_samples_per_prompt"] > 1
    else:
        assert flags["algo.advantage.estimator"] == "gae"
        assert flags["algo.advantage.gamma"] == flags["algo.advantage.lambd"] == 1.0
        assert flags["critic.adam.lr"] == 1e-5 and flags["critic.value_clip"] == 0.5
    if recipe["kind"] == "harness-scaling":
        assert flags["actor.eps_clip_low_high"] == [0.2, 0.28]
        assert runtime_env["worker_process_setup_hook"] == "trainers.ordering.keep_prompt_order"


def write_recipe(tmp_path, **changes):
    recipe = yaml.safe_load((RECIPES_DIR / "harness-scaling-grpo.yaml").read_text())
    for key, value in changes.items():
        section, _, name = key.partition("__")
        if name:
            recipe[section][name.replace("__", ".")] = value
        else:
            recipe[section] = value
    path = tmp_path / f"recipe-{len(list(tmp_path.glob('recipe-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


@needs_openrlhf
def test_bad_recipes_are_refused_before_anything_starts(tmp_path, capsys):
    cases = [
        (write_recipe(tmp_path, algorithm="sac"), "recipe schema"),
        (write_recipe(tmp_path, openrlhf__algo__advantage__estimator="gae"), "GRPO needs a group estimator"),
        (write_recipe(tmp_path, openrlhf__rollout__n_samples_per_prompt=1), "n_samples_per_prompt ≥ 2"),
        (write_recipe(tmp_path, openrlhf__train__agent_func_path="x.py"), "the launcher sets"),
        (write_recipe(tmp_path, openrlhf__rollout__batch_size=32), "must equal rollout.batch_size"),
        (write_recipe(tmp_path, openrlhf__actor__learning_rate=1e-6), "OpenRLHF has no flag --actor.learning_rate"),
        (write_recipe(tmp_path, openrlhf__ds__param_dtype="fp8"), "invalid choice: 'fp8'"),
        (write_recipe(tmp_path, openrlhf__ds__enable_sleep=False), "(ds.enable_sleep: true)"),
    ]
    for path, message in cases:
        assert main([str(path), "--dry-run"]) == 2, message
        assert message in capsys.readouterr().err
    assert main(["no-such-recipe", "--dry-run"]) == 2
    assert "packaged:" in capsys.readouterr().err


@needs_openrlhf
def test_overrides_and_the_plan(tmp_path):
    recipe = load_recipe("harness-scaling-grpo", ["openrlhf.rollout.batch_size=4", "dataset.tasks_per_step=4"])
    launch = plan(recipe, output_dir=tmp_path)
    assert launch.flags["rollout.batch_size"] == 4 and launch.recipe["dataset"]["tasks_per_step"] == 4
    assert launch.command()[:4] == ["ray", "job", "submit", "--address"]
    with pytest.raises(RecipeError, match="KEY=VALUE"):
        load_recipe("harness-scaling-grpo", ["oops"])
    with pytest.raises(FlagError, match=r"did you mean --actor\.adam\.lr"):
        check_flags(["--actor.adam.lrr", "1e-6"], openrlhf_parser())


# ----------------------------------------------------------------------------- metrics


def test_training_metrics_from_the_rollout_log(tmp_path, capsys):
    records = []
    for step, rewards in [(0, [1, 0, 1, 1]), (1, [0, 0, 0, 0])]:
        for i, reward in enumerate(rewards):
            records.append({"step": step, "slot": 0, "task_id": "t1", "harness": f"S{step}T0O0C0W0",
                            "reward": reward, "truncated": i == 3, "parse_errors": i, "steps": 3})  # fmt: skip
    log = tmp_path / "rollouts.jsonl"
    log.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"torn')
    metrics = training_metrics(load_records(log))
    step0, step1 = metrics["steps"]
    assert step0["pass_rate"] == 0.75 and step0["trainable_rate"] == 0.75  # 3 untruncated, mixed outcomes
    assert step1["trainable_rate"] == 0.0 and step1["group_shares"]["all_fail"] == 1.0
    assert metrics["overall"]["pass_rate_by_harness"] == {"S0T0O0C0W0": 0.75, "S1T0O0C0W0": 0.0}
    assert metrics["overall"]["parse_errors_per_episode"] == 1.5
    out, png = tmp_path / "m.json", tmp_path / "m.png"
    assert metrics_main([str(log), "--out", str(out), "--plot", str(png)]) == 0
    assert json.loads(out.read_text())["overall"]["rollouts"] == 8
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "pass 0.375" in capsys.readouterr().out
    assert metrics_main([str(Path(tmp_path) / "missing.jsonl")]) == 2


def readme_launch_commands() -> list[list[str]]:
    """The ``python -m trainers.launch`` commands of README's replication GPU block, as argv lists."""
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Replicating the specialisation gap") :]
    block = section[section.index("**On GPUs**") :].split("```bash", 1)[1].split("```", 1)[0]
    joined = block.replace("\\\n", " ")
    commands = [shlex.split(line, comments=True) for line in joined.splitlines()]
    return [words[3:] for words in commands if words[:3] == ["python", "-m", "trainers.launch"]]


def test_the_readme_gpu_arms_pass_their_real_dataset_step(tmp_path):
    """README's arm-A command once passed ``--dry-run`` but failed at the dataset step (locality
    assignment over the single base configuration): each command's dataset is built for real here."""
    commands = readme_launch_commands()
    assert len(commands) == 2
    trained = []
    for argv in commands:
        sets = [argv[i + 1] for i, word in enumerate(argv) if word == "--set"]
        recipe = load_recipe(argv[0], sets)
        launch = plan(recipe, output_dir=tmp_path / "run", check=False)
        settings = {**launch.recipe["dataset"], "max_steps": 4}  # the first batch's steps suffice
        rows = ds.build(settings)
        assert len(rows) == 4 * settings["tasks_per_step"]
        trained.append({lab["harness"] for lab in labels(rows)})
    assert len(trained[0]) == 1 and len(trained[1]) > 1  # arm A: the base harness only; arm B: several


def test_locality_over_a_single_configuration_is_refused_at_load():
    with pytest.raises(RecipeError, match=r"dataset\.assignment=repeat"):
        load_recipe("harness-scaling-grpo", ["dataset.training_set=base"])
    load_recipe("harness-scaling-grpo", ["dataset.training_set=base", "dataset.assignment=repeat"])
