"""Evaluation with the project's bench, and the statistics the replication reports.

Every model runs through :class:`harness_gym.bench.runner.BenchRunner` with the in-process
Hugging Face agent (greedy, Hermes text tool calls: the format the training data is in). On two
cores the prompt (system prompt plus tool descriptions, 1.1k-1.9k tokens) dominates the cost of a
step, and it repeats: every episode of a harness starts with the same system prompt and every
step of an episode extends the previous prompt. :class:`PrefixCachingModel` keeps the key/value
cache of recent prompts and starts generation from the longest common prefix; greedy decoding
gives the same tokens as without the cache (up to floating-point rounding).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness_gym.agents.huggingface import HFAgent
from harness_gym.bench.report import cluster_bootstrap, crossed_draws, outcome_cells, summarize
from harness_gym.bench.runner import BenchRunner, HarnessChoice
from harness_gym.factors.levels import level_fragment
from harness_gym.records import load_records
from harness_gym.space import BASE_CONFIG
from harness_gym.tasks import Task

MIN_SHARED_PREFIX = 32  # shorter common prefixes are not worth a cache copy
# Student's t 0.975 quantiles by degrees of freedom (index 0 unused): intervals over a few seeds
T_975 = (float("nan"), 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


class PrefixCachingModel:
    """A causal LM whose ``generate`` reuses the key/value cache of the longest cached prefix.

    Holds up to ``entries`` caches (least recently used dropped); everything else is delegated
    to the wrapped model, so it stands in for the model inside an agent."""

    def __init__(self, model: Any, entries: int = 6) -> None:
        self._model = model
        self._entries = entries
        self._cache: list[tuple[Any, Any]] = []  # (token ids as a 1-d tensor, DynamicCache)
        self._lock = threading.Lock()
        self.reused_tokens = 0
        self.prompt_tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def _longest(self, ids: Any) -> tuple[int, int]:
        best, best_length = -1, 0
        for index, (cached, _) in enumerate(self._cache):
            length = min(len(cached), ids.shape[1] - 1)
            same = (cached[:length] == ids[0, :length]).int()
            shared = int(same.cumprod(0).sum()) if length else 0
            if shared > best_length:
                best, best_length = index, shared
        return best, best_length

    def generate(self, input_ids: Any, **options: Any) -> Any:
        with self._lock:
            index, shared = self._longest(input_ids)
            if shared >= MIN_SHARED_PREFIX:
                cache = copy.deepcopy(self._cache[index][1])
                excess = cache.get_seq_length() - shared
                if excess > 0:
                    cache.crop(-excess)
                self._cache.append(self._cache.pop(index))
                options["past_key_values"] = cache
                self.reused_tokens += shared
            self.prompt_tokens += int(input_ids.shape[1])
            output = self._model.generate(input_ids, return_dict_in_generate=True, use_cache=True, **options)
            cache = output.past_key_values
            self._cache.append((output.sequences[0, : cache.get_seq_length()].clone(), cache))
            del self._cache[: -self._entries]
            return output.sequences


_WRAPPED: dict[int, PrefixCachingModel] = {}


def hf_agent_factory(model_dir: str | Path, *, max_new_tokens: int, context_tokens: int = 4096) -> Any:
    """A factory of Hugging Face agents on ``model_dir`` (greedy, Hermes), sharing one prefix cache."""

    def make() -> Any:
        agent = HFAgent(
            str(model_dir), tool_mode="hermes", max_new_tokens=max_new_tokens, context_tokens=context_tokens
        )
        key = id(agent.model)
        if key not in _WRAPPED:
            _WRAPPED[key] = PrefixCachingModel(agent.model)
        agent.model = _WRAPPED[key]
        return agent

    return make


def run_bench(
    model_dir: str | Path,
    harnesses: Sequence[HarnessChoice],
    tasks: Sequence[Task],
    out_dir: Path,
    *,
    seed: int,
    max_steps: int,
    max_new_tokens: int,
    label: str,
    progress: bool = True,
    env_options: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Bench one model; its episode records (each tagged with the model's label). ``env_options``
    beyond the step budget: e.g. ``resample_names`` for unseen tool aliases and opaque ids."""
    runner = BenchRunner(
        hf_agent_factory(model_dir, max_new_tokens=max_new_tokens),
        harnesses,
        list(tasks),
        runs=1,
        out_dir=out_dir,
        workers=1,
        seed=seed,
        resume=True,
        env_options={**(env_options or {}), "max_steps": max_steps},
        save_trajectories=True,
        progress=progress,
        agent_info={"agent": "hf", "model": str(model_dir), "label": label, "tool_mode": "hermes", "greedy": True},
        max_error_rate=0.5,
    )
    path = runner.run()
    return [{**r, "model_label": label} for r in load_records(path)]


