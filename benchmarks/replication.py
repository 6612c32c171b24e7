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

``--estimate`` prints a profile's cost from rates measured on this machine (``estimate_cost``):
the full profile 2.6 h at the load of those measurements (1-5 on 2 cores, one torch thread), SFT
66 min of it, every trained episode costed as a loop to ``max_steps``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from harness_gym.design import TRAINING_SET, heldout_set
from harness_gym.records import HarnessChoice, classify_config, harness_choice, resolve_harnesses
from harness_gym.replication.data import (
    ARM_SPECS,
    ArmData,
    K,
    easy_suite,
    equalise_same_tasks,
    evaluation_tasks,
    ladder_suite,
    record_arm_pools,
)
from harness_gym.replication.evaluate import (
    acted_effects,
    bench_wall_seconds,
    class_figures,
    model_summary,
    over_seeds,
    run_bench,
)
from harness_gym.replication.report import model_entry, pct, write_outputs
from harness_gym.replication.sft import TrainConfig, default_threads, tokenize_row, train
from harness_gym.space import BASE_CONFIG, HarnessConfig
from harness_gym.tasks import Task, load_tasks

CORE_CLASSES = ("base", "training", "heldout")  # the gap's classes; the others are reported apart


@dataclass(frozen=True)
class Profile:
    """Everything that sizes a run; saved in results.json."""

    name: str
    suite: str = "ladder"  # "ladder" (harness_gym/tasks/ladder.py) or "easy" (generated-easy)
    train_seed: int = 7
    pool_tasks: int = 48  # training tasks drawn; every arm keeps the same first tasks_per_arm
    tasks_per_arm: int = 32  # x 2 trajectories per arm
    arms: tuple[str, ...] = ("base", "oa18")  # names in harness_gym.replication.data.ARM_SPECS
    training_seeds: tuple[int, ...] = (0, 1, 2)  # SFT seed and data order of each training run
    schedule_seed: int = 0
    eval_seed: int = 1007
    eval_tasks: int = 2  # per training / held-out configuration (and per renamed / preset harness)
    eval_tasks_base: int = 12  # on the base harness (the gap's first term)
    untrained_tasks: int = 0  # the untrained model's base-harness tasks (0: eval_tasks_base)
    eval_tasks_heldout_templates: int = 3  # held-out templates: base harness and the first template_configs
    template_configs: int = 6  # held-out configurations the held-out templates run in
    training_configs: int = 8  # of the 17 training configurations besides the base one
    heldout_configs: int = 18
    renamed: int = 9  # the first N held-out configurations again with resampled tool names (0: none)
    presets: tuple[str, ...] = ("Harness-ClaudeCodeStyle", "Harness-OpenClawStyle")
    # real CLIs whose prompts fit the model's context (about 1.4k tokens a request; issue 26's table),
    # the checkpoint behind them through harness-gym's model server: the out-of-space class
    externals: tuple[str, ...] = ("external:claude-code-bare", "external:mini-swe-agent")
    max_steps: int = 16  # the ladder's upper rungs take 6 or more; a truncated episode is graded as it stands
    # The untrained model makes no tool call in any harness (it answers in prose), so beyond the
    # base harness its episodes would measure nothing; True runs them.
    untrained_everywhere: bool = False
    # The reference's longest reply on the ladder is 206 tokens (its first turn: a plan of every
    # step, then the call; measured 2026-12-02 over the small profile's 128 policy turns, p90 118):
    # a cap below that cuts a faithful imitation off before its call.
    max_new_tokens: int = 256
    # the untrained model answers every turn in prose and never calls a tool, so its replies run to
    # the cap: 96 tokens show that as well as 256 at less than half the cost
    untrained_max_new_tokens: int = 96
    bench_workers: int = 4  # episodes run at once, their model calls decoded as one batch
    # the first N training seeds are evaluated in every class, the later ones in the core classes
    # only (CORE_CLASSES: the gap's, whose intervals over seeds the report gives); 0: every seed
    full_eval_seeds: int = 0
    train: TrainConfig = field(default_factory=lambda: TrainConfig(epochs=1, learning_rate=1e-4, trainable_layers=10))


