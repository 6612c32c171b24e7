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

import contextlib
import copy
import functools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness_gym.agents.factory import make_agent
from harness_gym.agents.huggingface import HFAgent
from harness_gym.bench.external import EXTERNAL_CLASS
from harness_gym.bench.report import cluster_bootstrap, crossed_draws, outcome_cells, summarize
from harness_gym.bench.runner import BenchRunner, HarnessChoice
from harness_gym.factors.levels import level_fragment
from harness_gym.records import load_records
from harness_gym.space import BASE_CONFIG
from harness_gym.tasks import Task

MIN_SHARED_PREFIX = 32  # shorter common prefixes are not worth a cache copy
# Student's t 0.975 quantiles by degrees of freedom (index 0 unused): intervals over a few seeds
T_975 = (float("nan"), 12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


class _Request:
    """One ``generate`` call waiting for its batch."""

    def __init__(self, input_ids: Any, options: dict[str, Any]) -> None:
        self.input_ids, self.options = input_ids, options
        self.result: Any = None
        self.error: BaseException | None = None


class PrefixCachingModel:
    """A causal LM whose greedy ``generate`` reuses the key/value cache of the longest cached
    prefix and decodes concurrent calls together.

    On two cores decoding dominates a bench step (up to ``max_new_tokens`` forward passes of one
    token, each reading all the weights), and reading the weights once for several sequences costs
    little more than for one: calls made at the same time from the bench's worker threads (one
    episode each) are prefilled one by one, each from its longest cached prefix, then decoded as one
    left-padded batch. ``batch_size``: the most calls decoded together (the bench's workers); the
    first waits up to ``window_s`` for the others. Holds up to ``entries`` caches (least recently
    used dropped); everything else is delegated to the wrapped model, so it stands in for the model
    inside an agent. Sampling (``do_sample``) runs alone through the model's own ``generate``."""

    def __init__(self, model: Any, entries: int = 6, batch_size: int = 1, window_s: float = 0.5) -> None:
        self._model = model
        self._entries = max(entries, 2 * batch_size)
        self._cache: list[tuple[Any, Any]] = []  # (token ids as a 1-d tensor, DynamicCache)
        self._lock = threading.Lock()  # the prefix caches and the model's own generate
        self._turn = threading.Condition()  # the pending calls and which thread runs the next batch
        self._pending: list[_Request] = []
        self._busy = False
        self.batch_size = max(1, batch_size)
        self.window_s = window_s
        self.reused_tokens = 0
        self.prompt_tokens = 0
        self.batches: list[int] = []  # the size of every decoded batch

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

    def _reuse(self, input_ids: Any) -> tuple[Any, int]:
        """(a copy of the longest cached prefix's cache cropped to it, its length), or (None, 0)."""
        index, shared = self._longest(input_ids)
        self.prompt_tokens += int(input_ids.shape[1])
        if shared < MIN_SHARED_PREFIX:
            return None, 0
        cache = copy.deepcopy(self._cache[index][1])
        excess = cache.get_seq_length() - shared
        if excess > 0:
            cache.crop(-excess)
        self._cache.append(self._cache.pop(index))
        self.reused_tokens += shared
        return cache, shared

    def _keep(self, ids: Any, cache: Any) -> None:
        self._cache.append((ids, cache))
        del self._cache[: -self._entries]

    def generate(self, input_ids: Any, **options: Any) -> Any:
        if options.get("do_sample") or input_ids.shape[0] != 1:
            with self._lock:
                cache, _ = self._reuse(input_ids)
                if cache is not None:
                    options["past_key_values"] = cache
                output = self._model.generate(input_ids, return_dict_in_generate=True, use_cache=True, **options)
                cache = output.past_key_values
                self._keep(output.sequences[0, : cache.get_seq_length()].clone(), cache)
                return output.sequences
        request = _Request(input_ids, options)
        with self._turn:
            self._pending.append(request)
            self._turn.notify_all()
            while request.result is None and request.error is None:
                if self._busy:
                    self._turn.wait()
                    continue
                self._busy = True  # this thread decodes the next batch
                deadline = time.monotonic() + self.window_s
                while len(self._pending) < self.batch_size and (left := deadline - time.monotonic()) > 0:
                    self._turn.wait(left)
                batch, self._pending = self._pending[: self.batch_size], self._pending[self.batch_size :]
                self._turn.release()
                try:
                    self._decode(batch)
                except BaseException as exc:  # every waiting call of the batch gets the error
                    for item in batch:
                        item.error = exc
                finally:
                    self._turn.acquire()
                    self._busy = False
                    self._turn.notify_all()
        if request.error is not None:
            raise request.error
        return request.result

    def _decode(self, batch: list[_Request]) -> None:
        """Greedy decoding of ``batch``: each prompt prefilled from its cached prefix, then one
        forward pass per new token for all of them (left-padded keys masked out)."""
        import torch
        from transformers import DynamicCache

        eos = batch[0].options.get("eos_token_id", self._model.generation_config.eos_token_id)
        stops = {int(t) for t in (eos if isinstance(eos, list | tuple) else [eos]) if t is not None}
        caps = [int(r.options.get("max_new_tokens") or 20) for r in batch]
        limit = max(caps)
        with self._lock, torch.no_grad():
            caches, firsts = [], []
            for item in batch:
                cache, shared = self._reuse(item.input_ids)
                cache = cache if cache is not None else DynamicCache()
                out = self._model(
                    input_ids=item.input_ids[:, shared:], past_key_values=cache, use_cache=True, logits_to_keep=1
                )
                caches.append(cache)
                firsts.append(int(out.logits[0, -1].argmax()))
            lengths = [int(r.input_ids.shape[1]) for r in batch]
            longest, size = max(lengths), len(batch)
            joint = _left_padded(caches, lengths)
            mask = torch.zeros(size, longest, dtype=torch.long)
            for row, length in enumerate(lengths):
                mask[row, longest - length :] = 1
            generated = [[token] for token in firsts]
            done = [token in stops for token in firsts]
            tokens = torch.tensor(firsts)
            for step in range(1, limit):
                wanted = [not d and len(g) < cap for d, g, cap in zip(done, generated, caps, strict=True)]
                if not any(wanted):
                    break
                mask = torch.cat([mask, torch.ones(size, 1, dtype=torch.long)], dim=1)
                positions = torch.tensor([[length + step - 1] for length in lengths])
                out = self._model(
                    input_ids=tokens.view(size, 1),
                    attention_mask=mask,
                    position_ids=positions,
                    past_key_values=joint,
                    use_cache=True,
                )
                tokens = out.logits[:, -1].argmax(-1)
                for row, token in enumerate(tokens.tolist()):
                    if wanted[row]:
                        generated[row].append(token)
                        done[row] = token in stops
            self.batches.append(size)
            for row, item in enumerate(batch):
                new = generated[row]
                item.result = torch.cat([item.input_ids, torch.tensor([new])], dim=1)
                fed = lengths[row] + len(new) - 1  # the last new token was never fed
                pad = longest - lengths[row]
                kept = _rows(joint, row, pad, pad + fed)
                self._keep(item.result[0, :fed].clone(), kept)


def _left_padded(caches: Sequence[Any], lengths: Sequence[int]) -> Any:
    """One batched DynamicCache from single-sequence ones, each left-padded to the longest."""
    import torch
    from transformers import DynamicCache

    longest = max(lengths)

    def joined(layer: int, part: str) -> Any:
        pads = [(0, 0, longest - length, 0) for length in lengths]
        return torch.cat(
            [torch.nn.functional.pad(getattr(c.layers[layer], part), p) for c, p in zip(caches, pads, strict=True)]
        )

    return DynamicCache([(joined(n, "keys"), joined(n, "values")) for n in range(len(caches[0].layers))])


def _rows(cache: Any, row: int, start: int, end: int) -> Any:
    """Positions ``start:end`` of one row of a batched DynamicCache, as a cache of its own."""
    from transformers import DynamicCache

    return DynamicCache(
        [
            (layer.keys[row : row + 1, :, start:end].clone(), layer.values[row : row + 1, :, start:end].clone())
            for layer in cache.layers
        ]
    )


_WRAPPED: dict[tuple[int, int], PrefixCachingModel] = {}


def hf_agent_factory(
    model_dir: str | Path, *, max_new_tokens: int, context_tokens: int = 4096, batch_size: int = 1
) -> Any:
    """A factory of Hugging Face agents on ``model_dir`` (greedy, Hermes), sharing one prefix
    cache that decodes up to ``batch_size`` agents' calls together (one per bench worker)."""

    def make() -> Any:
        agent = HFAgent(
            str(model_dir), tool_mode="hermes", max_new_tokens=max_new_tokens, context_tokens=context_tokens
        )
        key = (id(agent.model), batch_size)
        if key not in _WRAPPED:
            _WRAPPED[key] = PrefixCachingModel(agent.model, batch_size=batch_size)
        agent.model = _WRAPPED[key]
        agent.lock = contextlib.nullcontext()  # type: ignore[assignment]  # the wrapper serialises the model; the agent's lock would stop batching
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
    workers: int = 1,
) -> list[dict[str, Any]]:
    """Bench one model; its episode records (each tagged with the model's label). ``env_options``
    beyond the step budget: e.g. ``resample_names`` for unseen tool aliases and opaque ids.
    ``workers`` episodes run at once, their model calls decoded together (:class:`PrefixCachingModel`).
    The bench's wall time, summed over the runs that produced the records (a resumed run adds its
    own), is kept in ``out_dir/wall_s.json``: :func:`bench_wall_seconds` reads it."""
    factory = bench_agent_factory(model_dir, harnesses, max_new_tokens=max_new_tokens, workers=workers)
    external = any(h.klass == EXTERNAL_CLASS for h in harnesses)
    runner = BenchRunner(
        factory,
        harnesses,
        list(tasks),
        runs=1,
        out_dir=out_dir,
        workers=1 if external else workers,  # a CLI's requests go through the model server, one at a time
        seed=seed,
        resume=True,
        env_options={**(env_options or {}), "max_steps": max_steps},
        save_trajectories=True,
        progress=progress,
        agent_info={"agent": "hf", "model": str(model_dir), "label": label, "tool_mode": "hermes", "greedy": True},
        max_error_rate=0.5,
    )
    results = out_dir / "results.jsonl"
    before = len(load_records(results)) if results.exists() else 0
    previous, started = bench_wall_seconds(out_dir), time.perf_counter()
    path = runner.run()
    records = [{**r, "model_label": label} for r in load_records(path)]
    if len(records) > before:  # episodes ran now: add this run's time to what produced the earlier ones
        seconds = previous + time.perf_counter() - started
        (out_dir / WALL_FILE).write_text(json.dumps({"seconds": seconds}) + "\n", encoding="utf-8")
    return records


