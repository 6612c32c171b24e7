"""``harness-gym probe``: a model's harness sensitivity without rollouts.

The same actions are rendered under each chosen harness (the task's reference solution replayed
by the reference agent through that harness's tool names, call format, output format, history
management and prompts, with the tool outputs a real sandbox gives) and exported as SFT rows with
a train flag on exactly the policy's messages. The model then scores, teacher-forced, the
log-probability of those policy tokens. A harness whose interface the model has not learned gives
its actions a lower log-probability; per factor, the mean over the configurations at each level
says which factor the model is sensitive to. No tokens are generated, so screening all 243
configurations costs one forward pass per (task, harness).

    harness-gym probe --model DIR --configs base,training,heldout --tasks "ladder:1007#count=6" --out probe.json

What it does not measure: whether the model would *choose* those actions. The probe scores the
reference's actions, so it ranks harnesses by how foreign their rendering is to the model; how
well that predicts rollout Pass@1 is what :func:`rank_agreement` measures against a bench run.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness_gym.export import sft_rows
from harness_gym.jsonl import load_records
from harness_gym.records import HarnessChoice, resolve_harnesses
from harness_gym.replication.data import record_trajectories
from harness_gym.replication.sft import Example, tokenize_row
from harness_gym.space import FACTORS, HarnessConfig
from harness_gym.tasks import load_tasks


def policy_logprob(model: Any, example: Example) -> tuple[float, int]:
    """Sum of the log-probabilities of the trained (policy) tokens, teacher-forced, and their count."""
    import torch

    ids = torch.tensor([example.input_ids])
    targets = torch.tensor([i for i in range(1, len(example.input_ids)) if example.trained[i]])
    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state[0]
        logits = model.lm_head(hidden[targets - 1]).float()
    logprobs = torch.log_softmax(logits, dim=-1).gather(1, ids[0, targets].unsqueeze(1))
    return float(logprobs.sum()), len(targets)


def probe(
    model_dir: str | Path,
    harnesses: str | Sequence[str],
    tasks: str,
    *,
    task_limit: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> dict[str, Any]:
    """Per harness: the mean per-token log-probability of the policy's tokens over the tasks (and
    per task), and per factor level the mean over the in-space configurations at that level."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    chosen = resolve_harnesses(harnesses)
    task_list = load_tasks(tasks)[:task_limit]
    if not task_list:
        raise ValueError(f"the suite {tasks!r} has no task")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    per_harness: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="harness-gym-probe-") as scratch:
        for number, choice in enumerate(chosen):
            pairs: list[tuple[str, HarnessConfig | HarnessChoice]] = [(t.id, choice) for t in task_list]
            paths = record_trajectories(tasks, task_list, pairs, Path(scratch) / str(number), seed=seed)
            rows, skipped = sft_rows(paths, tasks=tasks, tool_format="hermes")
            if skipped or len(rows) != len(pairs):
                raise RuntimeError(f"{choice.env_id}: {skipped} of {len(pairs)} trajectories were not exported")
            scores = {}
            for row in rows:
                total, count = policy_logprob(model, tokenize_row(row, tokenizer))
                scores[str(row["task_id"])] = {"logprob": total, "tokens": count, "per_token": total / count}
            per_harness[choice.env_id] = {
                "class": choice.klass,
                "config": choice.config,
                "per_token": float(np.mean([s["per_token"] for s in scores.values()])),
                "tasks": scores,
            }
            if progress:
                print(f"  {choice.env_id}: {per_harness[choice.env_id]['per_token']:.3f} nats/token", flush=True)
    return {
        "model": str(model_dir),
        "tasks": tasks,
        "task_ids": [t.id for t in task_list],
        "harnesses": per_harness,
        "factors": factor_means(per_harness),
    }


