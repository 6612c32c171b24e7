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
import functools
import json
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from harness_gym.agents.factory import make_agent
from harness_gym.agents.huggingface import HFAgent, exiting
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


#: a cached prompt: its token ids (1-d) and per layer its (keys, values), each (1, heads, length, dim)
Entry = tuple[Any, list[tuple[Any, Any]]]


def _slot_class() -> type:
    """:class:`transformers.cache_utils.DynamicLayer` with its keys and values in a window of a
    buffer allocated once per batch (imported lazily: transformers is the optional hf extra)."""
    from transformers.cache_utils import DynamicLayer

    class Slot(DynamicLayer):
        """Positions ``start:start + length`` of ``buffers`` (keys, values), written in place. A
        DynamicLayer concatenates each new token to its whole cache: on two cores that copy, per
        layer and token, cost more than the attention itself."""

        def __init__(self, keys: Any, values: Any, start: int, length: int) -> None:
            super().__init__()
            self._buffers, self._start = (keys, values), start
            self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
            self._show(length)

        def _show(self, length: int) -> None:
            end = self._start + length
            self.keys, self.values = (b[:, :, self._start : end] for b in self._buffers)

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
            assert self.keys is not None  # shown by __init__
            length = self.keys.shape[-2]
            end = self._start + length + key_states.shape[-2]
            if end > self._buffers[0].shape[-2]:
                raise RuntimeError(f"decode buffer of {self._buffers[0].shape[-2]} positions overrun at {end}")
            for buffer, new in zip(self._buffers, (key_states, value_states), strict=True):
                buffer[:, :, self._start + length : end] = new
            self._show(end - self._start)
            return self.keys, self.values

    return Slot


GQA_ATTENTION = "harness_gym_sdpa_gqa"  # the attention implementation the batched decode runs


@functools.cache
def _register_gqa_attention() -> str:
    """Register transformers' sdpa attention with grouped-query heads handed to torch as groups
    (``enable_gqa``). transformers' own copies every cached key and value once per query head of
    its group whenever a mask is passed (always, for a left-padded batch): at batch 8 that copy
    took 70 ms a layer against 8 ms (benchmarks/results/hf_decode.json). torch's result is bitwise
    the same (checked 2026-12-03 on this machine's CPU: decode shapes at batch 1, 4 and 8)."""
    import torch
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    def attention(
        module: Any,
        query: Any,
        key: Any,
        value: Any,
        attention_mask: Any,
        dropout: float = 0.0,
        scaling: float | None = None,
        is_causal: bool | None = None,
        **kwargs: Any,
    ) -> tuple[Any, None]:
        grouped = getattr(module, "num_key_value_groups", 1) > 1
        if not grouped or kwargs.get("position_bias") is not None or kwargs.get("output_attentions"):
            return sdpa_attention_forward(
                module,
                query,
                key,
                value,
                attention_mask,
                dropout=dropout,
                scaling=scaling,
                is_causal=is_causal,
                **kwargs,
            )
        causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
        causal = query.shape[2] > 1 and attention_mask is None and causal  # as transformers decides it
        if causal and key.shape[2] > query.shape[2]:
            key, value = key[:, :, : query.shape[2]], value[:, :, : query.shape[2]]
        out = torch.nn.functional.scaled_dot_product_attention(
            query,
            key,
            value,
            attn_mask=attention_mask,
            dropout_p=dropout,
            scale=scaling,
            is_causal=causal,
            enable_gqa=True,
        )
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register(GQA_ATTENTION, attention)
    AttentionMaskInterface.register(GQA_ATTENTION, sdpa_mask)
    return GQA_ATTENTION


