"""Validate ``harness-gym probe`` against rollouts: for every checkpoint of a replication work
folder, the probe's per-harness score against that checkpoint's bench Pass@1 in the same
harnesses (classes base, training and held-out), Spearman with a bootstrap interval per model and
pooled over the models' (model, harness) pairs.

    python benchmarks/probe_validation.py WORK/PROFILE --tasks SUITE --out probe-validation.json

The probe scores the reference's actions under each harness; rollout Pass@1 is what the model
does. Agreement says the probe can screen harnesses for that model without rollouts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from harness_gym.replication import probe

CLASSES = ("base", "training", "heldout")


def validate(work: Path, tasks: str, out: Path) -> dict[str, Any]:
    """Probe every ``model-*`` checkpoint with bench records in ``work``; write and return the figures."""
    models: dict[str, Any] = {}
    pooled_probe: dict[str, Any] = {"harnesses": {}}
    pooled_pass: dict[str, float] = {}
    for folder in sorted(work.glob("model-*-seed*")):
        bench = work / "bench" / folder.name.removeprefix("model-")
        files = [bench / k / "results.jsonl" for k in CLASSES if (bench / k / "results.jsonl").exists()]
        if not files:
            continue
        passes = probe.bench_pass_at_1(files)
        result = probe.probe(folder, ",".join(passes), tasks, progress=True)
        entry = {"pass_at_1": passes, "probe": {h: v["per_token"] for h, v in result["harnesses"].items()}}
        try:
            entry["agreement"] = probe.rank_agreement(result, passes)
        except ValueError as exc:  # fewer than 3 harnesses
            entry["agreement"] = {"error": str(exc)}
        models[folder.name] = entry
        for harness, score in entry["probe"].items():
            pooled_probe["harnesses"][f"{folder.name}|{harness}"] = {"per_token": score}
            pooled_pass[f"{folder.name}|{harness}"] = passes[harness]
    if not models:
        raise SystemExit(f"{work}: no checkpoint with bench records (model-*-seed* and bench/<arm>-seed*/)")
    figures: dict[str, Any] = {"work": str(work), "tasks": tasks, "models": models}
    figures["pooled"] = probe.rank_agreement(pooled_probe, pooled_pass) if len(pooled_pass) >= 3 else None
    out.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work", type=Path, help="a replication work folder (e.g. replication-work/small)")
    parser.add_argument("--tasks", required=True, help="the suite the bench's base/training/held-out classes ran")
    parser.add_argument("--out", type=Path, default=Path("probe-validation.json"))
    args = parser.parse_args(argv)
    figures = validate(args.work, args.tasks, args.out)
    for name, entry in figures["models"].items():
        print(name, json.dumps(entry["agreement"]))
    print("pooled", json.dumps(figures["pooled"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
