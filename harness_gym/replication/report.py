"""The replication's outputs: results.json, report.md and three plots (pass rate per class per
arm, specialisation gap per arm, per-factor effects per arm)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness_gym.replication.data import ARM_SPECS
from harness_gym.space import BASE_CONFIG

CLASSES = ("base", "training", "heldout")
MODEL_ORDER = ("untrained", "base", "oa18")
MODEL_NAMES = {
    "untrained": "untrained SmolLM2-135M",
    "base": "arm A: base harness only",
    "oa18": "arm B: OA18, locality K=2",
}


def model_names(results: Mapping[str, Any]) -> list[str]:
    """The models of the report's tables, in order: the untrained model, then the profile's arms."""
    arms = list(results.get("profile", {}).get("arms") or MODEL_ORDER[1:])
    return [m for m in ("untrained", *arms) if m in results["models"]]


def model_name(name: str) -> str:
    return MODEL_NAMES.get(name) or (ARM_SPECS[name].description if name in ARM_SPECS else name)


def model_entry(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The figures of one model the report shows, from :func:`.evaluate.model_summary`."""
    classes: dict[str, Any] = {"base": dict(summary["base_harness"])}
    # a model benched in the base harness only has no figure for the other configurations (the base
    # harness belongs to the training set, so its episodes would pass for "training configs")
    base_only = set(summary["harnesses"]) <= {BASE_CONFIG.env_id}
    for klass in ("training", "heldout"):
        figures = {} if base_only else summary["classes"].get(klass, {})
        classes[klass] = {k: figures.get(k) for k in ("pass_at_1", "ci95", "episodes", "harnesses")}
    overall = summary["overall"]
    return {
        "classes": classes,
        "gap": summary["gap_interval"],
        "tool_call_rate": overall.get("tool_call_rate"),
        "tool_call_validity": overall.get("tool_call_validity"),
        "episodes": summary["episodes"],
        "errors": summary["errors"],
        "errors_by_kind": summary.get("errors_by_kind", {}),
        "main_effects": {} if base_only else summary["main_effects"],
        "per_harness": {
            h: {"class": v["class"], "pass_at_1": v["pass_at_1"], "episodes": v["episodes"]}
            for h, v in summary["harnesses"].items()
        },
    }


def pct(value: Any) -> str:
    return "–" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def _cell(figures: Mapping[str, Any]) -> str:
    ci = figures.get("ci95") or [None, None]
    return f"{pct(figures.get('pass_at_1'))} [{pct(ci[0])}, {pct(ci[1])}] (n={figures.get('episodes') or 0})"


