"""The benchmark report: Pass@1 with bootstrap intervals per harness and per class, the
specialisation gap, per-factor main effects and pairwise interactions, tool-call validity and
parse errors, steps and tokens; as Markdown, JSON and PNG plots.

Pass@1 of a set of episodes is the mean of ``passed`` (reward 1) over its episodes, which for R
runs per task equals the mean over runs of each run's pass rate. Intervals resample tasks (with
all their runs and harnesses), so they reflect task sampling, and differences between harnesses
evaluated on the same tasks stay paired.
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
from harness_gym.space import BASE_CONFIG, FACTORS, HarnessConfig

CLASS_ORDER = ("training", "heldout", "in_space", "preset", "out_of_space", "custom")


def load_records(path: str | Path) -> list[dict[str, Any]]:
    """Episode records from a results file (unreadable lines are skipped, errors kept)."""
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def _scored(records: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [r for r in records if r.get("error") is None]


def cluster_bootstrap(
    records: Sequence[Mapping[str, Any]],
    value: str = "passed",
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """(mean, low, high) of ``value`` over records, resampling tasks as clusters."""
    by_task: dict[str, list[float]] = defaultdict(list)
    for record in records:
        by_task[record["task_id"]].append(float(record[value]))
    if not by_task:
        return float("nan"), float("nan"), float("nan")
    tasks = sorted(by_task)
    sums = np.array([sum(by_task[t]) for t in tasks])
    counts = np.array([len(by_task[t]) for t in tasks])
    estimate = float(sums.sum() / counts.sum())
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(tasks), size=(resamples, len(tasks)))
    stats = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
    tail = (1 - confidence) / 2
    return estimate, float(np.quantile(stats, tail)), float(np.quantile(stats, 1 - tail))


def _mean(values: Sequence[float]) -> float:
    return float(np.mean(values)) if len(values) else float("nan")


def summarize(records: Sequence[Mapping[str, Any]], *, resamples: int = 2000, seed: int = 0) -> dict[str, Any]:
    """Everything the report shows, as plain data."""
    scored = _scored(records)
    by_harness: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for record in scored:
        by_harness[record["harness"]].append(record)
    harnesses = {}
    for env_id, group in sorted(by_harness.items()):
        estimate, low, high = cluster_bootstrap(group, resamples=resamples, seed=seed)
        calls = sum(r.get("tool_calls", 0) for r in group)
        steps = sum(r.get("steps", 0) for r in group)
        harnesses[env_id] = {
            "class": group[0]["class"],
            "config": group[0].get("config"),
            "episodes": len(group),
            "tasks": len({r["task_id"] for r in group}),
            "pass_at_1": estimate,
            "ci95": [low, high],
            "mean_reward": _mean([r["reward"] for r in group]),
            "tool_call_validity": (sum(r.get("valid_tool_calls", 0) for r in group) / calls) if calls else None,
            "parse_errors_per_step": (sum(r.get("parse_errors", 0) for r in group) / steps) if steps else None,
            "mean_steps": _mean([r.get("steps", 0) for r in group]),
            "mean_tokens": _mean(
                [r.get("tokens", {}).get("prompt", 0) + r.get("tokens", {}).get("completion", 0) for r in group]
            ),
        }
    classes = {}
    for klass in CLASS_ORDER:
        group = [r for r in scored if r["class"] == klass]
        if group:
            estimate, low, high = cluster_bootstrap(group, resamples=resamples, seed=seed)
            classes[klass] = {
                "pass_at_1": estimate,
                "ci95": [low, high],
                "episodes": len(group),
                "harnesses": len({r["harness"] for r in group}),
            }
    summary: dict[str, Any] = {
        "episodes": len(records),
        "scored": len(scored),
        "errors": len(records) - len(scored),
        "error_examples": [r["error"] for r in records if r.get("error")][:5],
        "harnesses": harnesses,
        "classes": classes,
        "specialisation_gap": None,
        "main_effects": {},
        "interactions": {},
        "overall": {
            "pass_at_1": _mean([float(r["passed"]) for r in scored]),
            "tool_call_validity": _ratio(scored, "valid_tool_calls", "tool_calls"),
            "tool_call_validity_by_format": tool_call_validity_by_format(r.get("tool_calls_by_format") for r in scored),
            "parse_errors_per_step": _ratio(scored, "parse_errors", "steps"),
            "mean_steps": _mean([r.get("steps", 0) for r in scored]),
            "prompt_tokens": sum(r.get("tokens", {}).get("prompt", 0) for r in scored),
            "completion_tokens": sum(r.get("tokens", {}).get("completion", 0) for r in scored),
        },
    }
    base = harnesses.get(BASE_CONFIG.env_id)
    if base is not None and "heldout" in classes:
        summary["specialisation_gap"] = {
            "base": base["pass_at_1"],
            "heldout": classes["heldout"]["pass_at_1"],
            "gap": base["pass_at_1"] - classes["heldout"]["pass_at_1"],
        }
    in_space = [r for r in scored if r.get("config")]
    if in_space:
        grand = _mean([float(r["passed"]) for r in in_space])
        for index, factor in enumerate(FACTORS):
            levels = {}
            for level in range(3):
                values = [float(r["passed"]) for r in in_space if HarnessConfig.parse(r["config"])[index] == level]
                levels[str(level)] = (_mean(values) - grand) if values else None
            summary["main_effects"][factor] = levels
        for (i, a), (j, b) in itertools.combinations(enumerate(FACTORS), 2):
            table = [[None] * 3 for _ in range(3)]
            for la in range(3):
                for lb in range(3):
                    values = [
                        float(r["passed"])
                        for r in in_space
                        if HarnessConfig.parse(r["config"])[i] == la and HarnessConfig.parse(r["config"])[j] == lb
                    ]
                    table[la][lb] = _mean(values) if values else None
            summary["interactions"][f"{a}x{b}"] = table
    return summary


def _ratio(records: Sequence[Mapping[str, Any]], numerator: str, denominator: str) -> float | None:
    total = sum(r.get(denominator, 0) for r in records)
    return sum(r.get(numerator, 0) for r in records) / total if total else None


def _pct(value: float | None) -> str:
    return "–" if value is None or value != value else f"{100 * value:.1f}"


def render_markdown(summary: Mapping[str, Any]) -> str:
    lines = [
        "# Benchmark report",
        "",
        f"{summary['episodes']} episodes ({summary['errors']} errors). "
        f"Pass@1 overall {_pct(summary['overall']['pass_at_1'])}%, tool-call validity "
        f"{_pct(summary['overall']['tool_call_validity'])}%, parse errors per step "
        f"{summary['overall']['parse_errors_per_step'] or 0:.2f}, mean steps {summary['overall']['mean_steps']:.1f}, "
        f"tokens {summary['overall']['prompt_tokens']} prompt / {summary['overall']['completion_tokens']} completion.",
        "",
    ]
    lines += ["## Per class", "", "| class | harnesses | episodes | Pass@1 % | 95% CI |", "|---|---|---|---|---|"]
    for klass, row in summary["classes"].items():
        lines.append(
            f"| {klass} | {row['harnesses']} | {row['episodes']} | {_pct(row['pass_at_1'])} | "
            f"{_pct(row['ci95'][0])}–{_pct(row['ci95'][1])} |"
        )
    gap = summary.get("specialisation_gap")
    if gap:
        lines += [
            "",
            f"Specialisation gap (base harness minus held-out): {100 * gap['gap']:+.1f} points "
            f"({_pct(gap['base'])}% vs {_pct(gap['heldout'])}%).",
        ]
    lines += [
        "",
        "## Per harness",
        "",
        "| harness | class | episodes | Pass@1 % | 95% CI | mean reward | call validity % | parse errors/step | steps | tokens |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for env_id, row in summary["harnesses"].items():
        lines.append(
            f"| {env_id} | {row['class']} | {row['episodes']} | {_pct(row['pass_at_1'])} | "
            f"{_pct(row['ci95'][0])}–{_pct(row['ci95'][1])} | {row['mean_reward']:.3f} | "
            f"{_pct(row['tool_call_validity'])} | {row['parse_errors_per_step'] or 0:.2f} | "
            f"{row['mean_steps']:.1f} | {row['mean_tokens']:.0f} |"
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
            cells = [("–" if v is None else f"{100 * v:+.1f}") for v in levels.values()]
            lines.append(f"| {factor} | " + " | ".join(cells) + " |")
        lines += ["", "## Pairwise interactions (Pass@1 %, rows: first factor's level, columns: second's)", ""]
        for pair, table in summary["interactions"].items():
            lines += [f"**{pair}**", "", "| | 0 | 1 | 2 |", "|---|---|---|---|"]
            for level, row in enumerate(table):
                lines.append(f"| {level} | " + " | ".join(_pct(v) for v in row) + " |")
            lines.append("")
    if summary["error_examples"]:
        lines += ["", "## Errors", ""] + [f"- {e}" for e in summary["error_examples"]]
    return "\n".join(lines) + "\n"


def write_plots(summary: Mapping[str, Any], out_dir: Path) -> list[Path]:
    """factor_effects.png (heatmap) and classes.png (bars with 95% CIs); none without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    paths = []
    if summary["classes"]:
        fig, ax = plt.subplots(figsize=(6, 3.5))
        names = list(summary["classes"])
        values = [100 * summary["classes"][n]["pass_at_1"] for n in names]
        low = [v - 100 * summary["classes"][n]["ci95"][0] for v, n in zip(values, names, strict=True)]
        high = [100 * summary["classes"][n]["ci95"][1] - v for v, n in zip(values, names, strict=True)]
        ax.bar(names, values, yerr=[low, high], capsize=4, color="#4c72b0")
        ax.set_ylabel("Pass@1 (%)")
        ax.set_ylim(0, 100)
        ax.set_title("Pass@1 by harness class (95% bootstrap CI)")
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
    """Paired bootstrap of Pass@1 differences (b − a) per class, over the (harness, task) pairs both hold."""

    def units(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], tuple[str, float]]:
        grouped: dict[tuple[str, str], list[float]] = defaultdict(list)
        klass: dict[tuple[str, str], str] = {}
        for r in _scored(records):
            grouped[(r["harness"], r["task_id"])].append(float(r["passed"]))
            klass[(r["harness"], r["task_id"])] = r["class"]
        return {k: (klass[k], float(np.mean(v))) for k, v in grouped.items()}

    ua, ub = units(a), units(b)
    shared = sorted(set(ua) & set(ub))
    out: dict[str, Any] = {"shared_units": len(shared)}
    rng = np.random.default_rng(seed)
    for klass in [*CLASS_ORDER, "all"]:
        keys = [k for k in shared if klass == "all" or ua[k][0] == klass]
        if not keys:
            continue
        diffs = np.array([ub[k][1] - ua[k][1] for k in keys])
        tasks = sorted({k[1] for k in keys})
        by_task = {t: diffs[[i for i, k in enumerate(keys) if k[1] == t]] for t in tasks}
        sums = np.array([by_task[t].sum() for t in tasks])
        counts = np.array([len(by_task[t]) for t in tasks])
        picks = rng.integers(0, len(tasks), size=(resamples, len(tasks)))
        stats = sums[picks].sum(axis=1) / counts[picks].sum(axis=1)
        out[klass] = {
            "difference": float(diffs.mean()),
            "ci95": [float(np.quantile(stats, 0.025)), float(np.quantile(stats, 0.975))],
            "units": len(keys),
            "a": float(np.mean([ua[k][1] for k in keys])),
            "b": float(np.mean([ub[k][1] for k in keys])),
        }
    return out
