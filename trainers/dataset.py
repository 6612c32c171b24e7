"""OpenRLHF prompt datasets from harness-gym training schedules.

Each row is one (task, harness) rollout request: ``{"prompt", "label", "datasource"}`` in JSON lines,
read by OpenRLHF with ``--data.input_key prompt --data.label_key label``. The ``label`` (JSON) is
what the agent executor acts on; the ``prompt`` is a human-readable tag, because the real prompt
(system message, tools, task) is built by the environment at reset.

Three kinds of dataset:

- **schedule** (Harness Scaling): tasks × a training set of configurations, with the locality-aware
  assignment (K configurations of a task in K consecutive steps) or an ablation (``random``,
  ``repeat``; training sets ``oa18``, ``random18``, ``all243``, ``base``);
- **harness** (HarnessAdapt-RL): every task under one harness (a preset, a spec file);
- **grid** (evaluation): every task under every harness of a list.

With ``min_mutation_score``, tasks whose grader is weaker (``harness-gym tasks audit --mutants``)
are dropped or down-weighted (``weak_task_weight``): a grader that accepts wrong solutions is a
reward the policy learns to collect.

Rows are written in schedule order; OpenRLHF shuffles its prompt dataloader, so training keeps the
order only with the Ray worker hook :func:`trainers.ordering.keep_prompt_order` (the launcher sets it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness_gym.design import build_schedule, training_set
from harness_gym.export import rollout_seed
from harness_gym.records import resolve_harnesses
from harness_gym.tasks import load_tasks
from trainers.executor_settings import RolloutRequest, resolve_harness

DATASOURCE = "harness-gym"


def row(request: RolloutRequest) -> dict[str, str]:
    step = f" step {request.step}" if request.step is not None else ""
    return {
        "prompt": f"[harness-gym] task {request.task_id} of {request.suite} under {request.harness_name}{step}",
        "label": request.to_label(),
        "datasource": DATASOURCE,
    }


def _task_ids(suite: str, limit: int | None) -> list[str]:
    ids = [t.id for t in load_tasks(suite)]
    return ids[:limit] if limit else ids


def grader_weights(
    suite: str, min_score: float, weak_weight: float = 0.0, scores_path: str | Path | None = None
) -> dict[str, float]:
    """Task id -> sampling weight by grader strength: 1 for a task whose mutation score (from a
    ``harness-gym tasks audit --mutants --json`` file, else the task's ``mutation_score`` metadata,
    which the generator records) is at least ``min_score``; ``weak_weight`` (0: dropped) for the
    rest, a task with no known score included: its grader's strength is not established, and a
    weak grader pays a policy for wrong solutions."""
    if not 0.0 <= weak_weight <= 1.0:
        raise ValueError(f"weak_task_weight must be in [0, 1], not {weak_weight}")
    audited: dict[str, Any] = {}
    if scores_path is not None:
        try:
            audited = json.loads(Path(scores_path).read_text(encoding="utf-8"))["per_task"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(
                f"mutation_scores {scores_path}: not a `tasks audit --mutants --json` file ({exc})"
            ) from exc
    weights = {}
    for task in load_tasks(suite):
        score = (audited.get(task.id) or {}).get("score", task.metadata.get("mutation_score"))
        weights[task.id] = 1.0 if isinstance(score, (int, float)) and score >= min_score else weak_weight
    return weights


def _weighted(ids: Sequence[str], weights: Mapping[str, float] | None, seed: int, round_: int) -> list[str]:
    """The tasks of one epoch (or repeat): a task of weight w in (0, 1) takes part in about a w share
    of them (seeded per task and round), weight 0 never."""
    if weights is None:
        return list(ids)
    return [
        t
        for t in ids
        if (w := weights.get(t, 1.0)) >= 1.0 or (w > 0 and random.Random(f"{seed}:{round_}:{t}").random() < w)
    ]


def schedule_rows(
    suite: str,
    *,
    tasks_per_step: int,
    training: str = "oa18",
    k: int = 2,
    assignment: str = "locality",
    seed: int = 0,
    epochs: int = 1,
    max_steps: int | None = None,
    task_limit: int | None = None,
    weights: Mapping[str, float] | None = None,
) -> list[dict[str, str]]:
    """Rows in training order. Each epoch shuffles the tasks and redraws the assignment (seed + epoch);
    steps are numbered across epochs and the schedule stops after ``max_steps`` steps. ``weights``:
    see :func:`grader_weights`."""
    configs = training_set(training, seed)
    all_ids = _task_ids(suite, task_limit)
    rows: list[dict[str, str]] = []
    step_offset = 0
    for epoch in range(epochs):
        ids = _weighted(all_ids, weights, seed, epoch)
        if not ids:
            continue
        order = list(np.random.default_rng(seed + epoch).permutation(len(ids)))
        tasks = [ids[i] for i in order]
        schedule = build_schedule(tasks, tasks_per_step, configs=configs, k=k, assignment=assignment, seed=seed + epoch)
        for step in schedule:
            if max_steps is not None and step_offset + step[0].step >= max_steps:
                return rows
            for item in step:
                request = RolloutRequest(
                    suite, item.task, item.config.code, seed=_seed(seed, epoch, item.task, item.slot),
                    step=step_offset + item.step, slot=item.slot,
                )  # fmt: skip
                rows.append(row(request))
        step_offset += len(schedule)
    return rows


def harness_rows(
    suite: str,
    harness: str,
    *,
    repeats: int = 1,
    seed: int = 0,
    task_limit: int | None = None,
    weights: Mapping[str, float] | None = None,
) -> list[dict[str, str]]:
    """Every task under one harness (HarnessAdapt-RL trains on the currently selected harness)."""
    resolve_harness(harness)  # fail now on an unknown harness, not on a GPU node later
    rows = []
    ids = _task_ids(suite, task_limit)
    for repeat in range(repeats):
        for task_id in _weighted(ids, weights, seed, repeat):
            rows.append(row(RolloutRequest(suite, task_id, harness, seed=_seed(seed, repeat, task_id, 0))))
    return rows


def grid_rows(
    suite: str,
    harnesses: Sequence[str],
    *,
    seed: int = 0,
    task_limit: int | None = None,
    weights: Mapping[str, float] | None = None,
) -> list[dict[str, str]]:
    """Every task under every harness: an evaluation set. ``harnesses`` takes what ``harness-gym
    bench --harnesses`` takes (``heldout``, ``training``, ``presets``, ``out-of-space``, ids, files)."""
    refs = [c.config or c.spec_path or c.env_id for c in resolve_harnesses(list(harnesses))]
    for harness in refs:
        resolve_harness(harness)
    ids = _weighted(_task_ids(suite, task_limit), weights, seed, 0)
    return [row(RolloutRequest(suite, t, h, seed=_seed(seed, 0, t, 0))) for h in refs for t in ids]


_seed = rollout_seed  # one seed rule for OpenRLHF datasets and `harness-gym export prompts`


def write_dataset(rows: Iterable[dict[str, str]], path: str | Path, settings: dict[str, Any]) -> dict[str, Any]:
    """Write the JSON lines and a manifest next to them (``<path>.manifest.json``) with the settings,
    counts and the file's sha256. Returns the manifest."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = list(rows)
    if not rows:
        raise ValueError("the dataset would be empty")
    text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    path.write_text(text, encoding="utf-8")
    labels = [json.loads(r["label"]) for r in rows]
    manifest = {
        "format": "harness-gym-openrlhf-prompts/1",
        "path": str(path),
        "rows": len(rows),
        "tasks": len({lab["task_id"] for lab in labels}),
        "harnesses": len({json.dumps(lab["harness"], sort_keys=True) for lab in labels}),
        "steps": len({lab["step"] for lab in labels if "step" in lab}) or None,
        "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
        "settings": settings,
    }
    Path(f"{path}.manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def build(settings: dict[str, Any]) -> list[dict[str, str]]:
    """Rows from a dataset section of a recipe (or the CLI's arguments)."""
    kind = settings.get("kind", "schedule")
    common: dict[str, Any] = {"seed": settings.get("seed", 0), "task_limit": settings.get("task_limit")}
    if settings.get("min_mutation_score") is not None:
        common["weights"] = grader_weights(
            settings["suite"],
            settings["min_mutation_score"],
            settings.get("weak_task_weight", 0.0),
            settings.get("mutation_scores"),
        )
    if kind == "schedule":
        return schedule_rows(
            settings["suite"], tasks_per_step=settings["tasks_per_step"], training=settings.get("training_set", "oa18"),
            k=settings.get("k", 2), assignment=settings.get("assignment", "locality"),
            epochs=settings.get("epochs", 1), max_steps=settings.get("max_steps"), **common,
        )  # fmt: skip
    if kind == "harness":
        return harness_rows(settings["suite"], settings["harness"], repeats=settings.get("repeats", 1), **common)
    if kind == "grid":
        return grid_rows(settings["suite"], settings["harnesses"], **common)
    raise ValueError(f"unknown dataset kind {kind!r}; use schedule, harness or grid")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainers.dataset", description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", required=True, help="task suite, e.g. builtin:train, generated:..., clawgym:DIR")
    parser.add_argument("--out", required=True, help="output JSON-lines file")
    parser.add_argument("--kind", choices=("schedule", "harness", "grid"), default="schedule")
    parser.add_argument("--tasks-per-step", type=int, default=16)
    parser.add_argument("--training-set", default="oa18", help="oa18, random18, all243 or base")
    parser.add_argument("--k", type=int, default=2, help="configurations per task (K)")
    parser.add_argument("--assignment", default="locality", help="locality, random or repeat")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--max-steps", type=int, help="stop the schedule after this many steps")
    parser.add_argument("--harness", help="kind=harness: a preset (HarnessAdapt-H1), spec file or configuration")
    parser.add_argument("--harnesses", help="kind=grid: comma-separated harnesses")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--task-limit", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--min-mutation-score", type=float, help="down-weight tasks whose grader scores below this")
    parser.add_argument("--weak-task-weight", type=float, help="their weight in [0, 1] (default 0: dropped)")
    parser.add_argument("--mutation-scores", help="a `harness-gym tasks audit --mutants --json` file")
    args = parser.parse_args(argv)
    settings: dict[str, Any] = {
        "kind": args.kind, "suite": args.suite, "seed": args.seed, "task_limit": args.task_limit,
        "min_mutation_score": args.min_mutation_score, "weak_task_weight": args.weak_task_weight,
        "mutation_scores": args.mutation_scores,
    }  # fmt: skip
    if args.kind == "schedule":
        settings.update(tasks_per_step=args.tasks_per_step, training_set=args.training_set, k=args.k,
                        assignment=args.assignment, epochs=args.epochs, max_steps=args.max_steps)  # fmt: skip
    elif args.kind == "harness":
        if not args.harness:
            parser.error("--kind harness needs --harness")
        settings.update(harness=args.harness, repeats=args.repeats)
    else:
        if not args.harnesses:
            parser.error("--kind grid needs --harnesses")
        settings["harnesses"] = [h.strip() for h in args.harnesses.split(",") if h.strip()]
    settings = {k: v for k, v in settings.items() if v is not None}
    try:
        manifest = write_dataset(build(settings), args.out, settings)
    except (ValueError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {manifest['rows']} rows ({manifest['tasks']} tasks, {manifest['harnesses']} harnesses) to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
