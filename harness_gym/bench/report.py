"""The benchmark report: Pass@1 with bootstrap intervals per harness and per class, the
specialisation gap, per-factor main effects and pairwise interactions, tool-call validity and
parse errors, steps and tokens; as Markdown, JSON and PNG plots.

Pass@1 of a set of episodes is the mean of ``passed`` (reward 1) over its episodes, which for R
runs per task equals the mean over runs of each run's pass rate. Intervals come from a crossed
("pigeonhole") bootstrap: tasks and harness configurations are resampled independently and every
episode of a drawn (task, harness) cell counts as often as its task and its harness were drawn. A
group of several configurations thus carries both sources of variation: a policy that passes the
same 2 of 18 held-out configurations on every task is not measured exactly, as a task-only
resampling would claim. Within one harness it is the task-cluster bootstrap, and differences
between harnesses evaluated on the same tasks stay paired.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness_gym.metrics import tool_call_validity_by_format
from harness_gym.records import HARNESS_CLASSES
from harness_gym.space import BASE_CONFIG, FACTORS, HarnessConfig


def latest(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One record per episode: a resumed run re-runs errored episodes, and the last record wins."""
    by_id: dict[str, Mapping[str, Any]] = {}
    for record in records:
        by_id.pop(str(record.get("episode_id")), None)
        by_id[str(record.get("episode_id"))] = record
    return list(by_id.values())


def error_kind(record: Mapping[str, Any]) -> str | None:
    """Why an episode errored (agent, endpoint, env, grader), or None when it did not. A grader
    error is an error even in records written before it was reported as one."""
    if record.get("error_kind"):
        return str(record["error_kind"])
    if record.get("grader_error"):
        return "grader"
    return "unknown" if record.get("error") else None


def succeeded(record: Mapping[str, Any]) -> bool:
    """Passed: reward 1 and no error of any kind (an errored episode is a failure)."""
    return bool(record.get("passed")) and error_kind(record) is None


def role(record: Mapping[str, Any]) -> str:
    return str(record.get("role") or "model")