def gap_interval(
    base: Sequence[Mapping[str, Any]], heldout: Sequence[Mapping[str, Any]], *, resamples: int = 2000, seed: int = 0
) -> dict[str, Any]:
    """Specialisation gap (base Pass@1 minus held-out Pass@1) with a 95% bootstrap interval: each
    group resampled independently by :func:`~harness_gym.bench.report.crossed_draws` (tasks, and the
    held-out group's configurations too); errors count as failures."""
    rng = np.random.default_rng(seed)

    if not base or not heldout:
        return {"base": float("nan"), "heldout": float("nan"), "gap": float("nan"), "ci95": [float("nan")] * 2}
    base_mean, base_draws = crossed_draws(outcome_cells(base), resamples=resamples, rng=rng)
    heldout_mean, heldout_draws = crossed_draws(outcome_cells(heldout), resamples=resamples, rng=rng)
    size = min(len(base_draws), len(heldout_draws))
    gaps = base_draws[:size] - heldout_draws[:size]
    return {
        "base": base_mean,
        "heldout": heldout_mean,
        "gap": base_mean - heldout_mean,
        "ci95": [float(np.quantile(gaps, 0.025)), float(np.quantile(gaps, 0.975))],
    }


def model_summary(records: Sequence[Mapping[str, Any]], *, resamples: int = 2000) -> dict[str, Any]:
    """The bench summary of one model's records, its base-harness Pass@1 and its specialisation
    gap with intervals. The base harness runs more tasks than the others (the gap's first term);
    the class figures and factor effects use only the tasks every harness ran, so no harness
    weighs more than another."""
    model = [r for r in records if r.get("role", "model") == "model"]
    base = [r for r in model if r["harness"] == BASE_CONFIG.env_id]
    shared = {r["task_id"] for r in model if r["harness"] != BASE_CONFIG.env_id} or {r["task_id"] for r in base}
    summary = summarize([r for r in model if r["task_id"] in shared], resamples=resamples)
    estimate, low, high = cluster_bootstrap(base, resamples=resamples)
    summary["base_harness"] = {"pass_at_1": estimate, "ci95": [low, high], "episodes": len(base)}
    heldout = [r for r in model if r["class"] == "heldout"]
    summary["gap_interval"] = gap_interval(base, heldout, resamples=resamples)
    return summary


def _earliest_trigger(factor: str) -> int:
    """Steps after which a factor's non-zero levels can differ from level 0 in an episode: O formats
    a tool's output, seen from the second step on; C folds history once more than its smallest
    ``trigger_turns`` turns are in the context (harness_gym/factors/variants/C.yaml), so the model
    first sees a folded context at step trigger + 2; S, T and W shape the first step already."""
    if factor == "O":
        return 1
    if factor == "C":
        triggers = [level_fragment("C", level).get("context", {}).get("trigger_turns") for level in (1, 2)]
        return min(int(t) for t in triggers if t is not None) + 1
    return 0


def acted_effects(records: Sequence[Mapping[str, Any]], *, resamples: int = 200) -> dict[str, Any]:
    """Per factor: the share of in-space episodes in which it acted (more steps than its earliest
    trigger, :func:`_earliest_trigger`) and its main effects over those episodes only. An effect
    over episodes where the factor cannot have changed anything is noise presented as a finding.
    The selection is on the episode's length, which the policy chooses: read the effects with it."""
    in_space = [r for r in records if r.get("config") and r.get("role", "model") == "model"]
    out: dict[str, Any] = {}
    for factor in "STOCW":
        trigger = _earliest_trigger(factor)
        acted = [r for r in in_space if int(r.get("steps") or 0) > trigger]
        effects = summarize(acted, resamples=resamples)["main_effects"].get(factor) if acted else None
        out[factor] = {
            "after_steps": trigger,
            "acted": len(acted),
            "episodes": len(in_space),
            "share": len(acted) / len(in_space) if in_space else None,
            "effects": effects,
        }
    return out


def class_figures(records: Sequence[Mapping[str, Any]], *, resamples: int = 2000) -> dict[str, Any]:
    """Pass@1 per evaluation class (the records' ``eval_class`` tag), crossed bootstrap intervals."""
    classes: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        if record.get("role", "model") == "model":
            classes.setdefault(str(record.get("eval_class") or record.get("class")), []).append(record)
    out = {}
    for name, group in sorted(classes.items()):
        estimate, low, high = cluster_bootstrap(group, resamples=resamples)
        out[name] = {
            "pass_at_1": estimate,
            "ci95": [low, high],
            "episodes": len(group),
            "harnesses": len({r["harness"] for r in group}),
            "tasks": len({r["task_id"] for r in group}),
        }
    return out


def over_seeds(values: Sequence[float]) -> dict[str, Any]:
    """Mean over training seeds with a 95% t interval (training-run variance, apart from the
    evaluation resampling the bootstrap intervals cover); the per-seed values kept."""
    finite = [v for v in values if not np.isnan(v)]
    if not finite:
        return {"mean": float("nan"), "ci95": [float("nan")] * 2, "seeds": len(values), "values": list(values)}
    mean = float(np.mean(finite))
    if len(finite) < 2:
        return {"mean": mean, "ci95": [float("nan")] * 2, "seeds": len(finite), "values": list(values)}
    t = T_975[len(finite) - 1] if len(finite) - 1 < len(T_975) else 1.96
    half = float(t * np.std(finite, ddof=1) / np.sqrt(len(finite)))
    return {"mean": mean, "ci95": [mean - half, mean + half], "seeds": len(finite), "values": list(values)}
