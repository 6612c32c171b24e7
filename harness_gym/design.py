"""Experimental design over the harness space: which configurations to train on, which to hold
out, and which configurations each task sees in which training step.

Implements the Harness Scaling design (arXiv 2610.29458, its method section): the strength-2 orthogonal array of
18 training configurations, a held-out set of 18, the locality-aware task-to-harness assignment,
and the ablation baselines of the paper so each can be reproduced.
"""

from __future__ import annotations

import functools
import itertools
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from harness_gym.space import BASE_CONFIG, LEVELS, HarnessConfig, all_configs, hamming

TaskT = TypeVar("TaskT", bound=Hashable)

# The paper's 18 training configurations, digits in factor order S T O C W.
_PAPER_TRAINING_DIGITS = [
    "00000",
    "01111",
    "02222",
    "10011",
    "11122",
    "12200",
    "20102",
    "21210",
    "22021",
    "00221",
    "01002",
    "02110",
    "10120",
    "11201",
    "12012",
    "20212",
    "21020",
    "22101",
]
TRAINING_SET: tuple[HarnessConfig, ...] = tuple(HarnessConfig.parse(d) for d in _PAPER_TRAINING_DIGITS)


# --------------------------------------------------------------------------- orthogonal arrays


@dataclass(frozen=True)
class OrthogonalArrayReport:
    """Result of checking an array for the orthogonal-array property."""

    strength: int
    runs: int
    levels: tuple[int, ...]
    index: float  # lambda: how often each level combination must appear
    violations: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.violations


def check_orthogonal_array(
    array: Sequence[Sequence[int]], strength: int = 2, levels: Sequence[int] | None = None
) -> OrthogonalArrayReport:
    """Check whether ``array`` (rows = runs, columns = factors) is an orthogonal array.

    Strength t means: in every choice of t columns, every combination of levels appears
    equally often (``runs / prod(levels)`` times). ``levels`` defaults to ``max + 1`` per column.
    """
    rows = [tuple(int(v) for v in row) for row in array]
    if not rows:
        raise ValueError("an orthogonal array needs at least one row")
    width = len(rows[0])
    if any(len(row) != width for row in rows):
        raise ValueError("all rows of an orthogonal array must have the same length")
    if not 1 <= strength <= width:
        raise ValueError(f"strength must be between 1 and the number of columns ({width}), got {strength}")
    col_levels = tuple(levels) if levels is not None else tuple(max(r[i] for r in rows) + 1 for i in range(width))
    if len(col_levels) != width:
        raise ValueError(f"levels has {len(col_levels)} entries for {width} columns")
    violations: list[str] = []
    for row in rows:
        for i, v in enumerate(row):
            if not 0 <= v < col_levels[i]:
                violations.append(f"row {row} has level {v} in column {i}, outside 0..{col_levels[i] - 1}")
    index = len(rows) / 1.0
    for columns in itertools.combinations(range(width), strength):
        cells = int(np.prod([col_levels[c] for c in columns]))
        index = len(rows) / cells
        counts = Counter(tuple(row[c] for c in columns) for row in rows)
        if index != int(index):
            violations.append(
                f"columns {columns}: {len(rows)} runs cannot be split evenly over {cells} level combinations"
            )
            continue
        for combo in itertools.product(*(range(col_levels[c]) for c in columns)):
            if counts.get(combo, 0) != index:
                violations.append(
                    f"columns {columns}: levels {combo} appear {counts.get(combo, 0)} times, expected {int(index)}"
                )
    return OrthogonalArrayReport(strength, len(rows), col_levels, index, tuple(violations))


def is_orthogonal_array(array: Sequence[Sequence[int]], strength: int = 2, levels: Sequence[int] | None = None) -> bool:
    """True when ``array`` is an orthogonal array of the given strength."""
    return check_orthogonal_array(array, strength, levels).ok


# --------------------------------------------------------------------------- held-out set


def translated_heldout(training: Sequence[HarnessConfig] = TRAINING_SET) -> tuple[HarnessConfig, ...]:
    """Construct a held-out set from a training orthogonal array by translation.

    Adding a constant vector ``c`` (mod 3, column-wise) to every row of an orthogonal array permutes
    the levels of each column, so the result is again an orthogonal array of the same strength:
    every level appears 6 times per factor and every pair of levels twice. Among the translations
    whose rows are all outside the training set we take the one whose configurations are, on
    average, farthest from their nearest training configuration (a harder generalisation test),
    breaking ties by the lexicographically smallest ``c``.
    """
    train = set(training)
    best: tuple[int, tuple[int, ...]] | None = None
    best_rows: tuple[HarnessConfig, ...] = ()
    for shift in itertools.product(range(LEVELS), repeat=5):
        rows = tuple(HarnessConfig(*((v + s) % LEVELS for v, s in zip(row, shift, strict=True))) for row in training)
        if train.intersection(rows):
            continue
        spread = sum(min(hamming(r, t) for t in training) for r in rows)
        if best is None or spread > best[0]:
            best, best_rows = (spread, shift), rows
    if best is None:
        raise ValueError("no translation of the training array is disjoint from it")
    return tuple(sorted(best_rows))


@functools.cache
def heldout_set() -> tuple[HarnessConfig, ...]:
    """The 18 held-out configurations: disjoint from training, itself a strength-2 orthogonal array."""
    return translated_heldout(TRAINING_SET)