PROFILES = {
    # Sized by estimate_cost's measured rates (2026-12-03, load 1-5): 2.6 h, costing every
    # trained episode as a failure looping to max_steps (arm A's base-harness episodes in the
    # check run took a quarter of that bound); SFT is 66 min of it. 10 steps: 2 above the ladder's
    # longest reference episode (8 turns). 8 episodes decoded together (a batch of 8 costs a
    # forward pass little more than 4). The first training seed runs every class with one task
    # per configuration; seeds 1 and 2 the core classes (base, training, held-out) only, so the
    # intervals over seeds are the gap's; the untrained model (prose, 0% in every run) 2 tasks.
    "full": Profile(
        "full",
        max_steps=10,
        bench_workers=8,
        full_eval_seeds=1,
        eval_tasks=1,
        eval_tasks_base=6,
        untrained_tasks=2,
        training_configs=4,
        heldout_configs=9,
        renamed=3,
        template_configs=2,
        eval_tasks_heldout_templates=2,
    ),
    "small": Profile(
        "small",
        pool_tasks=12,
        tasks_per_arm=8,
        training_seeds=(0,),
        eval_tasks=1,
        eval_tasks_base=4,
        eval_tasks_heldout_templates=2,
        template_configs=1,
        training_configs=1,
        heldout_configs=2,
        renamed=0,
        presets=(),
        externals=(),  # about 4 minutes an episode behind a CLI on the loaded cores: full profile only
        max_steps=8,
        # 1 epoch at 1e-4 (16 steps) left arm A at 0% in its own harness (2026-12-02: the call
        # format learned, tool names and arguments not): 3 epochs at 3e-4
        train=TrainConfig(epochs=3, learning_rate=3e-4, trainable_layers=8),
    ),
    # a timed run of every in-process stage in minutes, to check estimate_cost against (arm A only:
    # the costly arm, failing outside its harness; no real CLI, whose installs a fresh machine lacks)
    "check": Profile(
        "check",
        arms=("base",),
        pool_tasks=12,
        tasks_per_arm=8,
        training_seeds=(0,),
        eval_tasks=1,
        eval_tasks_base=4,
        untrained_tasks=2,
        eval_tasks_heldout_templates=1,
        template_configs=1,
        training_configs=2,
        heldout_configs=4,
        renamed=2,
        presets=("Harness-ClaudeCodeStyle",),
        externals=(),
        max_steps=12,
        train=TrainConfig(epochs=3, learning_rate=3e-4, trainable_layers=8),
    ),
    # the paper's ablation rows: random-18 vs OA18, K=1, K=4 and the single-configuration h1
    "ablation": Profile(
        "ablation",
        arms=("base", "oa18", "random18", "oa18-k1", "oa18-k4", "h1"),
        renamed=0,
        pool_tasks=64,
        max_steps=12,
        untrained_tasks=4,
    ),
    # the profile of the committed 2026-11-30 figures: one-call easy tasks (it saturates)
    "easy": Profile(
        "easy",
        suite="easy",
        training_seeds=(0,),
        eval_tasks_heldout_templates=0,
        renamed=0,
        presets=(),
        externals=(),
        max_steps=2,
        max_new_tokens=96,  # one-call replies
        pool_tasks=72,
        tasks_per_arm=48,
        eval_tasks=3,
        eval_tasks_base=16,
        training_configs=17,
    ),
}

