"""Training metrics from the executor's rollout log (``rollouts.jsonl``, one line per episode).

OpenRLHF already logs the executor's per-sample ``extra_logs`` (pass, parse errors, steps, context
resets, harness index, ...) as batch means. What needs whole groups is computed here: a GRPO group
is the rollouts of one dataset row, i.e. one (training step, task, harness). Per training step and
overall: pass rate, trainable rate (truncated rollouts excluded; a group counts only if it holds
both a pass and a failure), group outcome shares, pass rate per harness configuration, parse
errors per episode and the truncation rate.

``python -m trainers.metrics runs/NAME/rollouts.jsonl --out metrics.json --plot metrics.png``
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness_gym.metrics import (
    Outcome,
    group_outcome_shares,
    pass_rate,
    tool_call_validity_by_format,
    trainable_rate,
)
from harness_gym.records import load_records


def _group_key(record: Mapping[str, Any]) -> str:
    return f"{record.get('step')}|{record['task_id']}|{record['harness']}|{record.get('slot')}"


def _outcomes(records: Iterable[Mapping[str, Any]]) -> list[Outcome]:
    return [Outcome(_group_key(r), float(r["reward"]), bool(r.get("truncated"))) for r in records]


def summarize(records: Sequence[Mapping[str, Any]], threshold: float = 1.0) -> dict[str, Any]:
    """Metrics of a set of rollouts (see the module doc)."""
    if not records:
        return {"rollouts": 0}
    outcomes = _outcomes(records)
    by_harness: dict[str, list[Outcome]] = defaultdict(list)
    for record, outcome in zip(records, outcomes, strict=True):
        by_harness[str(record["harness"])].append(outcome)
    return {
        "rollouts": len(records),
        "pass_rate": pass_rate(outcomes, threshold),
        "trainable_rate": trainable_rate(outcomes, threshold),
        "group_shares": group_outcome_shares(outcomes, threshold),
        "truncation_rate": sum(o.truncated for o in outcomes) / len(outcomes),
        "parse_errors_per_episode": sum(int(r.get("parse_errors", 0)) for r in records) / len(records),
        "grader_error_rate": sum(bool(r.get("grader_error")) for r in records) / len(records),
        "context_resets_per_episode": sum(int(r.get("context_resets", 0)) for r in records) / len(records),
        "mean_steps": sum(int(r.get("steps", 0)) for r in records) / len(records),
        "pass_rate_by_harness": {h: pass_rate(o, threshold) for h, o in sorted(by_harness.items())},
        "tool_call_validity_by_format": tool_call_validity_by_format(r.get("tool_calls_by_format") for r in records),
    }


def training_metrics(records: Sequence[Mapping[str, Any]], threshold: float = 1.0) -> dict[str, Any]:
    """Overall metrics and one entry per training step (records without a step form step ``null``)."""
    by_step: dict[Any, list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        by_step[record.get("step")].append(record)
    steps = sorted(by_step, key=lambda s: (s is None, s if s is not None else 0))
    return {
        "overall": summarize(records, threshold),
        "steps": [{"step": s, **summarize(by_step[s], threshold)} for s in steps],
    }


def plot(metrics: Mapping[str, Any], path: str | Path) -> None:
    """Pass rate and trainable rate per training step (needs matplotlib: ``harness-gym[bench]``)."""
    import matplotlib  # the optional bench extra, needed only for plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [s for s in metrics["steps"] if s["step"] is not None]
    x = [s["step"] for s in steps]
    figure, axis = plt.subplots(figsize=(7, 3.5))
    axis.plot(x, [s["pass_rate"] for s in steps], marker="o", label="pass rate")
    axis.plot(x, [s["trainable_rate"] for s in steps], marker="s", label="trainable rate")
    axis.set_xlabel("training step")
    axis.set_ylim(-0.02, 1.02)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def rollout_files(rollout_log: Path) -> list[Path]:
    """The log itself (older runs) and every actor's log beside it (``rollouts.<host>-<pid>.jsonl``)."""
    own = [rollout_log] if rollout_log.is_file() else []
    return own + sorted(rollout_log.parent.glob(f"{rollout_log.stem}.*{rollout_log.suffix}"))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainers.metrics", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "rollouts", type=Path, help="the recipe's rollout log (JSON lines); per-actor logs beside it are merged"
    )
    parser.add_argument("--out", type=Path, help="write the metrics as JSON here")
    parser.add_argument("--plot", type=Path, help="write a PNG of the per-step rates here")
    parser.add_argument("--threshold", type=float, default=1.0, help="reward that counts as a pass")
    args = parser.parse_args(argv)
    files = rollout_files(args.rollouts)
    if not files:
        print(f"error: neither {args.rollouts} nor per-actor logs beside it exist", file=sys.stderr)
        return 2
    metrics = training_metrics([r for path in files for r in load_records(path)], args.threshold)
    overall = metrics["overall"]
    if overall["rollouts"]:
        print(
            f"{overall['rollouts']} rollouts: pass {overall['pass_rate']:.3f}, trainable {overall['trainable_rate']:.3f},"
            f" truncated {overall['truncation_rate']:.3f}, parse errors/episode {overall['parse_errors_per_episode']:.2f},"
            f" grader errors {overall['grader_error_rate']:.3f}"
        )
        for harness, rate in overall["pass_rate_by_harness"].items():
            print(f"  {harness:<28} pass {rate:.3f}")
    else:
        print("no rollouts logged yet")
    if args.out:
        args.out.write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
    if args.plot:
        plot(metrics, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
