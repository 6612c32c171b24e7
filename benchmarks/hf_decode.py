"""Prefill and decode rates of the replication's bench model on this machine's CPUs.

    python -m benchmarks.hf_decode [--model DIR] [--threads 1,2] [--batches 1,4,8] [--steps 48]

The replication's cost estimate (benchmarks/replication.py, ``estimate_cost``) is built on these
rates: SmolLM2-135M (the untrained export, or ``--model``: every SFT checkpoint has the same shapes)
on real bench prompts (the base harness and held-out configurations of the ladder's evaluation
tasks, Hermes text tool calls, as the bench's agent builds them), through the bench's own
:class:`~harness_gym.replication.evaluate.PrefixCachingModel`:

- prefill: ms per 1k prompt tokens, a whole prompt from an empty cache;
- decode: ms per forward pass and per generated token at each batch size (the bench's workers),
  ``--steps`` tokens a row, from the decoder's own clock;
- generate: ms per token of transformers' greedy ``generate`` at batch 1 (the model server's
  path, behind a real CLI);
- reuse: ms to extend a cached prompt by one tool result (the next step of an episode).

Writes benchmarks/results/hf_decode.json with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parent / "results" / "hf_decode.json"


def real_prompts(model_dir: Path, count: int) -> list[Any]:
    """Token ids of the first prompt of ``count`` bench episodes (configuration, task), as the
    bench's agent encodes them."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from replication import PROFILES, evaluation_harnesses, evaluation_suites

    from harness_gym.agents.huggingface import HFAgent
    from harness_gym.env import make_env
    from harness_gym.tasks import load_tasks

    profile = PROFILES["full"]
    base, others = evaluation_harnesses(profile)
    tasks = load_tasks(evaluation_suites(profile)["tasks"])
    agent = HFAgent(str(model_dir), tool_mode="hermes", max_new_tokens=profile.max_new_tokens, context_tokens=4096)
    out = []
    for index in range(count):
        harness = [base, *[c for c in others if c.klass == "heldout"]][index % 19]
        task = tasks[index % len(tasks)]
        env = make_env(harness.ref, tasks, max_steps=profile.max_steps)
        try:
            observation, _ = env.reset(seed=0, options={"task_id": task.id})
            out.append(agent.prompt_ids(observation))
        finally:
            env.close()
    return out


def _timed(call: Any) -> tuple[float, float]:
    """(wall s, process CPU s) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    call()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(model: Any, prompts: list[Any], batches: list[int], steps: int) -> dict[str, Any]:
    """Rates from the decoder's own clock (``PrefixCachingModel.spent``): prefill seconds per
    prompt token, seconds per batched forward pass."""
    import torch

    from harness_gym.replication.evaluate import PrefixCachingModel, _Request

    never = {"eos_token_id": [-1]}  # no token stops: every row decodes the full count

    def decode(batch: list[Any], tokens: int, cached: PrefixCachingModel | None = None) -> PrefixCachingModel:
        wrapper = cached or PrefixCachingModel(model, batch_size=len(batch))
        wrapper._decode([_Request(ids, {"max_new_tokens": tokens, **never}) for ids in batch])
        return wrapper

    figures: dict[str, Any] = {"prompt_tokens": [int(p.shape[1]) for p in prompts], "decode": {}}
    decode([prompts[0][:, :64]], 2)  # warm-up
    prefill = {"prefill_tokens": 0, "prefill_s": 0.0}
    for size in batches:
        batch = [prompts[i % len(prompts)] for i in range(size)]
        spent = decode(batch, steps).spent
        prefill = {k: prefill[k] + spent[k] for k in prefill}
        per_step = spent["decode_s"] / spent["decode_steps"]
        figures["decode"][str(size)] = {
            "ms_per_step": 1000 * per_step,
            "ms_per_token": 1000 * per_step / size,
            "context_tokens": max(int(p.shape[1]) for p in batch),
            "load": os.getloadavg()[0],
        }
        print(
            f"      batch {size}: {1000 * per_step:.1f} ms a step, {1000 * per_step / size:.1f} ms a token", flush=True
        )
    figures["prefill_ms_per_ktoken"] = 1e6 * prefill["prefill_s"] / prefill["prefill_tokens"]

    # transformers' own greedy generate at batch 1: the model server's path (real CLIs)
    def generate(tokens: int) -> None:
        with torch.inference_mode():
            ids = prompts[0]
            model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)  # fmt: skip

    short_wall, _ = _timed(lambda: generate(1))
    long_wall, _ = _timed(lambda: generate(steps))
    figures["generate_ms_per_token"] = 1000 * (long_wall - short_wall) / (steps - 1)
    # the next step of an episode: the prompt extended by a reply and a tool result (~120 tokens)
    wrapper = decode(prompts[:1], 1)
    extended = torch.cat([prompts[0], prompts[1][:, -120:]], dim=1)
    wall, _ = _timed(lambda: decode([extended], 1, wrapper))
    figures["reuse_step_ms"] = 1000 * wall
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a transformers folder (default: the untrained export)")
    parser.add_argument("--work", type=Path, default=Path("replication-work") / "hf-decode")
    parser.add_argument("--threads", default="1,2", help="torch thread counts to measure")
    parser.add_argument("--batches", default="1,4,8")
    parser.add_argument("--steps", type=int, default=48, help="tokens decoded per measurement")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the rate is the difference from one step)")
    import torch
    from transformers import AutoModelForCausalLM

    from harness_gym.model_export import export_model

    model_dir = args.model
    if model_dir is None:
        model_dir = args.work / "model-untrained"
        if not (model_dir / "config.json").exists():
            export_model(model_dir, force=True)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    prompts = real_prompts(model_dir, args.prompts)
    results: dict[str, Any] = {"model": str(model_dir), "load_before": os.getloadavg(), "threads": {}}
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        print(f"[threads {threads}] load {os.getloadavg()[0]:.2f}", flush=True)
        figures = measure(model, prompts, [int(b) for b in args.batches.split(",")], args.steps)
        print(f"      prefill {figures['prefill_ms_per_ktoken']:.0f} ms per 1k tokens, "
              f"a cached step {figures['reuse_step_ms']:.0f} ms", flush=True)  # fmt: skip
        results["threads"][str(threads)] = figures
    results["load_after"] = os.getloadavg()
    results["measured"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out} (load {results['load_before'][0]:.2f} before, {results['load_after'][0]:.2f} after)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