# Rates measured 2026-12-03 14:50-15:28 UTC on this machine's 2 cores, never quiet then (load
# 1-5 from other work), with 1 torch thread (default_threads at that load): wall seconds. Decode
# and prefill: benchmarks/hf_decode.py (benchmarks/results/hf_decode.json: 1 thread at load
# 1.0-2.1 on real bench prompts of 1.0-1.4k tokens; 2 threads were no faster at that load).
# Env, SFT and episode shapes: the `check` profile's run (load 3-5). Checked against that run:
# arm A's base class (4 episodes of 3 turns, 67 tokens a reply) 64 s measured, 55 s from these
# rates; the untrained bench (2 episodes of 12 turns) 183 s measured, 118 s: at load 3-5 the
# rates of load 1-2 ran 15-35% fast. The trained episodes' loop bound (every one to max_steps)
# is the margin: arm A's base class took a quarter of it.
PREFILL_S_PER_KTOKEN = 3.51  # a prompt prefilled from an empty cache
# one forward pass of a batch of that many rows at ~1.7k tokens of context (the bench's decode step)
DECODE_STEP_S = {1: 0.057, 4: 0.111, 8: 0.193}
ENV_STEP_S = 0.2  # one env step beyond the model (sandboxed tool call, observation): 0.7 s for 3
EPISODE_S = 0.5  # an episode's own cost beyond its steps (reset, grading): 16 reference episodes 9 s
SFT_S_PER_KTOKEN = 6.5  # per epoch: 417 s for arm A's 16 trajectories x 3 epochs (top 8 layers)
# a turn behind a real CLI: the model server prefills the whole request (~2k tokens, no prefix
# cache) and decodes alone (generate: 71 ms a token at batch 1, load 3.4); not run end to
# end here (no CLI installed on a fresh machine)
EXTERNAL_TURN_S = 2.0 * PREFILL_S_PER_KTOKEN + 67 * 0.071
# Episode shapes (measured 2026-12-02 over the small profile's 128 reference policy turns):
REPLY_TOKENS = 58  # the reference's mean reply on the ladder (the longest 206)
FIRST_PROMPT_TOKENS = 1700  # a harness's first prompt (system prompt, tool descriptions, task)
TURN_TOKENS = 80  # what a later step adds to the prompt beyond the reply (a tool result, markers)
# a failing trained model's mean reply (tokens), looping to ``max_steps``: measured in the check run
LOOP_REPLY_TOKENS = 67.0  # arm A's mean reply in the check run (808 tokens over 12 turns)
TRAJECTORY_TOKENS = {"base": 1333}  # mean tokens of a trajectory in the base harness; other arms:
OTHER_TRAJECTORY_TOKENS = 1856  # the 18 OA configurations' mean (longer system prompts and tool lists)


def mean_turns(profile: Profile) -> float:
    """The reference solution's mean turns (calls plus the finish) over the profile's training tasks."""
    tasks = load_tasks(training_suite(profile))
    return sum(len(t.solution) + 1 for t in tasks) / len(tasks)


def decode_step_s(batch: float) -> float:
    """One batched forward pass, interpolated between the measured batch sizes."""
    sizes = sorted(DECODE_STEP_S)
    batch = min(max(batch, sizes[0]), sizes[-1])
    low = max(s for s in sizes if s <= batch)
    high = min(s for s in sizes if s >= batch)
    if low == high:
        return DECODE_STEP_S[low]
    share = (batch - low) / (high - low)
    return DECODE_STEP_S[low] + share * (DECODE_STEP_S[high] - DECODE_STEP_S[low])


def episode_s(turns: float, reply: float, batch: float) -> float:
    """Wall seconds an episode adds to its bench when ``batch`` episodes decode together: its share
    of every batched forward pass, the prefill of its first prompt and of what each later turn
    adds, its env steps."""
    decode = turns * reply * decode_step_s(batch) / batch
    prefill = (FIRST_PROMPT_TOKENS + (turns - 1) * (reply + TURN_TOKENS)) / 1000 * PREFILL_S_PER_KTOKEN
    return decode + prefill + turns * ENV_STEP_S + EPISODE_S


def bench_estimate_s(profile: Profile, *, trained: bool, seed_index: int = 0) -> float:
    """One model's bench, in wall seconds on two quiet cores. Every trained episode is costed as a
    failure that loops to ``max_steps`` turns of ``LOOP_REPLY_TOKENS``, an upper bound for arm A
    outside its harness and above what a model that solves its tasks costs; the untrained model
    answers every turn in prose to its reply cap and never finishes. Each class is a bench of its
    own (batches no larger than its episodes); real CLIs run one episode at a time."""
    total = 0.0
    for run_ in eval_runs(profile, trained=trained, seed_index=seed_index):
        episodes = len(run_.harnesses) * run_.count
        if run_.klass == "external":
            total += episodes * (profile.max_steps * EXTERNAL_TURN_S + EPISODE_S)
            continue
        reply = LOOP_REPLY_TOKENS if trained else profile.untrained_max_new_tokens
        total += episodes * episode_s(profile.max_steps, reply, min(profile.bench_workers, episodes))
    return total


