"""The trainer's executor: its own cost per turn and rollout throughput.

Each episode replays the reference agent's replies through ``ScriptedEngine`` (SmolLM2's real
tokenizer and chat template), so generation costs nothing and what remains is the executor:
template rendering and tokenization of the feedback, label parsing, bookkeeping — plus the
environment step, which is timed separately and subtracted. Throughput is measured with 1 and 8
concurrent episodes on one event loop (the environment work runs in the executor's thread pool).
Target: executor overhead per turn under 5 ms (median).

    python benchmarks/executor_overhead.py [--episodes 24] [--out benchmarks/results/executor_overhead.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from harness_gym.agents import ReferenceAgent, run_episode
from harness_gym.agents.huggingface import default_model
from harness_gym.env import HarnessEnv
from harness_gym.tasks import Task, load_tasks
from trainers.engines import SamplingParams, ScriptedEngine
from trainers.executor_settings import ExecutorSettings, RolloutRequest
from trainers.rollout import HarnessAgentExecutor

CONFIGS = ("S0T0O0C0W0", "S1T2O0C1W2", "S2T1O2C2W1")


def replies_for(task: Task, config: str) -> list[str]:
    env = HarnessEnv(config, tasks=[task])
    try:
        result = run_episode(env, ReferenceAgent(), seed=3, task_id=task.id)
    finally:
        env.close()
    return [m["content"] for m in result.transcript if m["role"] == "assistant"]


class StepClock:
    """Times every environment step and reset (they run in worker threads)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.lock = threading.Lock()
        self.originals = {name: getattr(HarnessEnv, name) for name in ("step", "reset", "truncate", "close")}

    def __enter__(self) -> StepClock:
        for name, original in self.originals.items():
            setattr(HarnessEnv, name, self._timed(original))
        return self

    def __exit__(self, *exc: object) -> None:
        for name, original in self.originals.items():
            setattr(HarnessEnv, name, original)

    def _timed(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def timed(env: HarnessEnv, *args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return original(env, *args, **kwargs)
            finally:
                with self.lock:
                    self.seconds += time.perf_counter() - started

        return timed


def run_batch(
    executor: HarnessAgentExecutor,
    jobs: Sequence[tuple[str, list[str]]],
    tokenizer: Any,
    stop_id: int,
    concurrency: int,
) -> tuple[float, float, int, list[float]]:
    """(wall seconds, environment seconds, turns, rewards) for ``jobs`` run ``concurrency`` at a time."""

    async def main() -> list[dict[str, Any]]:
        semaphore = asyncio.Semaphore(concurrency)

        async def one(label: str, replies: list[str]) -> dict[str, Any]:
            async with semaphore:
                engine = ScriptedEngine(tokenizer, list(replies), stop_id)
                return await executor.execute("", label, SamplingParams(), 32768, tokenizer, engine)

        return await asyncio.gather(*(one(label, replies) for label, replies in jobs))

    with StepClock() as clock:
        started = time.perf_counter()
        outs = asyncio.run(main())
        wall = time.perf_counter() - started
    turns = sum(len(o["action_ranges"]) for o in outs)
    return wall, clock.seconds, turns, [o["reward"] for o in outs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/executor_overhead.json"))
    args = parser.parse_args()
    folder, gguf = default_model()
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    executor = HarnessAgentExecutor(ExecutorSettings())
    turns = executor.turns_for(tokenizer)
    stop_id = turns.encode(turns.closing)[0]
    tasks = load_tasks("builtin:train")
    jobs = []
    for index in range(args.episodes):
        task, config = tasks[index % len(tasks)], CONFIGS[index % len(CONFIGS)]
        jobs.append((RolloutRequest("builtin:train", task.id, config, seed=3).to_label(), replies_for(task, config)))

    # overhead per turn: one episode at a time, so wall − environment time is the executor's own
    per_turn = []
    for label, replies in jobs:
        wall, env_s, n_turns, _ = run_batch(executor, [(label, replies)], tokenizer, stop_id, 1)
        per_turn.append((wall - env_s) / n_turns * 1000)
    rows = []
    for concurrency in (1, 8):
        wall, env_s, n_turns, rewards = run_batch(executor, jobs, tokenizer, stop_id, concurrency)
        rows.append({
            "concurrency": concurrency, "episodes": len(jobs), "turns": n_turns, "seconds": wall,
            "episodes_per_s": len(jobs) / wall, "turns_per_s": n_turns / wall,
            "failures": sum(r != 1.0 for r in rewards),
        })  # fmt: skip
    overhead = {
        "median": statistics.median(per_turn),
        "p90": sorted(per_turn)[int(0.9 * (len(per_turn) - 1))],
        "max": max(per_turn),
    }
    result = {
        "benchmark": "executor_overhead",
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "overhead_ms_per_turn": overhead,
        "throughput": rows,
    }
    print(
        f"executor overhead per turn: median {overhead['median']:.2f} ms, p90 {overhead['p90']:.2f} ms, "
        f"max {overhead['max']:.2f} ms"
    )
    print(f"{'concurrent':>10}{'episodes':>10}{'turns':>8}{'seconds':>9}{'episodes/s':>12}{'failures':>10}")
    for row in rows:
        print(
            f"{row['concurrency']:>10}{row['episodes']:>10}{row['turns']:>8}{row['seconds']:>9.2f}"
            f"{row['episodes_per_s']:>12.2f}{row['failures']:>10}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
