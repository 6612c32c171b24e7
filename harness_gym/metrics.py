"""Metrics shared by benchmarks, the evolution machinery and trainers.

- pass rate: the share of rollouts that pass (reward at least ``threshold``, 1.0 by default);
- trainable rate: the share of all sampled rollouts usable for a GRPO update. Truncated rollouts
  are excluded; the remaining rollouts of a task's group count only if they hold both a success and
  a failure (otherwise GRPO has no reward contrast). The denominator is every sampled rollout;
- group outcome shares: how many task groups are all-pass, all-fail or mixed;
- bootstrap confidence intervals, plain and paired (resampling tasks, keeping pairs together).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Outcome:
    """One rollout's result, as the metrics need it."""

    task_id: str
    reward: float
    truncated: bool = False

    def passed(self, threshold: float = 1.0) -> bool:
        return self.reward >= threshold


def groups(outcomes: Iterable[Outcome]) -> dict[str, list[Outcome]]:
    by_task: dict[str, list[Outcome]] = defaultdict(list)
    for outcome in outcomes:
        by_task[outcome.task_id].append(outcome)
    return dict(by_task)


def pass_rate(outcomes: Sequence[Outcome], threshold: float = 1.0) -> float:
    if not outcomes:
        return 0.0
    return sum(o.passed(threshold) for o in outcomes) / len(outcomes)


def trainable_count(group: Sequence[Outcome], threshold: float = 1.0) -> int:
    """Rollouts of one task group usable for GRPO: the untruncated ones, if they hold both outcomes."""
    kept = [o for o in group if not o.truncated]
    results = {o.passed(threshold) for o in kept}
    return len(kept) if results == {True, False} else 0


def trainable_rate(outcomes: Sequence[Outcome], threshold: float = 1.0) -> float:
    if not outcomes:
        return 0.0
    return sum(trainable_count(g, threshold) for g in groups(outcomes).values()) / len(outcomes)


def group_outcome_shares(outcomes: Sequence[Outcome], threshold: float = 1.0) -> dict[str, float]:
    """Shares of task groups whose untruncated rollouts all pass, all fail, are mixed, or are all truncated."""
    counts = {"all_pass": 0, "all_fail": 0, "mixed": 0, "all_truncated": 0}
    by_task = groups(outcomes)
    for group in by_task.values():
        kept = {o.passed(threshold) for o in group if not o.truncated}
        key = (
            "all_truncated"
            if not kept
            else "mixed"
            if kept == {True, False}
            else "all_pass"
            if kept == {True}
            else "all_fail"
        )
        counts[key] += 1
    total = max(len(by_task), 1)
    return {k: v / total for k, v in counts.items()}


@dataclass(frozen=True)
class RateSummary:
    """Pass rate and trainable rate of a set of rollouts."""

    pass_rate: float
    trainable_rate: float
    rollouts: int
    groups: dict[str, float]

    @classmethod
    def of(cls, outcomes: Sequence[Outcome], threshold: float = 1.0) -> RateSummary:
        return cls(
            pass_rate(outcomes, threshold),
            trainable_rate(outcomes, threshold),
            len(outcomes),
            group_outcome_shares(outcomes, threshold),
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "pass_rate": self.pass_rate,
            "trainable_rate": self.trainable_rate,
            "rollouts": self.rollouts,
            "groups": dict(self.groups),
        }


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float


def bootstrap_ci(
    values: Sequence[float],
    statistic: Callable[[np.ndarray], float] = np.mean,
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile bootstrap interval of ``statistic`` over ``values``."""
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        return Interval(float("nan"), float("nan"), float("nan"))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, data.size, size=(resamples, data.size))
    stats = np.array([statistic(data[row]) for row in draws])
    tail = (1 - confidence) / 2
    return Interval(float(statistic(data)), float(np.quantile(stats, tail)), float(np.quantile(stats, 1 - tail)))


def paired_bootstrap(
    a: Sequence[Outcome],
    b: Sequence[Outcome],
    metric: Callable[[Sequence[Outcome]], float],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Interval of ``metric(b) - metric(a)``, resampling tasks with their rollouts on both sides together."""
    groups_a, groups_b = groups(a), groups(b)
    tasks = sorted(set(groups_a) & set(groups_b))
    if not tasks:
        raise ValueError("the two sets of rollouts share no task")
    estimate = metric([o for t in tasks for o in groups_b[t]]) - metric([o for t in tasks for o in groups_a[t]])
    rng = np.random.default_rng(seed)
    diffs = np.empty(resamples)
    for index in range(resamples):
        picked = [tasks[i] for i in rng.integers(0, len(tasks), size=len(tasks))]
        diffs[index] = metric([o for t in picked for o in groups_b[t]]) - metric(
            [o for t in picked for o in groups_a[t]]
        )
    tail = (1 - confidence) / 2
    return Interval(float(estimate), float(np.quantile(diffs, tail)), float(np.quantile(diffs, 1 - tail)))


# --------------------------------------------------------------------------- tool calls per format


def tool_calls_by_format(step_infos: Iterable[Mapping[str, object]]) -> dict[str, dict[str, int]]:
    """Calls and parse errors per tool-call format over an episode's step infos (each parsed call
    carries the format it was read in, e.g. ``hermes``, ``mistral``, ``openai``)."""
    counts: dict[str, dict[str, int]] = {}
    for info in step_infos:
        calls = info.get("parsed_calls") or []
        for call in calls if isinstance(calls, list) else []:
            if not isinstance(call, Mapping):
                continue
            entry = counts.setdefault(str(call.get("format") or "unknown"), {"calls": 0, "parse_errors": 0})
            entry["calls"] += 1
            entry["parse_errors"] += bool(call.get("error"))
    return counts


def tool_calls_by_role(step_infos: Iterable[Mapping[str, object]]) -> dict[str, int]:
    """Calls that ran, per role of their tool (``shell``, ``edit``, ``test``, ...; see
    :mod:`harness_gym.tools.roles`): what an agent did, whatever the harness names its tools."""
    counts: dict[str, int] = {}
    for info in step_infos:
        roles = info.get("call_roles") or []
        for role in roles if isinstance(roles, list) else []:
            counts[str(role)] = counts.get(str(role), 0) + 1
    return counts


def tool_call_validity_by_format(
    per_episode: Iterable[Mapping[str, Mapping[str, int]] | None],
) -> dict[str, dict[str, float]]:
    """Summed calls, parse errors and validity (the share of calls that parsed) per format, from
    episodes' :func:`tool_calls_by_format` counts. A format no call was written in is absent."""
    totals: dict[str, dict[str, int]] = defaultdict(lambda: {"calls": 0, "parse_errors": 0})
    for counts in per_episode:
        for fmt, entry in (counts or {}).items():
            totals[fmt]["calls"] += int(entry.get("calls", 0))
            totals[fmt]["parse_errors"] += int(entry.get("parse_errors", 0))
    return {
        fmt: {**entry, "validity": (entry["calls"] - entry["parse_errors"]) / entry["calls"]}
        for fmt, entry in sorted(totals.items())
        if entry["calls"]
    }