def estimate_cost(profile: Profile) -> dict[str, float]:
    """Estimated wall seconds per stage kind on two quiet cores, from the rates above."""
    trajectories = profile.tasks_per_arm * 2
    seeds = len(profile.training_seeds)
    tokens = sum(TRAJECTORY_TOKENS.get(arm, OTHER_TRAJECTORY_TOKENS) for arm in profile.arms) * trajectories
    sft = seeds * profile.train.epochs * tokens / 1000 * SFT_S_PER_KTOKEN
    turns = min(mean_turns(profile), profile.max_steps)
    data = seeds * len(profile.arms) * trajectories * (turns * ENV_STEP_S + EPISODE_S)
    per_seed = [bench_estimate_s(profile, trained=True, seed_index=i) for i in range(seeds)]
    bench = len(profile.arms) * sum(per_seed) + bench_estimate_s(profile, trained=False)
    return {"sft_s": sft, "data_s": data, "bench_s": bench, "bench_per_model_s": per_seed[0],
            "total_s": sft + data + bench, "mean_turns": turns}  # fmt: skip


def training_suite(profile: Profile) -> str:
    if profile.suite == "easy":
        return easy_suite(profile.train_seed, profile.pool_tasks)
    return ladder_suite(profile.train_seed, profile.pool_tasks)


def evaluation_suites(profile: Profile) -> dict[str, str]:
    """Task classes: held out by seed (and, on the ladder, by words), and by template."""
    if profile.suite == "easy":
        return {"tasks": easy_suite(profile.eval_seed, profile.eval_tasks_base)}
    suites = {"tasks": ladder_suite(profile.eval_seed, profile.eval_tasks_base, words="heldout")}
    if profile.eval_tasks_heldout_templates:
        suites["heldout_templates"] = ladder_suite(
            profile.eval_seed, profile.eval_tasks_heldout_templates, templates="heldout", words="heldout"
        )
    return suites


class Stages:
    """The progress display and the stage times. A stage whose outputs a rerun reuses (a kept
    checkpoint, recorded data, bench records) reports the time of the run that produced them,
    read from those outputs, and is listed in ``reused``."""

    def __init__(self, total: int) -> None:
        self.total, self.index, self.started = total, 0, time.perf_counter()
        self.times: dict[str, float] = {}
        self.cpu: dict[str, float] = {}  # this process's CPU seconds (all threads) per stage run now
        self.reused: list[str] = []
        self._current: tuple[str, float, float] | None = None

    def start(self, name: str) -> None:
        self.finish()
        self.index += 1
        print(f"[{self.index}/{self.total}] {name} (t={time.perf_counter() - self.started:.0f}s)", flush=True)
        self._current = (name, time.perf_counter(), time.process_time())

    def finish(self, produced_s: float | None = None) -> None:
        """End the current stage; ``produced_s``: the time its outputs took to produce, when they
        say (a checkpoint's training time, the sum of a resumed bench's episode times)."""
        if self._current is None:
            return
        name, began, cpu = self._current
        now = time.perf_counter() - began
        self.times[name] = now if produced_s is None else produced_s
        self.cpu[name] = time.process_time() - cpu
        note = ""
        if produced_s is not None and produced_s > now + 1.0:
            self.reused.append(name)
            note = f" (reused; produced in {produced_s:.0f}s)"
        print(f"      done in {now:.0f}s{note}", flush=True)
        self._current = None


def evaluation_harnesses(profile: Profile) -> tuple[HarnessChoice, list[HarnessChoice]]:
    """(the base harness, the training and held-out configurations) the bench runs."""

    def choice(config: HarnessConfig) -> HarnessChoice:
        return HarnessChoice(config.env_id, classify_config(config), config.code)

    others = [c for c in TRAINING_SET if c != BASE_CONFIG][: profile.training_configs]
    return choice(BASE_CONFIG), [choice(c) for c in [*others, *list(heldout_set())[: profile.heldout_configs]]]


@dataclass(frozen=True)
class EvalRun:
    """One bench call: an evaluation class, its harnesses, its tasks and env options."""

    klass: str
    harnesses: tuple[HarnessChoice, ...]
    tasks: str  # key into the evaluation task lists
    count: int
    env_options: tuple[tuple[str, Any], ...] = ()


