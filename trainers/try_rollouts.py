"""Run the trainer's executor on a few dataset rows with a local engine, before a GPU job does.

    python -m trainers.try_rollouts data/prompts.jsonl --limit 4 --show
    python -m trainers.try_rollouts data/prompts.jsonl --engine vllm --model /models/Qwen3-4B

Each row goes through ``AgentExecutor.execute`` exactly as OpenRLHF's rollout actor would call it
(same tokenizer, chat template, engine call and sampling parameters), so what is printed is what
training would see: reward, turns, tokens, the share of them the policy wrote, context segments.
``--show`` prints each sequence with the trained (policy) spans between ``«`` and ``»``.
Without ``--model`` the packaged SmolLM2-135M-Instruct runs on transformers (CPU).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness_gym.agents.huggingface import load_model
from trainers.engines import SamplingParams, TransformersEngine, VLLMEngine
from trainers.executor_settings import ExecutorSettings
from trainers.rollout import HarnessAgentExecutor


def read_rows(path: Path, limit: int | None) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise ValueError(f"{path}:{number}: not a JSON line") from None
            if "label" not in row:
                raise ValueError(f"{path}:{number}: no 'label' (build datasets with `python -m trainers.dataset`)")
            rows.append(row)
            if limit and len(rows) >= limit:
                break
    if not rows:
        raise ValueError(f"{path} has no rows")
    return rows


def marked(tokenizer: Any, tokens: list[int], ranges: list[tuple[int, int]]) -> str:
    """The sequence as text, policy spans between « and »."""
    parts, at = [], 0
    for start, end in ranges:
        parts += [tokenizer.decode(tokens[at:start]), "«", tokenizer.decode(tokens[start:end]), "»"]
        at = end
    parts.append(tokenizer.decode(tokens[at:]))
    return "".join(parts)


def summary(row: dict[str, Any], out: dict[str, Any], seconds: float) -> dict[str, Any]:
    label = json.loads(row["label"])
    ranges = out["action_ranges"]
    policy = sum(end - start for start, end in ranges)
    return {
        "task_id": label["task_id"],
        "harness": label["harness"] if isinstance(label["harness"], str) else "inline-spec",
        "reward": out["reward"],
        "turns": len(ranges),
        "tokens": len(out["observation_tokens"]),
        "policy_tokens": policy,
        "truncated": out["truncated"],
        "segments": out["extra_logs"].get("segments", 1.0),
        "parse_errors": out["extra_logs"].get("parse_errors", 0.0),
        "seconds": round(seconds, 2),
    }


async def run_rows(
    executor: HarnessAgentExecutor, rows: list[dict[str, Any]], engine: Any, tokenizer: Any, params: Any,
    max_length: int, samples: int,
) -> list[tuple[dict[str, Any], dict[str, Any], float]]:  # fmt: skip
    async def one(row: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], float]:
        started = time.perf_counter()
        out = await executor.execute(row.get("prompt", ""), row["label"], params, max_length, tokenizer, engine)
        return row, out, time.perf_counter() - started

    return await asyncio.gather(*(one(row) for row in rows for _ in range(samples)))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainers.try_rollouts", description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", type=Path, help="a prompt dataset written by trainers.dataset")
    parser.add_argument("--model", help="a local model folder (default: the packaged SmolLM2-135M-Instruct)")
    parser.add_argument("--engine", choices=("transformers", "vllm"), default="transformers")
    parser.add_argument("--limit", type=int, default=2, help="rows to run")
    parser.add_argument("--samples", type=int, default=1, help="rollouts per row (a GRPO group)")
    parser.add_argument("--max-len", type=int, default=8192, help="as OpenRLHF's --data.max_len")
    parser.add_argument("--max-new-tokens", type=int, default=256, help="per turn, as --rollout.max_new_tokens")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-steps", type=int, help="override the harnesses' step budgets")
    parser.add_argument("--sandbox", help="sandbox backend (default: bubblewrap, or Docker for image tasks)")
    parser.add_argument("--vllm-memory", type=float, default=0.3, help="vLLM's gpu_memory_utilization")
    parser.add_argument("--show", action="store_true", help="print each sequence with the policy spans marked")
    parser.add_argument("--out", type=Path, help="write the per-rollout summary as JSON")
    args = parser.parse_args(argv)
    try:
        rows = read_rows(args.dataset, args.limit)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    settings = ExecutorSettings(sandbox=args.sandbox, max_steps=args.max_steps)
    executor = HarnessAgentExecutor(settings)
    if args.engine == "vllm":
        import vllm  # GPU nodes only (openrlhf[vllm])
        from transformers import AutoTokenizer

        if not args.model:
            parser.error("--engine vllm needs --model (a Hugging Face model folder)")
        tokenizer = AutoTokenizer.from_pretrained(args.model)
        engine: Any = VLLMEngine(args.model, max_model_len=args.max_len, gpu_memory_utilization=args.vllm_memory)
        params: Any = vllm.SamplingParams(temperature=args.temperature, max_tokens=args.max_new_tokens, logprobs=1)
    else:
        from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: only this engine needs it

        if args.model:
            tokenizer = AutoTokenizer.from_pretrained(args.model)
            model = AutoModelForCausalLM.from_pretrained(args.model)
        else:
            tokenizer, model, _ = load_model()
        engine = TransformersEngine(model, tokenizer, stop_token_ids=executor.turns_for(tokenizer).stop_token_ids)
        params = SamplingParams(temperature=args.temperature, max_tokens=args.max_new_tokens, logprobs=1)
    try:
        results = asyncio.run(run_rows(executor, rows, engine, tokenizer, params, args.max_len, args.samples))
    finally:
        if isinstance(engine, VLLMEngine):
            engine.shutdown()
    summaries = []
    print(f"{'task':<36}{'harness':<22}{'reward':>7}{'turns':>6}{'tokens':>8}{'policy':>8}{'segs':>5}{'s':>7}")
    for row, out, seconds in results:
        item = summary(row, out, seconds)
        summaries.append(item)
        print(
            f"{item['task_id'][:35]:<36}{item['harness'][:21]:<22}{item['reward']:>7.2f}{item['turns']:>6}"
            f"{item['tokens']:>8}{item['policy_tokens']:>8}{int(item['segments']):>5}{item['seconds']:>7.1f}"
        )
        if args.show:
            print(marked(tokenizer, out["observation_tokens"], out["action_ranges"]))
            print("-" * 80)
    if args.out:
        args.out.write_text(json.dumps(summaries, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
