"""Training data for the two arms: reference-agent trajectories, exported with train masks,
at equal numbers of trajectories and of trained tokens.

Arm A ("base") sees only the base harness S0T0O0C0W0, the all-zeros configuration of the factor
table (DESIGN.md section 1); arm B ("oa18") sees the 18 training configurations, each task in the
K = 2 configurations the locality-aware assignment gives it, in K consecutive steps. Each task
contributes K trajectories to either arm (arm A: the base harness K times), so both arms train on
the same number of trajectories; the trained-token totals are then equalised by choosing which
tasks of a larger pool each arm keeps (resampling) and trimming the last few tokens of the
difference (see :func:`equalise`).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_gym.agents.reference import ReferenceAgent
from harness_gym.bench.runner import run_one
from harness_gym.design import ASSIGNMENTS, TRAINING_SET, build_schedule, training_set
from harness_gym.export import sft_rows
from harness_gym.records import EpisodePlan, HarnessChoice, classify_config, harness_choice
from harness_gym.replication.sft import Example
from harness_gym.space import BASE_CONFIG, HarnessConfig
from harness_gym.tasks import Task, load_tasks
from harness_gym.tasks.easy import HELDOUT_TEMPLATES

ARMS: dict[str, str] = {
    "base": "arm A: the base harness S0T0O0C0W0 only",
    "oa18": "arm B: the 18 OA training configurations, locality-aware K=2",
}
K = 2


@dataclass(frozen=True)
class ArmSpec:
    """How an arm picks its training harnesses: a training set of :mod:`harness_gym.design`
    (``base``, ``oa18``, ``random18``) or one harness (``harness``: a preset or configuration id,
    used K times), the assignment and K. Every arm runs each of its tasks ``trajectories`` times
    (its K configurations, or the one harness repeated); an arm with more trajectories per task
    keeps fewer tasks (:func:`equalise_same_tasks`), so every arm trains on as many trajectories."""

    name: str
    description: str
    training_set: str = "oa18"
    k: int = K
    assignment: str = "locality"
    harness: str | None = None
    trajectories: int = K

    def pairs(self, task_ids: Sequence[str], seed: int = 0) -> list[tuple[str, HarnessConfig | HarnessChoice]]:
        """(task, harness) pairs in training order: a task's ``trajectories`` in a row (its K
        configurations cycled when K < trajectories, the first ``trajectories`` when K is larger)."""
        if self.harness is not None:
            choice = harness_choice(self.harness)
            return [(t, choice) for t in task_ids for _ in range(self.trajectories)]
        configs = training_set(self.training_set, seed)
        per_task = ASSIGNMENTS[self.assignment](list(task_ids), configs, self.k, seed)
        return [(t, per_task[t][i % self.k]) for t in task_ids for i in range(self.trajectories)]


ARM_SPECS: dict[str, ArmSpec] = {
    spec.name: spec
    for spec in (
        ArmSpec("base", ARMS["base"], training_set="base", assignment="repeat"),
        ArmSpec("oa18", ARMS["oa18"]),
        ArmSpec("random18", "ablation: 18 configurations drawn at random, locality-aware K=2", training_set="random18"),
        ArmSpec("oa18-k1", "ablation: OA18, K=1 (twice the tasks, each in one configuration)", k=1, trajectories=1),
        ArmSpec("oa18-k4", "ablation: OA18, locality-aware K=4 (half the tasks, each in 4)", k=4, trajectories=4),
        ArmSpec("h1", "ablation: the single HarnessAdapt-H1 harness (the paper's h1)", harness="HarnessAdapt-H1"),
    )
}


def easy_suite(seed: int, count: int, templates: str = "train") -> str:
    """The suite reference of ``count`` easy tasks drawn from ``seed``."""
    return f"generated-easy:{seed}#count={count},templates={templates}"


def ladder_suite(seed: int, count: int, templates: str = "train", words: str = "train", rungs: str = "1-4") -> str:
    """The suite reference of ``count`` ladder tasks (:mod:`harness_gym.tasks.ladder`) from ``seed``."""
    return f"ladder:{seed}#count={count},templates={templates},words={words},rungs={rungs}"


def arm_assignments(arm: str, task_ids: Sequence[str], seed: int = 0) -> list[tuple[str, HarnessConfig]]:
    """(task, configuration) pairs of an arm in training order: K per task, a task's K in a row."""
    if arm not in ARMS:
        raise ValueError(f"unknown arm {arm!r}; choose one of {sorted(ARMS)}")
    configs = (BASE_CONFIG,) if arm == "base" else TRAINING_SET
    assignment = "repeat" if arm == "base" else "locality"
    steps = build_schedule(list(task_ids), 1, configs=configs, k=K, assignment=assignment, seed=seed)
    return [(a.task, a.config) for step in steps for a in step]