def _scored(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Episodes that ran to an outcome (no error): the ones with steps, calls and tokens to count."""
    return [r for r in records if error_kind(r) is None]


def crossed_draws(
    cells: Mapping[tuple[str, str], Sequence[float]], *, resamples: int, rng: np.random.Generator
) -> tuple[float, np.ndarray]:
    """(mean, bootstrap draws of the mean) of values kept per (task, harness) cell, resampling tasks
    and harnesses independently (Owen's pigeonhole bootstrap for crossed factors). Each draw weighs a
    cell by (times its task was drawn) x (times its harness was drawn); a draw whose picks hold no
    episode at all is dropped (it cannot happen when every task met every harness)."""
    tasks = sorted({task for task, _ in cells})
    harnesses = sorted({harness for _, harness in cells})
    task_index = {t: i for i, t in enumerate(tasks)}
    harness_index = {h: i for i, h in enumerate(harnesses)}
    sums = np.zeros((len(tasks), len(harnesses)))
    counts = np.zeros((len(tasks), len(harnesses)))
    for (task, harness), values in cells.items():
        sums[task_index[task], harness_index[harness]] += float(np.sum(values))
        counts[task_index[task], harness_index[harness]] += len(values)
    estimate = float(sums.sum() / counts.sum())

    def weights(size: int) -> np.ndarray:
        picks = rng.integers(0, size, size=(resamples, size))
        counted = np.zeros((resamples, size))
        np.add.at(counted, (np.arange(resamples)[:, None], picks), 1.0)
        return counted

    task_weights, harness_weights = weights(len(tasks)), weights(len(harnesses))
    numerators = np.einsum("rt,th,rh->r", task_weights, sums, harness_weights)
    denominators = np.einsum("rt,th,rh->r", task_weights, counts, harness_weights)
    valid = denominators > 0
    return estimate, numerators[valid] / denominators[valid]


def outcome_cells(records: Sequence[Mapping[str, Any]], value: str = "passed") -> dict[tuple[str, str], list[float]]:
    """``value`` of each record per (task, harness) cell, what :func:`crossed_draws` resamples; for
    ``passed`` an errored episode counts as a failure."""
    cells: dict[tuple[str, str], list[float]] = defaultdict(list)
    for record in records:
        score = float(succeeded(record) if value == "passed" else record[value])
        cells[(record["task_id"], str(record.get("harness", "")))].append(score)
    return cells


def cluster_bootstrap(
    records: Sequence[Mapping[str, Any]],
    value: str = "passed",
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """(mean, low, high) of ``value`` over records, with tasks and harnesses resampled as crossed
    clusters (:func:`crossed_draws`). For ``passed`` an errored episode counts as a failure."""
    cells = outcome_cells(records, value)
    if not cells:
        return float("nan"), float("nan"), float("nan")
    estimate, draws = crossed_draws(cells, resamples=resamples, rng=np.random.default_rng(seed))
    tail = (1 - confidence) / 2
    return estimate, float(np.quantile(draws, tail)), float(np.quantile(draws, 1 - tail))


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def _tokens(record: Mapping[str, Any]) -> int:
    tokens = record.get("tokens") or {}
    return int(tokens.get("prompt", 0)) + int(tokens.get("completion", 0))


def _rates(group: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Error and outcome figures of a group of episodes."""
    kinds: dict[str, int] = defaultdict(int)
    for record in group:
        kind = error_kind(record)
        if kind:
            kinds[kind] += 1
    errors = sum(kinds.values())
    return {
        "errors": errors,
        "error_rate": errors / len(group) if group else float("nan"),
        "errors_by_kind": dict(sorted(kinds.items())),
        "context_overflows": sum(1 for r in group if r.get("outcome") == "context_overflow"),
    }


STRONG_GRADER = 1.0  # the mutation score of a task whose hidden tests killed every mutant


def known_score(value: Any) -> float | None:
    """A mutation score, or None when ``value`` is none (not measured, or not a number in [0, 1]):
    an unknown score is never counted as strong."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        return None  # NaN fails the range check too
    return float(value)


def load_mutation_scores(path: str | Path) -> dict[str, float | None]:
    """Task id -> mutation score, from a ``harness-gym tasks audit --mutants --json`` file."""
    try:
        per_task = json.loads(Path(path).read_text(encoding="utf-8"))["per_task"]
        return {str(task): entry.get("score") for task, entry in per_task.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"{path}: not a `harness-gym tasks audit --mutants --json` file ({exc})") from exc


def _strong_grader(
    model: Sequence[Mapping[str, Any]], scores: Mapping[str, float | None], resamples: int, seed: int
) -> dict[str, Any] | None:
    """Pass@1 on the tasks whose grader killed every mutant (None when no task's score is known):
    beside the overall figure, it shows how much of it weak graders may have paid for. A task's
    score is the one in ``scores`` (an audit file) if it names the task, else the one its records
    carry (the bench writes each task's recorded score); a task with neither is unknown."""
    known: dict[str, float | None] = {}
    for record in model:
        task = record["task_id"]
        value = known_score(scores[task] if task in scores else record.get("mutation_score"))
        if known.get(task) is None:  # a record without a score does not unset another's
            known[task] = value
    if not any(v is not None for v in known.values()):
        return None
    strong = {t for t, v in known.items() if v is not None and v >= STRONG_GRADER}
    group = [r for r in model if r["task_id"] in strong]
    estimate, low, high = cluster_bootstrap(group, resamples=resamples, seed=seed) if group else (None, None, None)
    return {
        "min_score": STRONG_GRADER,
        "tasks": len(strong),
        "weak_tasks": sum(v is not None and v < STRONG_GRADER for v in known.values()),
        "unknown_tasks": sum(v is None for v in known.values()),
        "episodes": len(group),
        "pass_at_1": estimate,
        "ci95": [low, high],
    }


def summarize(
    records: Sequence[Mapping[str, Any]],
    *,
    resamples: int = 2000,
    seed: int = 0,
    mutation_scores: Mapping[str, float | None] | None = None,
) -> dict[str, Any]:
    """Everything the report shows, as plain data. Pass@1 counts every episode, an errored one
    as a failure, with the error rate beside it; steps, calls and tokens count the episodes that
    ran. Calibration agents' episodes (``role`` reference / null) are reported apart. With task
    mutation scores (``mutation_scores``, or a record's ``mutation_score``), Pass@1 on the
    strong-grader tasks too."""
    everything = latest(records)
    model = [r for r in everything if role(r) == "model"]
    scored = _scored(model)
    by_harness: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in model:
        by_harness[record["harness"]].append(record)
    present = {role(r) for r in everything} - {"model"}
    calibration_roles = [name for name in ("reference", "null") if name in present] + sorted(
        present - {"reference", "null"}
    )
    harnesses = {}
    for env_id, group in sorted(by_harness.items()):
        estimate, low, high = cluster_bootstrap(group, resamples=resamples, seed=seed)
        ran = _scored(group)
        calls = sum(r.get("tool_calls", 0) for r in ran)
        steps = sum(r.get("steps", 0) for r in ran)
        harnesses[env_id] = {
            "class": group[0]["class"],
            "config": group[0].get("config"),
            "episodes": len(group),
            "tasks": len({r["task_id"] for r in group}),
            "pass_at_1": estimate,
            "ci95": [low, high],
            **_rates(group),
            "mean_reward": _mean([float(r.get("reward", 0.0)) for r in group]),
            "tool_call_rate": (sum(r.get("steps", 0) - r.get("no_call_steps", 0) for r in ran) / steps)
            if steps
            else None,
            "tool_call_validity": (sum(r.get("valid_tool_calls", 0) for r in ran) / calls) if calls else None,
            "parse_errors_per_step": (sum(r.get("parse_errors", 0) for r in ran) / steps) if steps else None,
            "mean_steps": _mean([r.get("steps", 0) for r in ran]),
            "mean_tokens": _mean([_tokens(r) for r in ran]),
            "calibration": {
                name: _mean([float(succeeded(r)) for r in everything if role(r) == name and r["harness"] == env_id])
                for name in calibration_roles
            },
        }
    classes = {}
    for klass in HARNESS_CLASSES:
        group = [r for r in model if r["class"] == klass]
        if group:
            estimate, low, high = cluster_bootstrap(group, resamples=resamples, seed=seed)
            classes[klass] = {
                "pass_at_1": estimate,
                "ci95": [low, high],
                "episodes": len(group),
                "harnesses": len({r["harness"] for r in group}),
                **_rates(group),
            }
    overall_estimate, overall_low, overall_high = cluster_bootstrap(model, resamples=resamples, seed=seed)
    agent_s = sum(float((r.get("durations") or {}).get("agent_s", 0.0)) for r in scored if _tokens(r))
    completion = sum(int((r.get("tokens") or {}).get("completion", 0)) for r in scored)
    summary: dict[str, Any] = {
        "episodes": len(model),
        "scored": len(scored),
        **_rates(model),
        "error_examples": _error_examples(model),
        "agent": next((r.get("agent") for r in scored), None),
        "harnesses": harnesses,
        "classes": classes,
        "calibration": _calibration(everything, calibration_roles, resamples, seed),
        "specialisation_gap": None,
        "main_effects": {},
        "interactions": {},
        "overall": {
            "pass_at_1": overall_estimate,
            "ci95": [overall_low, overall_high],
            "tool_call_rate": _call_rate(scored),
            "tool_call_validity": _ratio(scored, "valid_tool_calls", "tool_calls"),
            "tool_call_validity_by_format": tool_call_validity_by_format(r.get("tool_calls_by_format") for r in scored),
            "parse_errors_per_step": _ratio(scored, "parse_errors", "steps"),
            "mean_steps": _mean([r.get("steps", 0) for r in scored]),
            "prompt_tokens": sum(int((r.get("tokens") or {}).get("prompt", 0)) for r in scored),
            "completion_tokens": completion,
            "tokens_per_episode": _mean([_tokens(r) for r in scored]) if any(_tokens(r) for r in scored) else None,
            "completion_tokens_per_s": completion / agent_s if agent_s > 0 and completion else None,
        },
    }
    summary["strong_grader"] = _strong_grader(model, mutation_scores or {}, resamples, seed)
    summary["warnings"] = _warnings(summary, scored)
    base = harnesses.get(BASE_CONFIG.env_id)
    if base is not None and "heldout" in classes:
        summary["specialisation_gap"] = {
            "base": base["pass_at_1"],
            "heldout": classes["heldout"]["pass_at_1"],
            "gap": base["pass_at_1"] - classes["heldout"]["pass_at_1"],
        }
    in_space = [r for r in model if r.get("config")]
    if in_space:
        grand = _mean([float(succeeded(r)) for r in in_space])
        for index, factor in enumerate(FACTORS):
            levels: dict[str, float | None] = {}
            for level in range(3):
                values = [float(succeeded(r)) for r in in_space if HarnessConfig.parse(r["config"])[index] == level]
                levels[str(level)] = (_mean(values) - grand) if values else None
            summary["main_effects"][factor] = levels
        for (i, a), (j, b) in itertools.combinations(enumerate(FACTORS), 2):
            table: list[list[float | None]] = [[None] * 3 for _ in range(3)]
            for la in range(3):
                for lb in range(3):
                    values = [
                        float(succeeded(r))
                        for r in in_space
                        if HarnessConfig.parse(r["config"])[i] == la and HarnessConfig.parse(r["config"])[j] == lb
                    ]
                    table[la][lb] = _mean(values) if values else None
            summary["interactions"][f"{a}x{b}"] = table
    return summary


def _error_examples(records: Sequence[Mapping[str, Any]], limit: int = 5) -> list[str]:
    """The most frequent error messages, most frequent first (one line each)."""
    counts: dict[str, int] = defaultdict(int)
    for record in records:
        if error_kind(record):
            counts[str(record.get("error") or f"grader: {record.get('grader_error')}")] += 1
    ranked = sorted(counts.items(), key=lambda item: -item[1])[:limit]
    return [message if count == 1 else f"{message} ({count}x)" for message, count in ranked]


def _call_rate(records: Sequence[Mapping[str, Any]]) -> float | None:
    steps = sum(r.get("steps", 0) for r in records)
    return sum(r.get("steps", 0) - r.get("no_call_steps", 0) for r in records) / steps if steps else None


def _calibration(
    records: Sequence[Mapping[str, Any]], roles: Sequence[str], resamples: int, seed: int
) -> dict[str, Any]:
    """Pass@1 of the model and of each calibration agent, overall and per class, on the same harnesses."""
    out: dict[str, Any] = {}
    if not roles:
        return out
    for name in ("model", *roles):
        group = [r for r in records if role(r) == name]
        if not group:
            continue
        estimate, low, high = cluster_bootstrap(group, resamples=resamples, seed=seed)
        out[name] = {
            "agent": next((r.get("agent") for r in group if r.get("agent")), name),
            "episodes": len(group),
            "pass_at_1": estimate,
            "ci95": [low, high],
            "errors": _rates(group)["errors"],
            "classes": {
                klass: _mean([float(succeeded(r)) for r in group if r["class"] == klass])
                for klass in HARNESS_CLASSES
                if any(r["class"] == klass for r in group)
            },
        }
    return out


def _warnings(summary: Mapping[str, Any], scored: Sequence[Mapping[str, Any]]) -> list[str]:
    """What makes the numbers suspect, said plainly."""
    warnings = []
    if scored and not any(r.get("valid_tool_calls", 0) for r in scored):
        warnings.append(
            f"the agent made no valid tool call in {len(scored)} episodes: it may not see its tools "
            "(check --tool-mode) or not follow the call format; its Pass@1 says little about the harnesses"
        )
    if summary["episodes"] and summary["errors"]:
        kinds = ", ".join(f"{k} {v}" for k, v in summary["errors_by_kind"].items())
        warnings.append(
            f"{summary['errors']} of {summary['episodes']} episodes errored ({kinds}); they count as failures"
        )
    if summary["context_overflows"]:
        warnings.append(
            f"{summary['context_overflows']} episodes ended because the prompt outgrew the model's context "
            "(outcome context_overflow, counted as failures)"
        )
    calibration = summary.get("calibration") or {}
    if "reference" in calibration and calibration["reference"]["pass_at_1"] < 1.0:
        warnings.append("the reference agent did not solve every task: some harness or task is broken")
    if "null" in calibration and calibration["null"]["pass_at_1"] > 0.0:
        warnings.append("the null agent passed some task: its grader rewards doing nothing")
    return warnings


def _ratio(records: Sequence[Mapping[str, Any]], numerator: str, denominator: str) -> float | None:
    total = sum(r.get(denominator, 0) for r in records)
    return sum(r.get(numerator, 0) for r in records) / total if total else None


def _pct(value: float | None) -> str:
    return "–" if value is None or value != value else f"{100 * value:.1f}"


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None or value != value else f"{value:.{digits}f}"


def _errors_cell(row: Mapping[str, Any]) -> str:
    return f"{row['errors']} ({_pct(row['error_rate'])}%)" if row.get("errors") else "0"


def render_markdown(summary: Mapping[str, Any]) -> str:
    overall = summary["overall"]
    kinds = ", ".join(f"{k} {v}" for k, v in summary["errors_by_kind"].items())
    speed = ""
    if overall.get("tokens_per_episode") is not None:
        speed = f", {overall['tokens_per_episode']:.0f} tokens per episode"
        if overall.get("completion_tokens_per_s") is not None:
            speed += f", {overall['completion_tokens_per_s']:.1f} generated tokens/s"
    lines = [
        "# Benchmark report",
        "",
        f"Agent {summary.get('agent') or '?'}: {summary['episodes']} episodes, "
        f"{summary['errors']} errors ({_pct(summary['error_rate'])}%{'; ' + kinds if kinds else ''}), "
        f"{summary['context_overflows']} context overflows. "
        f"Pass@1 overall {_pct(overall['pass_at_1'])}% "
        f"(95% CI {_pct(overall['ci95'][0])}–{_pct(overall['ci95'][1])}; errors count as failures), "
        f"tool-call rate {_pct(overall['tool_call_rate'])}% of steps, tool-call validity "
        f"{_pct(overall['tool_call_validity'])}%, parse errors per step "
        f"{overall['parse_errors_per_step'] or 0:.2f}, mean steps {_num(overall['mean_steps'])}, "
        f"tokens {overall['prompt_tokens']} prompt / {overall['completion_tokens']} completion{speed}.",
        "",
    ]
    strong = summary.get("strong_grader")
    if strong:
        lines += [
            f"Pass@1 on strong-grader tasks (mutation score {strong['min_score']:g}; {strong['tasks']} tasks, "
            f"{strong['weak_tasks']} weaker, {strong['unknown_tasks']} unknown): "
            + (
                f"{_pct(strong['pass_at_1'])}% (95% CI {_pct(strong['ci95'][0])}–{_pct(strong['ci95'][1])}) "
                if strong["pass_at_1"] is not None
                else "no episode "
            )
            + f"beside {_pct(overall['pass_at_1'])}% overall.",
            "",
        ]
    if summary.get("warnings"):
        lines += ["## Warnings", ""] + [f"- {w}" for w in summary["warnings"]] + [""]
    calibration = summary.get("calibration") or {}
    if calibration:
        classes = [k for k in HARNESS_CLASSES if any(k in row["classes"] for row in calibration.values())]
        lines += [
            "## Calibration (same harnesses and tasks; reference should be 100, null 0)",
            "",
            "| agent | episodes | errors | Pass@1 % | " + " | ".join(f"{k} %" for k in classes) + " |",
            "|---|---|---|---|" + "---|" * len(classes),
        ]
        for name, row in calibration.items():
            label = f"{name} ({row['agent']})" if name == "model" else name
            cells = " | ".join(_pct(row["classes"].get(k)) for k in classes)
            lines.append(f"| {label} | {row['episodes']} | {row['errors']} | {_pct(row['pass_at_1'])} | {cells} |")
        lines.append("")
    lines += [
        "## Per class",
        "",
        "| class | harnesses | episodes | Pass@1 % | 95% CI | errors |",
        "|---|---|---|---|---|---|",
    ]
    for klass, row in summary["classes"].items():
        lines.append(
            f"| {klass} | {row['harnesses']} | {row['episodes']} | {_pct(row['pass_at_1'])} | "
            f"{_pct(row['ci95'][0])}–{_pct(row['ci95'][1])} | {_errors_cell(row)} |"
        )
    gap = summary.get("specialisation_gap")
    if gap:
        lines += [
            "",
            f"Specialisation gap (base harness minus held-out): {100 * gap['gap']:+.1f} points "
            f"({_pct(gap['base'])}% vs {_pct(gap['heldout'])}%).",
        ]
    roles = list(dict.fromkeys(name for row in summary["harnesses"].values() for name in row.get("calibration", {})))
    lines += [
        "",
        "## Per harness",
        "",
        "| harness | class | episodes | Pass@1 % | 95% CI | errors | "
        + "".join(f"{name} % | " for name in roles)
        + "tool-call rate % | call validity % | parse errors/step | steps | tokens |",
        "|---|---|---|---|---|---|" + "---|" * len(roles) + "---|---|---|---|---|",
    ]
    for env_id, row in summary["harnesses"].items():
        lines.append(
            f"| {env_id} | {row['class']} | {row['episodes']} | {_pct(row['pass_at_1'])} | "
            f"{_pct(row['ci95'][0])}–{_pct(row['ci95'][1])} | {_errors_cell(row)} | "
            + "".join(f"{_pct(row['calibration'].get(name))} | " for name in roles)
            + f"{_pct(row['tool_call_rate'])} | {_pct(row['tool_call_validity'])} | "
            f"{row['parse_errors_per_step'] or 0:.2f} | {_num(row['mean_steps'])} | {_num(row['mean_tokens'], 0)} |"
        )
    if summary["main_effects"]:
        lines += [
            "",
            "## Factor main effects (in-space Pass@1 at a level minus the in-space mean, points)",
            "",
            "| factor | level 0 | level 1 | level 2 |",
            "|---|---|---|---|",
        ]
        for factor, levels in summary["main_effects"].items():
            effects = [("–" if v is None else f"{100 * v:+.1f}") for v in levels.values()]
            lines.append(f"| {factor} | " + " | ".join(effects) + " |")
        lines += ["", "## Pairwise interactions (Pass@1 %, rows: first factor's level, columns: second's)", ""]
        for pair, table in summary["interactions"].items():
            lines += [f"**{pair}**", "", "| | 0 | 1 | 2 |", "|---|---|---|---|"]
            for level, row in enumerate(table):
                lines.append(f"| {level} | " + " | ".join(_pct(v) for v in row) + " |")
            lines.append("")
    if summary["error_examples"]:
        lines += ["", "## Errors (most frequent first)", ""] + [f"- {e}" for e in summary["error_examples"]]
    return "\n".join(lines) + "\n"


def class_bars(summary: Mapping[str, Any]) -> dict[str, list[float | None]]:
    """The bars of classes.png, per harness class: the model's Pass@1, then each calibration agent's
    (reference, null, ...) on the same harnesses, so a model at 0% still shows what the harnesses allow."""
    names = list(summary["classes"])
    bars: dict[str, list[float | None]] = {"model": [summary["classes"][n]["pass_at_1"] for n in names]}
    for name, row in (summary.get("calibration") or {}).items():
        if name != "model":
            bars[name] = [row["classes"].get(n) for n in names]
    return bars


def write_plots(summary: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """factor_effects.png (heatmap) and classes.png (bars with 95% CIs); none without matplotlib."""
    try:
        import matplotlib  # the optional bench extra, needed only for plots

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    paths = []
    if summary["classes"]:
        names = list(summary["classes"])
        series = class_bars(summary)
        width = 0.8 / len(series)
        fig, ax = plt.subplots(figsize=(6.5, 3.5))
        colours = ["#4c72b0", "#55a868", "#c44e52", "#8172b2", "#ccb974"]
        for index, (label, values) in enumerate(series.items()):
            positions = [i - 0.4 + width * (index + 0.5) for i in range(len(names))]
            heights = [np.nan if v is None else 100 * v for v in values]
            errors = None
            if index == 0:  # the model's own bars carry their 95% intervals
                low = [h - 100 * summary["classes"][n]["ci95"][0] for h, n in zip(heights, names, strict=True)]
                high = [100 * summary["classes"][n]["ci95"][1] - h for h, n in zip(heights, names, strict=True)]
                errors = [low, high]
            ax.bar(positions, heights, width, yerr=errors, capsize=3, label=label, color=colours[index % len(colours)])
        ax.set_xticks(range(len(names)), names)
        ax.set_ylabel("Pass@1 (%)")
        ax.set_ylim(0, 105)
        ax.set_title("Pass@1 by harness class (model: 95% bootstrap CI)")
        if len(series) > 1:
            ax.legend(fontsize=8)
        fig.tight_layout()
        paths.append(out_dir / "classes.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    if summary["main_effects"]:
        grid = np.array(
            [[np.nan if v is None else 100 * v for v in levels.values()] for levels in summary["main_effects"].values()]
        )
        fig, ax = plt.subplots(figsize=(4.5, 4))
        limit = max(float(np.nanmax(np.abs(grid))) if np.isfinite(grid).any() else 1.0, 1.0)
        image = ax.imshow(grid, cmap="RdBu", vmin=-limit, vmax=limit)
        ax.set_xticks(range(3), ["0 base", "1 var. I", "2 var. II"])
        ax.set_yticks(range(len(FACTORS)), list(summary["main_effects"]))
        for (y, x), value in np.ndenumerate(grid):
            ax.text(x, y, "–" if np.isnan(value) else f"{value:+.1f}", ha="center", va="center", fontsize=9)
        fig.colorbar(image, ax=ax, label="points vs in-space mean")
        ax.set_title("Factor main effects on Pass@1")
        fig.tight_layout()
        paths.append(out_dir / "factor_effects.png")
        fig.savefig(paths[-1], dpi=120)
        plt.close(fig)
    return paths


def write_report(records: Sequence[Mapping[str, Any]], out_dir: str | Path, **options: Any) -> dict[str, Path]:
    """report.md, report.json and the plots, in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = summarize(records, **options)
    paths = {"markdown": out / "report.md", "json": out / "report.json"}
    paths["markdown"].write_text(render_markdown(summary), encoding="utf-8")
    paths["json"].write_text(json.dumps(summary, indent=2, default=str) + "\n", encoding="utf-8")
    for plot in write_plots(summary, out):
        paths[plot.stem] = plot
    return paths


def compare_results(
    a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]], *, resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Paired bootstrap of Pass@1 differences (b − a) per class, over the (harness, task) pairs both
    hold (the model's episodes; errored ones count as failures). ``shared_units`` pairs matched;
    ``only_a`` / ``only_b`` were dropped because the other file lacks them."""

    def units(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], tuple[str, float]]:
        grouped: dict[tuple[str, str], list[float]] = defaultdict(list)
        klass: dict[tuple[str, str], str] = {}
        for r in latest(records):
            if role(r) != "model":
                continue
            grouped[(r["harness"], r["task_id"])].append(float(succeeded(r)))
            klass[(r["harness"], r["task_id"])] = r["class"]
        return {k: (klass[k], float(np.mean(v))) for k, v in grouped.items()}

    ua, ub = units(a), units(b)
    shared = sorted(set(ua) & set(ub))
    out: dict[str, Any] = {
        "shared_units": len(shared),
        "only_a": len(set(ua) - set(ub)),
        "only_b": len(set(ub) - set(ua)),
    }
    rng = np.random.default_rng(seed)
    for klass in [*HARNESS_CLASSES, "all"]:
        keys = [k for k in shared if klass == "all" or ua[k][0] == klass]
        if not keys:
            continue
        difference, stats = crossed_draws(
            {(task, harness): [ub[(harness, task)][1] - ua[(harness, task)][1]] for harness, task in keys},
            resamples=resamples,
            rng=rng,
        )
        out[klass] = {
            "difference": difference,
            "ci95": [float(np.quantile(stats, 0.025)), float(np.quantile(stats, 0.975))],
            "units": len(keys),
            "a": float(np.mean([ua[k][1] for k in keys])),
            "b": float(np.mean([ub[k][1] for k in keys])),
        }
    return out
