"""Benchmark-runner throughput: episodes per second for the reference agent at 1, 2 and 8
parallel workers (threads, and processes), on the built-in tasks in the quick harness set.

    python benchmarks/bench_throughput.py [--runs 2] [--out benchmarks/results/bench_throughput.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from harness_gym.agents.factory import make_agent
from harness_gym.bench import BenchRunner, load_records, resolve_harnesses


def measure(workers: int, executor: str, runs: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="harness-gym-bench-") as out:
        runner = BenchRunner(
            functools.partial(make_agent, "reference"),
            resolve_harnesses("quick"),
            "builtin",
            runs=runs,
            out_dir=out,
            workers=workers,
            executor=executor,
            progress=False,
            save_trajectories=False,
        )
        started = time.perf_counter()
        records = load_records(runner.run())
        elapsed = time.perf_counter() - started
    failures = sum(r["reward"] != 1.0 for r in records)
    return {
        "workers": workers,
        "executor": executor,
        "episodes": len(records),
        "seconds": elapsed,
        "episodes_per_s": len(records) / elapsed,
        "failures": failures,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/bench_throughput.json"))
    args = parser.parse_args()
    rows = []
    print(f"{'executor':<10}{'workers':>8}{'episodes':>10}{'seconds':>9}{'episodes/s':>12}{'failures':>10}")
    for executor in ("thread", "process"):
        for workers in (1, 2, 8):
            row = measure(workers, executor, args.runs)
            rows.append(row)
            print(
                f"{executor:<10}{workers:>8}{row['episodes']:>10}{row['seconds']:>9.1f}{row['episodes_per_s']:>12.2f}{row['failures']:>10}"
            )
    result = {"benchmark": "bench_throughput", "cores": os.cpu_count(), "platform": platform.platform(), "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