def record_trajectories(
    suite: str,
    tasks: Sequence[Task],
    pairs: Sequence[tuple[str, HarnessConfig | HarnessChoice]],
    out_dir: Path,
    seed: int = 0,
    env_options: dict[str, Any] | None = None,
) -> list[Path]:
    """Run the reference agent on every (task, harness) pair; the trajectory files, in order.

    A reference episode that fails is an error: the task or harness is broken, and training on a
    failed demonstration would hide it."""
    paths = []
    for index, (task_id, harness) in enumerate(pairs):
        choice = (
            HarnessChoice(harness.env_id, classify_config(harness), harness.code)
            if isinstance(harness, HarnessConfig)
            else harness
        )
        plan = EpisodePlan(choice, task_id, index, seed + index)
        record = run_one(plan, lambda: ReferenceAgent("hermes"), list(tasks), dict(env_options or {}), str(out_dir))
        if not record.get("passed"):
            raise RuntimeError(
                f"the reference agent failed {task_id} in {choice.env_id} "
                f"({record.get('error') or record.get('outcome')}); its trajectory cannot be a demonstration"
            )
        paths.append(Path(record["trajectory"]))
    return paths


@dataclass
class ArmData:
    """One arm's training examples and the budget figures the report states."""

    arm: str
    examples: list[Any]  # sft.Example, in training order
    task_ids: list[str]
    trimmed_tokens: int = 0
    harness_counts: dict[str, int] = field(default_factory=dict)

    @property
    def trajectories(self) -> int:
        return len(self.examples)

    @property
    def trained_tokens(self) -> int:
        return sum(e.trained_tokens for e in self.examples)

    def to_json(self) -> dict[str, Any]:
        """Everything, examples included, as JSON (a rerun reads the recorded data back)."""
        return {
            "arm": self.arm,
            "task_ids": self.task_ids,
            "trimmed_tokens": self.trimmed_tokens,
            "harness_counts": self.harness_counts,
            "examples": [[list(e.input_ids), [int(t) for t in e.trained], e.harness, e.task_id] for e in self.examples],
        }

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> ArmData:
        examples = [
            Example(tuple(ids), tuple(bool(t) for t in trained), h, t) for ids, trained, h, t in value["examples"]
        ]
        return cls(value["arm"], examples, value["task_ids"], value["trimmed_tokens"], value["harness_counts"])

    def summary(self) -> dict[str, Any]:
        return {
            "arm": self.arm,
            "description": ARM_SPECS[self.arm].description,
            "trajectories": self.trajectories,
            "trained_tokens": self.trained_tokens,
            "total_tokens": sum(len(e.input_ids) for e in self.examples),
            "tasks": len(self.task_ids),
            "trimmed_tokens": self.trimmed_tokens,
            "harnesses": dict(sorted(self.harness_counts.items())),
        }


def _choose(sizes_a: Sequence[int], sizes_b: Sequence[int], count: int) -> tuple[list[int], list[int]]:
    """Indices of ``count`` groups from each pool whose totals are as close as possible (greedy
    swaps from the first ``count`` of each, until no swap narrows the difference)."""
    if count > min(len(sizes_a), len(sizes_b)):
        raise ValueError(f"cannot keep {count} tasks per arm from pools of {len(sizes_a)} and {len(sizes_b)}")
    chosen = [list(range(count)), list(range(count))]
    pools = [sizes_a, sizes_b]
    for _ in range(1000):
        diff = sum(sizes_a[i] for i in chosen[0]) - sum(sizes_b[i] for i in chosen[1])
        best = (abs(diff), -1, -1, -1)
        for arm, sign in ((0, 1), (1, -1)):
            outside = [j for j in range(len(pools[arm])) if j not in set(chosen[arm])]
            for position, i in enumerate(chosen[arm]):
                for j in outside:
                    new = abs(diff + sign * (pools[arm][j] - pools[arm][i]))
                    if new < best[0]:
                        best = (new, arm, position, j)
        if best[1] < 0:
            break
        chosen[best[1]][best[2]] = best[3]
    return sorted(chosen[0]), sorted(chosen[1])