WALL_FILE = "wall_s.json"


def bench_wall_seconds(out_dir: Path) -> float:
    """The wall time that produced a bench folder's records; for a folder from before the time
    was kept (one worker), the sum of its episodes' times; 0 for none."""
    path, results = out_dir / WALL_FILE, out_dir / "results.jsonl"
    if path.exists():
        return float(json.loads(path.read_text(encoding="utf-8"))["seconds"])
    if not results.exists():
        return 0.0
    return sum(float((r.get("durations") or {}).get("episode_s", 0.0)) for r in load_records(results))


def bench_agent_factory(
    model_dir: str | Path, harnesses: Sequence[HarnessChoice], *, max_new_tokens: int, workers: int = 1
) -> Callable[[], Any]:
    """The bench's agent for ``model_dir``: the in-process agent with the batching prefix cache;
    for real CLIs (class ``external``) the bench's ``hf`` agent, which serves the checkpoint to
    them through harness-gym's OpenAI-compatible model server (:mod:`harness_gym.bench.external`)."""
    if any(h.klass == EXTERNAL_CLASS for h in harnesses):
        return functools.partial(make_agent, "hf", model=str(model_dir), max_new_tokens=max_new_tokens)
    return hf_agent_factory(model_dir, max_new_tokens=max_new_tokens, batch_size=workers)


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