def factor_means(per_harness: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Per factor and level, the mean per-token log-probability over the in-space configurations
    at that level, minus the mean over all of them (None where no configuration has the level)."""
    points = [(HarnessConfig.parse(v["config"]), v["per_token"]) for v in per_harness.values() if v.get("config")]
    if not points:
        return {}
    overall = float(np.mean([score for _, score in points]))
    out: dict[str, dict[str, float | None]] = {}
    for position, factor in enumerate(FACTORS):
        out[factor] = {}
        for level in range(3):
            values = [score for config, score in points if config[position] == level]
            out[factor][str(level)] = float(np.mean(values)) - overall if values else None
    return out


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks for ties); nan when either side is constant."""

    def ranks(values: Sequence[float]) -> np.ndarray:
        array = np.asarray(values, dtype=float)
        order = array.argsort(kind="stable")
        result = np.empty(len(array))
        result[order] = np.arange(len(array))
        for value in np.unique(array):  # ties share their mean rank
            result[array == value] = result[array == value].mean()
        return result

    a, b = ranks(x), ranks(y)
    if a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def rank_agreement(
    probe_result: Mapping[str, Any], pass_at_1: Mapping[str, float], *, resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Spearman correlation between the probe's per-harness score and rollout Pass@1 of the same
    model (harness env id -> Pass@1), with a 95% bootstrap interval over harnesses."""
    common = sorted(set(probe_result["harnesses"]) & set(pass_at_1))
    if len(common) < 3:
        raise ValueError(f"need at least 3 harnesses in both the probe and the bench, got {len(common)}")
    x = [probe_result["harnesses"][h]["per_token"] for h in common]
    y = [pass_at_1[h] for h in common]
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(resamples):
        pick = rng.integers(len(common), size=len(common))
        value = spearman([x[i] for i in pick], [y[i] for i in pick])
        if not math.isnan(value):
            draws.append(value)
    interval = [float(np.quantile(draws, 0.025)), float(np.quantile(draws, 0.975))] if draws else [math.nan] * 2
    return {"harnesses": len(common), "spearman": spearman(x, y), "ci95": interval, "draws": len(draws)}


def render_markdown(result: Mapping[str, Any]) -> str:
    """The probe's table: per harness, then per factor level."""
    lines = [
        f"# Harness-sensitivity probe of `{result['model']}`",
        "",
        f"Tasks `{result['tasks']}` ({len(result['task_ids'])}); mean log-probability per policy token (nats; higher: "
        "the harness's rendering is more familiar to the model).",
        "",
        "| harness | class | nats/token |",
        "|---|---|---|",
    ]
    ordered = sorted(result["harnesses"].items(), key=lambda item: -item[1]["per_token"])
    lines += [f"| {h} | {v['class']} | {v['per_token']:.3f} |" for h, v in ordered]
    if result["factors"]:
        lines += ["", "| factor | level 0 | level 1 | level 2 |", "|---|---|---|---|"]
        for factor, levels in result["factors"].items():
            cells = ["–" if v is None else f"{v:+.3f}" for v in levels.values()]
            lines.append(f"| {factor} | " + " | ".join(cells) + " |")
    if "agreement" in result:
        agreement = result["agreement"]
        lines += [
            "",
            f"Rank agreement with rollout Pass@1 over {agreement['harnesses']} harnesses: Spearman "
            f"{agreement['spearman']:.2f} [{agreement['ci95'][0]:.2f}, {agreement['ci95'][1]:.2f}].",
        ]
    return "\n".join(lines) + "\n"


def bench_pass_at_1(paths: str | Path | Sequence[str | Path]) -> dict[str, float]:
    """Per-harness Pass@1 from bench results files (JSON lines of episode records; a string may
    name several, comma-separated: e.g. one bench folder per evaluation class); errors count as
    failures."""
    if isinstance(paths, str):
        paths = [p for p in paths.split(",") if p]
    elif isinstance(paths, Path):
        paths = [paths]
    totals: dict[str, list[float]] = {}
    for path in paths:
        for record in load_records(path):
            if record.get("role", "model") != "model":
                continue
            totals.setdefault(str(record["harness"]), []).append(1.0 if record.get("passed") else 0.0)
    return {h: float(np.mean(v)) for h, v in totals.items()}


def write(result: dict[str, Any], out: str | Path) -> list[Path]:
    """``out`` (JSON) and the markdown table beside it (same name, ``.md``)."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    markdown = path.with_suffix(".md")
    markdown.write_text(render_markdown(result), encoding="utf-8")
    return [path, markdown]