def equalise(pools: dict[str, list[list[Any]]], task_ids: dict[str, list[str]], count: int) -> dict[str, ArmData]:
    """Keep ``count`` tasks per arm (each with its K examples) so both arms train on the same
    number of trajectories and of trained tokens. The pools hold, per arm, one group of examples
    per task. A residual difference left after the choice is trimmed from the loss mask of the
    larger arm's last example (its final tokens: the end of the closing turn)."""
    names = sorted(pools)
    if len(names) != 2:
        raise ValueError(f"equalise needs exactly two arms, got {names}")
    sizes = {n: [sum(e.trained_tokens for e in group) for group in pools[n]] for n in names}
    picks = dict(zip(names, _choose(sizes[names[0]], sizes[names[1]], count), strict=True))
    arms = {}
    for name in names:
        examples = [e for i in picks[name] for e in pools[name][i]]
        arms[name] = ArmData(name, examples, [task_ids[name][i] for i in picks[name]])
        for example in examples:
            arms[name].harness_counts[example.harness] = arms[name].harness_counts.get(example.harness, 0) + 1
    larger, smaller = sorted(names, key=lambda n: arms[n].trained_tokens, reverse=True)
    excess = arms[larger].trained_tokens - arms[smaller].trained_tokens
    if excess:
        arms[larger].examples[-1] = arms[larger].examples[-1].trimmed(excess)
        arms[larger].trimmed_tokens = excess
    if (
        arms[larger].trained_tokens != arms[smaller].trained_tokens
        or arms[larger].trajectories != arms[smaller].trajectories
    ):
        raise RuntimeError("the arms' budgets could not be equalised")
    return arms


def evaluation_tasks(suite: str, training: Sequence[Task]) -> tuple[list[Task], int]:
    """The evaluation tasks of ``suite``, checked to be held out from ``training``: a different
    seed, no held-out template in training, and no task whose instruction and starting files equal
    a training task's (two seeds can draw the same words); those are dropped and counted."""
    check_held_out(training, load_tasks(suite))
    seen = {_fingerprint(t) for t in training}
    tasks = [t for t in load_tasks(suite) if _fingerprint(t) not in seen]
    return tasks, len(load_tasks(suite)) - len(tasks)


def check_held_out(training: Sequence[Task], evaluation: Sequence[Task]) -> None:
    """Raise when evaluation seeds overlap training seeds or training holds a held-out template."""
    train_seeds = {str(t.metadata.get("seed")) for t in training}
    overlap = train_seeds & {str(t.metadata.get("seed")) for t in evaluation}
    if overlap:
        raise ValueError(f"evaluation tasks reuse the training seeds {sorted(overlap)}")
    leaked = sorted(
        {
            str(t.metadata.get("template"))
            for t in training
            if t.metadata.get("heldout_template")
            or (t.metadata.get("family") == "generated-easy" and t.metadata.get("template") in HELDOUT_TEMPLATES)
        }
    )
    if leaked:
        raise ValueError(f"held-out templates {leaked} appear in the training tasks")


def _fingerprint(task: Task) -> tuple[str, tuple[tuple[str, str], ...]]:
    files: tuple[tuple[str, str], ...] = ()
    if task.workspace_dir is not None:
        files = tuple(
            sorted(
                (str(p.relative_to(task.workspace_dir)), p.read_text())
                for p in task.workspace_dir.rglob("*")
                if p.is_file()
            )
        )
    return task.instruction, files


def build_arm_pools(
    suite: str,
    tokenize: Callable[[dict[str, Any]], Any],
    *,
    schedule_seed: int = 0,
    workdir: Path | None = None,
) -> tuple[dict[str, list[list[Any]]], dict[str, list[str]]]:
    """Per arm, one group of K tokenised examples per task of ``suite`` (the pools :func:`equalise`
    chooses from): reference trajectories, exported by :func:`harness_gym.export.sft_rows` in the
    Hermes format with a train flag on exactly the policy's messages."""
    tasks = load_tasks(suite)
    ids = [t.id for t in tasks]
    pools: dict[str, list[list[Any]]] = {}
    with tempfile.TemporaryDirectory(dir=workdir) as scratch:
        for arm in ARMS:
            pairs = arm_assignments(arm, ids, schedule_seed)
            paths = record_trajectories(suite, tasks, pairs, Path(scratch) / arm)
            rows, skipped = sft_rows(paths, tasks=suite, tool_format="hermes")
            if skipped or len(rows) != len(pairs):
                raise RuntimeError(f"arm {arm}: {skipped} of {len(pairs)} trajectories were not exported")
            examples = [tokenize(row) for row in rows]
            pools[arm] = [examples[i : i + K] for i in range(0, len(examples), K)]
    return pools, {arm: ids for arm in ARMS}