@contextlib.contextmanager
def _gqa_attention(model: Any) -> Any:
    """The model's sdpa attention as :func:`_register_gqa_attention`'s while the block runs."""
    config = model.config
    before = config._attn_implementation
    if before != "sdpa":
        yield
        return
    config._attn_implementation = _register_gqa_attention()
    try:
        yield
    finally:
        config._attn_implementation = before


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
    inside an agent. Sampling (``do_sample``) runs alone through the model's own ``generate``.

    Every batch's keys and values live in one buffer sized for its longest prompt plus the reply
    cap, each prompt prefilled into its own row from its cached prefix: one copy of a prefix per
    call, where concatenating caches copied every layer's whole cache at every token."""

    def __init__(self, model: Any, entries: int = 6, batch_size: int = 1, window_s: float = 0.5) -> None:
        self._model = model
        self._entries = max(entries, 2 * batch_size)
        self._cache: list[Entry] = []
        self._lock = threading.Lock()  # the prefix caches and the model's own generate
        self._turn = threading.Condition()  # the pending calls and which thread runs the next batch
        self._pending: list[_Request] = []
        self._busy = False
        self.batch_size = max(1, batch_size)
        self.window_s = window_s
        self.reused_tokens = 0
        self.prompt_tokens = 0
        self.batches: list[int] = []  # the size of every decoded batch
        # where the time goes: prompt tokens prefilled and their seconds; batched forward passes
        # of one new token per row, the rows they fed, their seconds (the bench's cost estimate)
        self.spent = {"prefill_tokens": 0, "prefill_s": 0.0, "decode_steps": 0, "decode_rows": 0, "decode_s": 0.0}

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

    def _reuse(self, input_ids: Any) -> tuple[list[tuple[Any, Any]], int]:
        """(the longest cached prefix's keys and values per layer, its length), or ([], 0). The
        tensors are the cache's own, longer than the prefix: read them, never write them."""
        index, shared = self._longest(input_ids)
        self.prompt_tokens += int(input_ids.shape[1])
        if shared < MIN_SHARED_PREFIX:
            return [], 0
        self._cache.append(self._cache.pop(index))
        self.reused_tokens += shared
        return self._cache[-1][1], shared

    def _keep(self, ids: Any, layers: list[tuple[Any, Any]]) -> None:
        self._cache.append((ids, layers))
        del self._cache[: -self._entries]

    def generate(self, input_ids: Any, **options: Any) -> Any:
        if options.get("do_sample") or input_ids.shape[0] != 1:
            return self._sample(input_ids, options)
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

    def _sample(self, input_ids: Any, options: dict[str, Any]) -> Any:
        """The model's own ``generate`` (sampling, or several prompts in one tensor), from the
        longest cached prefix."""
        from transformers import DynamicCache

        with self._lock:
            layers, shared = self._reuse(input_ids)
            if shared:
                options["past_key_values"] = DynamicCache([(k[:, :, :shared], v[:, :, :shared]) for k, v in layers])
            output = self._model.generate(input_ids, return_dict_in_generate=True, use_cache=True, **options)
            cache = output.past_key_values
            kept = [(layer.keys[:1], layer.values[:1]) for layer in cache.layers]
            self._keep(output.sequences[0, : cache.get_seq_length()].clone(), kept)
            return output.sequences

    def _decode(self, batch: list[_Request]) -> None:
        """Greedy decoding of ``batch``: each prompt prefilled from its cached prefix into its row
        of one buffer (left-padded to the longest), then one forward pass per new token for all
        of them (the padding's keys masked out)."""
        import torch
        from transformers.cache_utils import Cache

        eos = batch[0].options.get("eos_token_id", self._model.generation_config.eos_token_id)
        stops = {int(t) for t in (eos if isinstance(eos, list | tuple) else [eos]) if t is not None}
        caps = [int(r.options.get("max_new_tokens") or 20) for r in batch]
        lengths = [int(r.input_ids.shape[1]) for r in batch]
        longest, size, limit = max(lengths), len(batch), max(caps)
        slot = _slot_class()
        config = self._model.config
        heads = int(getattr(config, "num_key_value_heads", None) or config.num_attention_heads)
        dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        with self._lock, torch.inference_mode(), _gqa_attention(self._model):
            dtype = next(self._model.parameters()).dtype
            shape = (size, heads, longest + limit, dim)
            buffers = [(torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)) for _ in range(config.num_hidden_layers)]  # fmt: skip
            firsts = []
            started = time.perf_counter()
            for row, item in enumerate(batch):
                layers, shared = self._reuse(item.input_ids)
                pad = longest - lengths[row]
                for (keys, values), (cached_keys, cached_values) in zip(buffers, layers, strict=False):
                    keys[row, :, pad : pad + shared] = cached_keys[0, :, :shared]
                    values[row, :, pad : pad + shared] = cached_values[0, :, :shared]
                rows = Cache(layers=[slot(k[row : row + 1], v[row : row + 1], pad, shared) for k, v in buffers])
                out = self._model(
                    input_ids=item.input_ids[:, shared:], past_key_values=rows, use_cache=True, logits_to_keep=1
                )
                firsts.append(int(out.logits[0, -1].argmax()))
                self.spent["prefill_tokens"] += lengths[row] - shared
            self.spent["prefill_s"] += time.perf_counter() - started
            started = time.perf_counter()
            joint = Cache(layers=[slot(k, v, 0, longest) for k, v in buffers])
            mask = torch.ones(size, longest + limit, dtype=torch.long)  # a step feeds columns longest on
            for row, length in enumerate(lengths):
                mask[row, : longest - length] = 0
            generated = [[token] for token in firsts]
            done = [token in stops for token in firsts]
            tokens = torch.tensor(firsts)
            for step in range(1, limit):
                wanted = [not d and len(g) < cap for d, g, cap in zip(done, generated, caps, strict=True)]
                if not any(wanted) or exiting():
                    break
                positions = torch.tensor([[length + step - 1] for length in lengths])
                out = self._model(
                    input_ids=tokens.view(size, 1),
                    attention_mask=mask[:, : longest + step],
                    position_ids=positions,
                    past_key_values=joint,
                    use_cache=True,
                )
                tokens = out.logits[:, -1].argmax(-1)
                for row, token in enumerate(tokens.tolist()):
                    if wanted[row]:
                        generated[row].append(token)
                        done[row] = token in stops
                self.spent["decode_steps"] += 1
                self.spent["decode_rows"] += size
            self.spent["decode_s"] += time.perf_counter() - started
            self.batches.append(size)
            for row, item in enumerate(batch):
                new = generated[row]
                item.result = torch.cat([item.input_ids, torch.tensor([new])], dim=1)
                fed = lengths[row] + len(new) - 1  # the last new token was never fed
                pad = longest - lengths[row]
                kept = [(k[row : row + 1, :, pad : pad + fed].clone(), v[row : row + 1, :, pad : pad + fed].clone()) for k, v in buffers]  # fmt: skip
                self._keep(item.result[0, :fed].clone(), kept)


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