def eval_runs(profile: Profile, *, trained: bool, seed_index: int = 0) -> list[EvalRun]:
    """The evaluation classes of one model: base harness (more tasks), training and held-out
    configurations, held-out with resampled names, the imitation presets, held-out templates;
    a training seed past ``full_eval_seeds`` (its index ``seed_index``) the core classes only."""
    if trained and 0 < profile.full_eval_seeds <= seed_index:
        return [r for r in eval_runs(profile, trained=True) if r.klass in CORE_CLASSES]
    base, others = evaluation_harnesses(profile)
    base_tasks = profile.eval_tasks_base if trained else (profile.untrained_tasks or profile.eval_tasks_base)
    runs = [EvalRun("base", (base,), "tasks", base_tasks)]
    if not trained and not profile.untrained_everywhere:
        return runs
    training = tuple(c for c in others if c.klass == "training")
    heldout = tuple(c for c in others if c.klass == "heldout")
    runs += [
        EvalRun("training", training, "tasks", profile.eval_tasks),
        EvalRun("heldout", heldout, "tasks", profile.eval_tasks),
    ]
    if profile.renamed:
        renamed = heldout[: profile.renamed]
        runs.append(EvalRun("heldout_renamed", renamed, "tasks", profile.eval_tasks, (("resample_names", True),)))
    if profile.presets:
        runs.append(EvalRun("presets", tuple(harness_choice(p) for p in profile.presets), "tasks", profile.eval_tasks))
    if profile.externals:
        runs.append(
            EvalRun("external", tuple(resolve_harnesses(",".join(profile.externals))), "tasks", profile.eval_tasks)
        )
    if profile.eval_tasks_heldout_templates and profile.suite != "easy":
        chosen = (base, *heldout[: profile.template_configs])
        runs.append(EvalRun("heldout_templates", chosen, "heldout_templates", profile.eval_tasks_heldout_templates))
    return runs