def random_training_set(n: int = 18, seed: int = 0, exclude: Sequence[HarnessConfig] = ()) -> tuple[HarnessConfig, ...]:
    """Ablation: ``n`` configurations drawn uniformly without replacement (the paper's 'random 18')."""
    pool = [c for c in all_configs() if c not in set(exclude)]
    if n > len(pool):
        raise ValueError(f"cannot draw {n} configurations from a pool of {len(pool)}")
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(pool), size=n, replace=False)
    return tuple(pool[i] for i in sorted(picked))


TRAINING_SETS: dict[str, Callable[[int], tuple[HarnessConfig, ...]]] = {
    "oa18": lambda seed: TRAINING_SET,
    "random18": lambda seed: random_training_set(18, seed),
    "all243": lambda seed: tuple(all_configs()),
    "base": lambda seed: (BASE_CONFIG,),
}


def training_set(name: str, seed: int = 0) -> tuple[HarnessConfig, ...]:
    """A training set by name: ``oa18`` (the paper), ``random18``, ``all243`` or ``base`` (single harness)."""
    try:
        return TRAINING_SETS[name](seed)
    except KeyError:
        raise ValueError(f"unknown training set {name!r}; choose one of {sorted(TRAINING_SETS)}") from None


# --------------------------------------------------------------------------- assignment


def nearest_configs(
    anchor: HarnessConfig, candidates: Sequence[HarnessConfig], count: int, rng: np.random.Generator
) -> list[HarnessConfig]:
    """The ``count`` candidates nearest to ``anchor`` by Hamming distance (anchor excluded).

    Ties are broken by a random rank drawn from ``rng``, so the choice is deterministic for a seed.
    """
    others = [c for c in candidates if c != anchor]
    if count > len(others):
        raise ValueError(f"need {count} neighbours but only {len(others)} other configurations exist")
    ranks = rng.permutation(len(others))
    order = sorted(range(len(others)), key=lambda i: (hamming(anchor, others[i]), ranks[i]))
    return [others[i] for i in order[:count]]


def locality_aware_assignment(
    tasks: Sequence[TaskT], configs: Sequence[HarnessConfig] = TRAINING_SET, k: int = 2, seed: int = 0
) -> dict[TaskT, tuple[HarnessConfig, ...]]:
    """For each task: an anchor drawn uniformly from ``configs``, then its K−1 nearest configurations."""
    _check_k(k, configs)
    rng = np.random.default_rng(seed)
    out: dict[TaskT, tuple[HarnessConfig, ...]] = {}
    for task in tasks:
        anchor = configs[int(rng.integers(len(configs)))]
        out[task] = (anchor, *nearest_configs(anchor, configs, k - 1, rng))
    return out


def random_assignment(
    tasks: Sequence[TaskT], configs: Sequence[HarnessConfig] = TRAINING_SET, k: int = 2, seed: int = 0
) -> dict[TaskT, tuple[HarnessConfig, ...]]:
    """Ablation: each task gets K configurations drawn uniformly and independently of each other."""
    _check_k(k, configs)
    rng = np.random.default_rng(seed)
    return {task: tuple(configs[int(i)] for i in rng.integers(len(configs), size=k)) for task in tasks}


def repeat_assignment(
    tasks: Sequence[TaskT], configs: Sequence[HarnessConfig] = TRAINING_SET, k: int = 2, seed: int = 0
) -> dict[TaskT, tuple[HarnessConfig, ...]]:
    """Ablation 'Repeat-K': the anchor alone, used K times."""
    _check_k(1, configs)
    rng = np.random.default_rng(seed)
    return {task: (configs[int(rng.integers(len(configs)))],) * k for task in tasks}


ASSIGNMENTS: dict[str, Callable[..., dict]] = {
    "locality": locality_aware_assignment,
    "random": random_assignment,
    "repeat": repeat_assignment,
}


def _check_k(k: int, configs: Sequence[HarnessConfig]) -> None:
    if k < 1:
        raise ValueError(f"K must be at least 1, got {k}")
    if not configs:
        raise ValueError("the configuration set is empty")


@dataclass(frozen=True)
class Assignment(Generic[TaskT]):
    """One (task, configuration) pair at a training step; ``slot`` is its index within the task's K."""

    step: int
    task: TaskT
    config: HarnessConfig
    slot: int


def build_schedule(
    tasks: Sequence[TaskT],
    tasks_per_step: int,
    *,
    configs: Sequence[HarnessConfig] = TRAINING_SET,
    k: int = 2,
    assignment: str = "locality",
    seed: int = 0,
) -> list[list[Assignment[TaskT]]]:
    """The training schedule: a list of steps, each a list of (task, configuration) assignments.

    Tasks are grouped into batches of ``tasks_per_step``; batch b occupies the K consecutive steps
    b·K … b·K+K−1, and in step b·K+j every task of the batch runs in its j-th configuration. So a
    task's K configurations always fall in K consecutive steps, as the paper prescribes.
    """
    if tasks_per_step < 1:
        raise ValueError(f"tasks_per_step must be at least 1, got {tasks_per_step}")
    duplicates = [task for task, n in Counter(tasks).items() if n > 1]
    if duplicates:
        raise ValueError(f"tasks must be unique; repeated: {duplicates[:5]}")
    try:
        assign = ASSIGNMENTS[assignment]
    except KeyError:
        raise ValueError(f"unknown assignment {assignment!r}; choose one of {sorted(ASSIGNMENTS)}") from None
    per_task = assign(tasks, configs, k, seed)
    steps: list[list[Assignment[TaskT]]] = []
    for start in range(0, len(tasks), tasks_per_step):
        batch = tasks[start : start + tasks_per_step]
        for slot in range(k):
            step = len(steps)
            steps.append([Assignment(step, task, per_task[task][slot], slot) for task in batch])
    return steps