def trim_to(examples: Sequence[Any], target: int) -> tuple[list[Any], int]:
    """``examples`` with the loss taken off the end of each so that ``target`` trained tokens
    remain, in proportion to each example's share (its last turns lose the loss, every trajectory
    alike, rather than the last trajectories losing everything); returns them and the count trimmed."""
    total = sum(e.trained_tokens for e in examples)
    excess = total - target
    if excess < 0:
        raise ValueError(f"cannot trim {total} trained tokens up to {target}")
    cuts = [excess * e.trained_tokens // total for e in examples] if total else [0] * len(examples)
    left = excess - sum(cuts)
    for index in reversed(range(len(examples))):  # the rounding remainder, from the last examples
        extra = min(left, examples[index].trained_tokens - cuts[index])
        cuts[index] += extra
        left -= extra
    return [e.trimmed(c) if c else e for e, c in zip(examples, cuts, strict=True)], excess


def equalise_same_tasks(pools: dict[str, list[list[Any]]], task_ids: Sequence[str], count: int) -> dict[str, ArmData]:
    """Every arm keeps ``count`` x K trajectories from the first tasks of the same list: arms with
    K trajectories per task (the main arms) keep the same ``count`` tasks, so they differ only in
    the harnesses; K=1 keeps twice as many, K=4 half. The trained-token totals are then equalised
    to the smallest arm's by :func:`trim_to` (each arm's trim is recorded)."""
    total = count * K
    kept: dict[str, list[Any]] = {}
    kept_ids: dict[str, list[str]] = {}
    for name, groups in pools.items():
        size = len(groups[0]) if groups else 0
        tasks = total // size if size else 0
        if not size or tasks * size != total or tasks > min(len(groups), len(task_ids)):
            raise ValueError(
                f"arm {name}: cannot keep {total} trajectories from {len(groups)} tasks of {size} trajectories"
            )
        kept[name] = [e for group in groups[:tasks] for e in group]
        kept_ids[name] = list(task_ids[:tasks])
    lengths = {len(v) for v in kept.values()}
    if len(lengths) != 1:
        raise ValueError(f"the arms hold different numbers of trajectories: {sorted(lengths)}")
    target = min(sum(e.trained_tokens for e in v) for v in kept.values())
    arms = {}
    for name, examples in kept.items():
        trimmed, excess = trim_to(examples, target)
        arms[name] = ArmData(name, trimmed, kept_ids[name], excess)
        for example in trimmed:
            arms[name].harness_counts[example.harness] = arms[name].harness_counts.get(example.harness, 0) + 1
    return arms


def record_arm_pools(
    suite: str,
    specs: Sequence[ArmSpec],
    tokenize: Callable[[dict[str, Any]], Any],
    *,
    schedule_seed: int = 0,
    workdir: Path | None = None,
    trajectories: int | None = None,
) -> tuple[dict[str, list[list[Any]]], list[str]]:
    """Per arm, one group of tokenised examples per task of ``suite`` (the same task list for every
    arm), from reference trajectories exported with a train flag on exactly the policy's messages.
    ``trajectories``: record only the first tasks that many trajectories per arm need."""
    tasks = load_tasks(suite)
    ids = [t.id for t in tasks]
    pools: dict[str, list[list[Any]]] = {}
    with tempfile.TemporaryDirectory(dir=workdir) as scratch:
        for spec in specs:
            needed = ids if trajectories is None else ids[: -(-trajectories // spec.trajectories)]
            pairs = spec.pairs(needed, schedule_seed)
            paths = record_trajectories(suite, tasks, pairs, Path(scratch) / spec.name)
            rows, skipped = sft_rows(paths, tasks=suite, tool_format="hermes")
            if skipped or len(rows) != len(pairs):
                raise RuntimeError(f"arm {spec.name}: {skipped} of {len(pairs)} trajectories were not exported")
            examples = [tokenize(row) for row in rows]
            size = spec.trajectories
            pools[spec.name] = [examples[i : i + size] for i in range(0, len(examples), size)]
    return pools, ids