def run(profile: Profile, out: Path, work: Path, progress: bool = True) -> dict[str, Any]:
    """The whole pipeline; returns the results written to ``out``. Every stage's outputs are kept
    in ``work`` (exported data, checkpoints per arm and seed, bench records), so a rerun resumes
    at the first unfinished stage and reports the times of the run that produced the rest."""
    import torch

    from harness_gym.model_export import export_model

    threads = profile.train.threads or default_threads()
    torch.set_num_threads(threads)
    work.mkdir(parents=True, exist_ok=True)
    (work / ".gitignore").write_text("# replication work files (checkpoints, bench records): not for git\n*\n")
    seeds = profile.training_seeds
    stages = Stages(2 + len(seeds) * (1 + 2 * len(profile.arms)))
    estimate = estimate_cost(profile)
    print(f"      estimated cost on two quiet cores: {estimate['total_s'] / 3600:.1f} h "
          f"(SFT {estimate['sft_s'] / 60:.0f} min, bench {estimate['bench_s'] / 60:.0f} min)")  # fmt: skip

    stages.start("export the packaged SmolLM2-135M-Instruct to transformers format")
    base_model = work / "model-untrained"
    if not (base_model / "config.json").exists():
        export_model(base_model, force=True)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(base_model))
    suite = training_suite(profile)
    training_tasks = load_tasks(suite)
    suites = evaluation_suites(profile)
    eval_lists: dict[str, list[Task]] = {}
    dropped = 0
    for key, reference in suites.items():
        eval_lists[key], lost = evaluation_tasks(reference, training_tasks)
        dropped += lost
    specs = [ARM_SPECS[a] for a in profile.arms]

    models: dict[str, Any] = {}
    runs_by_arm: dict[str, list[dict[str, Any]]] = {a: [] for a in profile.arms}
    data: dict[str, Any] = {}
    training: dict[str, Any] = {}
    stages.start("bench untrained")
    records, seconds = _bench_model(profile, base_model, "untrained", eval_lists, work, progress, trained=False)
    stages.finish(seconds)
    models["untrained"] = _entry(records)
    for index, seed in enumerate(seeds):
        stages.start(f"seed {seed}: record reference trajectories and export them with train masks")
        arms, produced = _arm_data(profile, suite, specs, tokenizer, seed, work)
        stages.finish(produced)
        data[f"seed{seed}"] = {name: arm.summary() for name, arm in arms.items()}
        for name, figures in data[f"seed{seed}"].items():
            print(f"      {name}: {figures['trajectories']} trajectories, {figures['trained_tokens']} trained tokens "
                  f"({figures['trimmed_tokens']} trimmed), {len(figures['harnesses'])} harnesses")  # fmt: skip
        for spec in specs:
            label = f"{spec.name}/seed{seed}"
            stages.start(f"SFT of {label} ({data[f'seed{seed}'][spec.name]['trajectories']} trajectories)")
            folder = work / f"model-{spec.name}-seed{seed}"
            config = replace(profile.train, seed=seed)
            training[label] = _train_or_reuse(base_model, arms[spec.name].examples, folder, config, progress)
            stages.finish(float(training[label].get("seconds", 0.0)))
            stages.start(f"bench {label}")
            records, seconds = _bench_model(
                profile, folder, label, eval_lists, work, progress, trained=True, seed_index=index
            )
            stages.finish(seconds)
            models[label] = _entry(records)
            runs_by_arm[spec.name].append(models[label])
            figures = models[label]
            print(f"      {label}: Pass@1 base {pct(figures['classes']['base']['pass_at_1'])}%, held-out "
                  f"{pct(figures['classes']['heldout']['pass_at_1'])}%, gap {pct(figures['gap']['gap'])} points")  # fmt: skip
    stages.finish()
    for arm in profile.arms:  # the first seed's figures under the arm's name (the report's table and plots)
        models[arm] = models[f"{arm}/seed{seeds[0]}"]
    results = {
        "profile": {**asdict(profile), "threads": threads},
        "base_harness": BASE_CONFIG.code,
        "suites": {
            "training": suite,
            "evaluation": f"{suites['tasks']} (first {profile.eval_tasks} per configuration)",
            "evaluation_base": suites["tasks"],
            "evaluation_heldout_templates": suites.get("heldout_templates"),
            "dropped_duplicates": dropped,
        },
        "data": data[f"seed{seeds[0]}"],
        "data_by_seed": data,
        "training": {k: {key: v for key, v in log.items() if key != "losses"} for k, log in training.items()},
        "models": models,
        "over_seeds": {arm: _over_seeds(entries) for arm, entries in runs_by_arm.items()},
        "timings_s": stages.times,
        "cpu_s": stages.cpu,  # CPU seconds of this invocation per stage (a reused stage's are its read-back)
        "load_average": os.getloadavg(),
        "reused_stages": stages.reused,
        "estimated_cost_s": estimate,
        "command": f"python -m benchmarks.replication --profile {profile.name}",
        "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    paths = write_outputs(results, out)
    print("wrote " + ", ".join(str(p) for p in paths))
    return results


def _entry(records: list[dict[str, Any]]) -> dict[str, Any]:
    entry = model_entry(model_summary([r for r in records if r.get("eval_class") in CORE_CLASSES]))
    entry["eval_classes"] = class_figures(records)
    entry["acted_effects"] = acted_effects(records)
    return entry


def _over_seeds(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per evaluation class and for the gap: mean over training seeds with its t interval."""
    classes = sorted({k for e in entries for k in e["eval_classes"]})
    out = {
        k: over_seeds([e["eval_classes"].get(k, {}).get("pass_at_1", float("nan")) for e in entries]) for k in classes
    }
    out["gap"] = over_seeds([e["gap"]["gap"] for e in entries])
    return out


def _bench_model(
    profile: Profile,
    folder: Path,
    label: str,
    eval_lists: dict[str, list[Task]],
    work: Path,
    progress: bool,
    *,
    trained: bool,
    seed_index: int = 0,
) -> tuple[list[dict[str, Any]], float]:
    """Every evaluation class of one model: the records, tagged with the class (bench records
    resume), and the wall time of the runs that produced them."""
    records: list[dict[str, Any]] = []
    seconds = 0.0
    _discard_stale_bench(profile, folder, work / "bench" / label.replace("/", "-"), _reply_cap(profile, trained))
    for run_ in eval_runs(profile, trained=trained, seed_index=seed_index):
        tasks = eval_lists[run_.tasks][: run_.count]
        if not tasks or not run_.harnesses:
            continue
        common: dict[str, Any] = {"seed": profile.eval_seed, "max_steps": profile.max_steps, "max_new_tokens": _reply_cap(profile, trained), "label": label, "progress": progress}  # fmt: skip
        out_dir = work / "bench" / label.replace("/", "-") / run_.klass
        found = run_bench(
            folder, list(run_.harnesses), tasks, out_dir, env_options=dict(run_.env_options),
            workers=profile.bench_workers, **common,
        )  # fmt: skip
        records += [{**r, "eval_class": run_.klass} for r in found]
        seconds += bench_wall_seconds(out_dir)
    return records, seconds


def _reply_cap(profile: Profile, trained: bool) -> int:
    return profile.max_new_tokens if trained else profile.untrained_max_new_tokens


def _discard_stale_bench(profile: Profile, model: Path, bench: Path, reply_cap: int) -> None:
    """Bench records resume by episode, so records of another checkpoint in the same folder (one
    retrained with other settings) or of other bench settings would be read back as this one's:
    ``bench/<label>/key.json`` names what produced them, and a folder of another key is emptied."""
    log = model / "train_log.json"
    trained = json.loads(log.read_text(encoding="utf-8")) if log.exists() else {}
    key = {
        "checkpoint": {k: trained.get(k) for k in ("config", "trained_tokens", "final_loss")},
        "max_new_tokens": reply_cap,
        "max_steps": profile.max_steps,
        "eval_seed": profile.eval_seed,
    }
    path = bench / "key.json"
    if bench.exists() and (not path.exists() or json.loads(path.read_text(encoding="utf-8")) != key):
        print(f"      {bench}: records of another checkpoint or bench settings, discarded")
        shutil.rmtree(bench)
    bench.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(key) + "\n", encoding="utf-8")


def _arm_data(
    profile: Profile, suite: str, specs: list[Any], tokenizer: Any, seed: int, work: Path
) -> tuple[dict[str, Any], float]:
    """The arms' equalised examples of one training seed and the seconds they took to record,
    kept in ``work/data-seed<N>.json``: a rerun reads them back instead of recording again."""
    path = work / f"data-seed{seed}.json"
    key = {"suite": suite, "arms": [asdict(s) for s in specs], "tasks_per_arm": profile.tasks_per_arm, "seed": seed}
    if path.exists():
        saved = json.loads(path.read_text(encoding="utf-8"))
        if saved.get("key") == key:
            print("      reusing the recorded training data of a previous run")
            return {name: ArmData.from_json(value) for name, value in saved["arms"].items()}, saved["seconds"]
    started = time.perf_counter()
    pools, ids = record_arm_pools(
        suite,
        specs,
        lambda row: tokenize_row(row, tokenizer),
        schedule_seed=profile.schedule_seed + seed,
        workdir=work,
        trajectories=profile.tasks_per_arm * K,
    )
    arms = equalise_same_tasks(pools, ids, profile.tasks_per_arm)
    seconds = time.perf_counter() - started
    saved = {"key": key, "seconds": seconds, "arms": {n: a.to_json() for n, a in arms.items()}}
    path.write_text(json.dumps(saved) + "\n", encoding="utf-8")
    return arms, seconds


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
    parser.add_argument("--small", action="store_true", help="the ~10-minute profile (same as --profile small)")
    parser.add_argument("--profile", choices=sorted(PROFILES), help="full (default), small, ablation or easy")
    parser.add_argument("--estimate", action="store_true", help="print the profile's estimated cost and stop")
    parser.add_argument("--out", type=Path, help="where results.json, report.md and the plots go")
    parser.add_argument("--work", type=Path, default=Path("replication-work"), help="checkpoints and bench records")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: the cores idle at the start)")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")
    args = parser.parse_args(argv)
    if args.small and args.profile not in (None, "small"):
        parser.error("--small and --profile disagree")
    name = args.profile or ("small" if args.small else "full")
    profile = PROFILES[name]
    if args.estimate:
        cost = estimate_cost(profile)
        print(json.dumps({"profile": name, **{k: round(v, 1) for k, v in cost.items()}}))
        return 0
    if args.threads:
        profile = replace(profile, train=replace(profile.train, threads=args.threads))
    folder = "replication" if name == "full" else f"replication-{name}"
    out = args.out or Path("benchmarks/results") / folder
    run(profile, out, args.work / profile.name, progress=not args.quiet)
    return 0


if __name__ == "__main__":
    sys.exit(main())