def render_markdown(results: Mapping[str, Any]) -> str:
    """report.md: the setup, the budgets, the table, the per-factor effects and the verdict."""
    models = results["models"]
    lines = [
        "# Replication: the specialisation gap on a laptop",
        "",
        f"Profile `{results['profile']['name']}`; base harness (arm A) `{results['base_harness']}`; "
        f"training tasks `{results['suites']['training']}`; evaluation tasks `{results['suites']['evaluation']}` "
        f"(base harness: `{results['suites']['evaluation_base']}`); {results['suites']['dropped_duplicates']} "
        "evaluation tasks equal to a training task dropped.",
        "",
        "## Training budgets",
        "",
        "| arm | trajectories | trained tokens | all tokens | tasks | trimmed | harnesses | final loss | train s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    first_seed = (results.get("profile", {}).get("training_seeds") or [0])[0]
    for arm, data in results["data"].items():
        log = results["training"].get(arm) or results["training"].get(f"{arm}/seed{first_seed}", {})
        lines.append(
            f"| {model_name(arm)} | {data['trajectories']} | {data['trained_tokens']} | {data['total_tokens']} | "
            f"{data['tasks']} | {data['trimmed_tokens']} | {len(data['harnesses'])} | "
            f"{log.get('final_loss', float('nan')):.3f} | {log.get('seconds', float('nan')):.0f} |"
        )
    lines += [
        "",
        "## Pass@1 (%) with 95% bootstrap intervals (tasks and configurations resampled)",
        "",
        "| model | base harness | training configs | held-out configs | gap (base − held-out) | tool-call rate | call validity |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in model_names(results):
        entry = models[name]
        gap = entry["gap"]
        lines.append(
            f"| {model_name(name)} | {_cell(entry['classes']['base'])} | {_cell(entry['classes']['training'])} | "
            f"{_cell(entry['classes']['heldout'])} | {pct(gap['gap'])} [{pct(gap['ci95'][0])}, {pct(gap['ci95'][1])}] | "
            f"{pct(entry['tool_call_rate'])} | {pct(entry['tool_call_validity'])} |"
        )
    lines += ["", "## Per-factor effects (points of Pass@1 vs the in-space mean; levels 0/1/2)", ""]
    lines += ["| model | " + " | ".join("STOCW") + " |", "|---|" + "---|" * 5]
    for name in model_names(results):
        if models[name]["main_effects"]:
            effects = models[name]["main_effects"]
            cells = ["/".join("–" if v is None else f"{100 * v:+.0f}" for v in effects[f].values()) for f in "STOCW"]
            lines.append(f"| {model_name(name)} | " + " | ".join(cells) + " |")
    lines += _class_lines(results) + _seed_lines(results) + _acted_lines(results)
    lines += ["", "## Verdict", "", results.get("verdict", ""), ""]
    errors = {n: models[n]["errors"] for n in models if models[n]["errors"]}
    if errors:
        lines += [f"Errored episodes (counted as failures): {errors}", ""]
    return "\n".join(lines)


def _class_lines(results: Mapping[str, Any]) -> list[str]:
    """Pass@1 per evaluation class (first training seed), each with its crossed bootstrap interval."""
    names = [n for n in model_names(results) if results["models"][n].get("eval_classes")]
    classes = sorted({k for n in names for k in results["models"][n]["eval_classes"]})
    if not classes:
        return []
    lines = ["", "## Pass@1 (%) per evaluation class (first training seed; crossed bootstrap intervals)", ""]
    lines += ["| model | " + " | ".join(classes) + " |", "|---|" + "---|" * len(classes)]
    for name in names:
        figures = results["models"][name]["eval_classes"]
        lines.append(f"| {model_name(name)} | " + " | ".join(_cell(figures.get(k, {})) for k in classes) + " |")
    return lines


def _seed_lines(results: Mapping[str, Any]) -> list[str]:
    """Means over training seeds with t intervals: training-run variance, apart from the above."""
    seeds = results.get("over_seeds") or {}
    if not seeds:
        return []
    keys = sorted({k for v in seeds.values() for k in v})
    lines = ["", "## Over training seeds (mean [95% t interval], per-seed values)", ""]
    lines += ["| arm | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
    for arm, figures in seeds.items():
        cells = []
        for key in keys:
            f = figures.get(key) or {}
            ci = f.get("ci95") or [None, None]
            values = "/".join(pct(v) for v in f.get("values", []))
            cells.append(f"{pct(f.get('mean'))} [{pct(ci[0])}, {pct(ci[1])}] ({values})")
        lines.append(f"| {model_name(arm)} | " + " | ".join(cells) + " |")
    return lines


def _acted_lines(results: Mapping[str, Any]) -> list[str]:
    """Per-factor effects over the episodes where the factor acted, and how often it did."""
    names = [n for n in model_names(results) if results["models"][n].get("acted_effects")]
    if not names:
        return []
    lines = ["", "## Per-factor effects where the factor acted (points; share of episodes it acted in)", ""]
    lines += ["| model | " + " | ".join("STOCW") + " |", "|---|" + "---|" * 5]
    for name in names:
        cells = []
        for factor in "STOCW":
            f = results["models"][name]["acted_effects"][factor]
            effects = f.get("effects") or {}
            levels = "/".join("–" if v is None else f"{100 * v:+.0f}" for v in effects.values()) or "–"
            cells.append(f"{levels} ({pct(f.get('share'))}%)")
        lines.append(f"| {model_name(name)} | " + " | ".join(cells) + " |")
    return lines


def verdict(results: Mapping[str, Any]) -> str:
    """One paragraph that states the measured outcome plainly, intervals included."""
    models = results["models"]
    parts = []
    for arm in ("base", "oa18"):
        if arm in models:
            gap = models[arm]["gap"]
            parts.append(
                f"{model_name(arm)}: gap {pct(gap['gap'])} points [{pct(gap['ci95'][0])}, {pct(gap['ci95'][1])}]"
            )
    text = "; ".join(parts) + "."
    if "base" in models and "oa18" in models:
        a, b = models["base"]["gap"], models["oa18"]["gap"]
        held_a, held_b = models["base"]["classes"]["heldout"], models["oa18"]["classes"]["heldout"]
        overlap = not (held_b["ci95"][0] > held_a["ci95"][1] or held_a["ci95"][0] > held_b["ci95"][1])
        direction = "smaller" if b["gap"] < a["gap"] else "not smaller"
        text += (
            f" Arm B's gap is {direction} than arm A's; on the held-out configurations arm B scores "
            f"{pct(held_b['pass_at_1'])} vs {pct(held_a['pass_at_1'])} for arm A, and the two intervals "
            + ("overlap, so this run does not separate the arms." if overlap else "do not overlap.")
        )
    return text


def write_plots(results: Mapping[str, Any], out: Path) -> list[Path]:
    """pass_by_class.png, gap_by_arm.png, factor_effects.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    models = model_names(results)
    paths = []
    fig, ax = plt.subplots(figsize=(7, 3.8))
    width = 0.8 / len(models)
    for i, name in enumerate(models):
        entry = results["models"][name]["classes"]
        values = np.array([100 * (entry[c]["pass_at_1"] or 0.0) for c in CLASSES])
        low = np.array([100 * (entry[c]["ci95"] or [0, 0])[0] for c in CLASSES])
        high = np.array([100 * (entry[c]["ci95"] or [0, 0])[1] for c in CLASSES])
        ax.bar(
            np.arange(3) + i * width,
            values,
            width,
            yerr=[values - low, high - values],
            capsize=3,
            label=model_name(name),
        )
    ax.set_xticks(
        np.arange(3) + width * (len(models) - 1) / 2, ["base harness", "training configs", "held-out configs"]
    )
    ax.set_ylabel("Pass@1 (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8)
    ax.set_title("Pass@1 per harness class (95% bootstrap CI)")
    fig.tight_layout()
    paths.append(out / "pass_by_class.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5, 3.5))
    gaps = [results["models"][m]["gap"] for m in models]
    values = np.array([100 * g["gap"] for g in gaps])
    errors = [
        values - np.array([100 * g["ci95"][0] for g in gaps]),
        np.array([100 * g["ci95"][1] for g in gaps]) - values,
    ]
    ax.bar(
        [model_name(m).split(":")[0] for m in models],
        np.nan_to_num(values),
        yerr=np.nan_to_num(errors),
        capsize=4,
        color="#c44e52",
    )
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_ylabel("gap: base − held-out (points)")
    ax.set_title("Specialisation gap per arm (95% CI)")
    fig.tight_layout()
    paths.append(out / "gap_by_arm.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(1, 5, figsize=(12, 3), sharey=True)
    for axis, factor in zip(axes, "STOCW", strict=True):
        for name in models:
            effects = results["models"][name]["main_effects"].get(factor)
            if effects:
                axis.plot(
                    [0, 1, 2],
                    [np.nan if v is None else 100 * v for v in effects.values()],
                    marker="o",
                    label=model_name(name),
                )
        axis.axhline(0, color="grey", linewidth=0.6)
        axis.set_xticks([0, 1, 2])
        axis.set_title(f"factor {factor}")
    axes[0].set_ylabel("effect on Pass@1 (points)")
    axes[-1].legend(fontsize=7)
    fig.tight_layout()
    paths.append(out / "factor_effects.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def write_outputs(results: dict[str, Any], out: Path) -> list[Path]:
    """results.json, report.md and the plots in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    results["verdict"] = verdict(results)
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n", encoding="utf-8")
    (out / "report.md").write_text(render_markdown(results), encoding="utf-8")
    return [out / "results.json", out / "report.md", *write_plots(results, out)]
