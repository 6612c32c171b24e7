"""Replicate Harness Scaling's specialisation gap on a laptop, end to end, in one command.

    python -m benchmarks.replication [--small] [--out DIR] [--work DIR]

1. data: reference-agent trajectories on easy tasks (``generated-easy``, training templates, seed
   7), exported with per-message train masks; arm A in the base harness S0T0O0C0W0 only, arm B over
   the 18 OA training configurations (locality-aware, K=2); equal trajectories and trained tokens;
2. training: SFT of SmolLM2-135M (the packaged GGUF, exported to transformers) per arm, on CPU;
3. evaluation with ``harness-gym bench``'s runner: the untrained model and both checkpoints on the
   base harness, the training and the held-out configurations, on fresh task seeds (1007);
4. results.json, report.md and plots in ``--out`` (default ``benchmarks/results/replication``;
   ``--small`` writes to ``benchmarks/results/replication-small``). Checkpoints and bench records
   go to ``--work`` (default ``replication-work``, kept out of git); a rerun resumes from them.

``--small`` finishes in about ten minutes on two quiet cores, the full profile in about an hour.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from harness_gym.design import TRAINING_SET, heldout_set
from harness_gym.records import HarnessChoice, classify_config
from harness_gym.replication.data import ARMS, build_arm_pools, easy_suite, equalise, evaluation_tasks
from harness_gym.replication.evaluate import model_summary, run_bench
from harness_gym.replication.report import model_entry, pct, write_outputs
from harness_gym.replication.sft import TrainConfig, default_threads, tokenize_row, train
from harness_gym.space import BASE_CONFIG, HarnessConfig
from harness_gym.tasks import load_tasks


@dataclass(frozen=True)
class Profile:
    """Everything that sizes a run; saved in results.json."""

    name: str
    train_seed: int = 7
    pool_tasks: int = 72  # training tasks recorded per arm; each arm keeps tasks_per_arm of them
    tasks_per_arm: int = 48  # x K=2 trajectories per arm
    schedule_seed: int = 0
    eval_seed: int = 1007
    eval_tasks: int = 3  # per training / held-out configuration
    eval_tasks_base: int = 16  # on the base harness (the gap's first term)
    training_configs: int = 17  # of the 17 training configurations besides the base one
    heldout_configs: int = 18
    max_steps: int = 2  # a call and a finish; a truncated episode is graded as it stands
    untrained_everywhere: bool = True  # False: the untrained model only in the base harness (it makes no calls)
    max_new_tokens: int = 96
    train: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=1, learning_rate=1e-4, trainable_layers=10))


PROFILES = {
    "full": Profile("full"),
    "small": Profile(
        "small",
        pool_tasks=12,
        tasks_per_arm=8,
        eval_tasks=2,
        eval_tasks_base=4,
        training_configs=1,
        heldout_configs=2,
        untrained_everywhere=False,
        train=TrainConfig(epochs=1, learning_rate=1e-4, trainable_layers=8),
    ),
}


class Stages:
    """The progress display: one line per stage with the time it took, the elapsed total."""

    def __init__(self, total: int) -> None:
        self.total, self.index, self.started = total, 0, time.perf_counter()
        self.times: dict[str, float] = {}
        self._current: tuple[str, float] | None = None

    def start(self, name: str) -> None:
        self.finish()
        self.index += 1
        print(f"[{self.index}/{self.total}] {name} (t={time.perf_counter() - self.started:.0f}s)", flush=True)
        self._current = (name, time.perf_counter())

    def finish(self) -> None:
        if self._current is not None:
            name, began = self._current
            self.times[name] = time.perf_counter() - began
            print(f"      done in {self.times[name]:.0f}s", flush=True)
            self._current = None


def evaluation_harnesses(profile: Profile) -> tuple[HarnessChoice, list[HarnessChoice]]:
    """(the base harness, the training and held-out configurations) the bench runs."""

    def choice(config: HarnessConfig) -> HarnessChoice:
        return HarnessChoice(config.env_id, classify_config(config), config.code)

    others = [c for c in TRAINING_SET if c != BASE_CONFIG][: profile.training_configs]
    return choice(BASE_CONFIG), [choice(c) for c in [*others, *list(heldout_set())[: profile.heldout_configs]]]


def run(profile: Profile, out: Path, work: Path, progress: bool = True) -> dict[str, Any]:
    """The whole pipeline; returns the results written to ``out``."""
    import torch

    from harness_gym.model_export import export_model

    threads = profile.train.threads or default_threads()
    torch.set_num_threads(threads)
    work.mkdir(parents=True, exist_ok=True)
    (work / ".gitignore").write_text("# replication work files (checkpoints, bench records): not for git\n*\n")
    stages = Stages(7)

    stages.start("export the packaged SmolLM2-135M-Instruct to transformers format")
    base_model = work / "model-untrained"
    if not (base_model / "config.json").exists():
        export_model(base_model, force=True)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base_model))

    stages.start("record reference trajectories and export them with train masks")
    suite = easy_suite(profile.train_seed, profile.pool_tasks)
    pools, task_ids = build_arm_pools(
        suite, lambda row: tokenize_row(row, tokenizer), schedule_seed=profile.schedule_seed, workdir=work
    )
    arms = equalise(pools, task_ids, profile.tasks_per_arm)
    data = {name: arm.summary() for name, arm in arms.items()}
    for name, figures in data.items():
        print(f"      {name}: {figures['trajectories']} trajectories, {figures['trained_tokens']} trained tokens "
              f"({figures['trimmed_tokens']} trimmed), {len(figures['harnesses'])} harnesses")  # fmt: skip

    checkpoints = {"untrained": base_model}
    training: dict[str, Any] = {}
    for name in ARMS:
        stages.start(f"SFT of arm {name} ({data[name]['trajectories']} trajectories)")
        folder = work / f"model-{name}"
        checkpoints[name] = folder
        training[name] = _train_or_reuse(base_model, arms[name].examples, folder, profile.train, progress)

    training_tasks = load_tasks(suite)
    base_suite = easy_suite(profile.eval_seed, profile.eval_tasks_base)
    eval_all, dropped = evaluation_tasks(base_suite, training_tasks)
    base_choice, others = evaluation_harnesses(profile)
    eval_tasks = eval_all[: profile.eval_tasks]
    models: dict[str, Any] = {}
    for label, folder in checkpoints.items():
        configs = others if label != "untrained" or profile.untrained_everywhere else []
        stages.start(
            f"bench {label}: base x {len(eval_all)} tasks, {len(configs)} configurations x {len(eval_tasks)} tasks"
        )
        common: dict[str, Any] = {"seed": profile.eval_seed, "max_steps": profile.max_steps, "max_new_tokens": profile.max_new_tokens, "label": label, "progress": progress}  # fmt: skip
        records = run_bench(folder, [base_choice], eval_all, work / "bench" / label / "base", **common)
        if configs:
            records += run_bench(folder, configs, eval_tasks, work / "bench" / label / "configs", **common)
        models[label] = model_entry(model_summary(records))
        figures = models[label]
        print(f"      {label}: Pass@1 base {pct(figures['classes']['base']['pass_at_1'])}%, held-out "
              f"{pct(figures['classes']['heldout']['pass_at_1'])}%, gap {pct(figures['gap']['gap'])} points")  # fmt: skip
    stages.finish()
    results = {
        "profile": {**asdict(profile), "threads": threads},
        "base_harness": BASE_CONFIG.code,
        "suites": {
            "training": suite,
            "evaluation": f"{base_suite} (first {profile.eval_tasks} per configuration)",
            "evaluation_base": base_suite,
            "dropped_duplicates": dropped,
        },
        "data": data,
        "training": {k: {key: v for key, v in log.items() if key != "losses"} for k, log in training.items()},
        "models": models,
        "timings_s": stages.times,
        "command": "python -m benchmarks.replication" + (" --small" if profile.name == "small" else ""),
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    paths = write_outputs(results, out)
    print("wrote " + ", ".join(str(p) for p in paths))
    return results


def _train_or_reuse(
    base_model: Path, examples: list[Any], folder: Path, config: TrainConfig, progress: bool
) -> dict[str, Any]:
    """Train, unless ``folder`` holds a checkpoint of this very run (same settings and data)."""
    from tqdm import tqdm

    log_path = folder / "train_log.json"
    if log_path.exists():
        log = json.loads(log_path.read_text(encoding="utf-8"))
        settings = {k: v for k, v in asdict(config).items() if k != "threads"}  # threads change no result
        recorded = {k: v for k, v in log.get("config", {}).items() if k != "threads"}
        if recorded == settings and log.get("trained_tokens") == sum(e.trained_tokens for e in examples):
            print("      reusing the checkpoint of a previous run with the same settings")
            return log
    with tqdm(total=config.epochs * len(examples), desc="sft", unit="step", disable=not progress) as bar:

        def on_step(step: int, total: int, loss: float) -> None:
            bar.update()
            bar.set_postfix(loss=f"{loss:.3f}", refresh=False)

        return train(base_model, examples, folder, config, on_step)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", action="store_true", help="the ~10-minute profile")
    parser.add_argument("--out", type=Path, help="where results.json, report.md and the plots go")
    parser.add_argument("--work", type=Path, default=Path("replication-work"), help="checkpoints and bench records")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: the cores idle at the start)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    profile = PROFILES["small" if args.small else "full"]
    if args.threads:
        profile = replace(profile, train=replace(profile.train, threads=args.threads))
    out = args.out or Path("benchmarks/results") / ("replication-small" if args.small else "replication")
    run(profile, out, args.work / profile.name, progress=not args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
