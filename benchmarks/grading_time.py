"""Grading time per episode, this checkout against a baseline checkout, interleaved.

    python benchmarks/grading_time.py --baseline /path/to/old/checkout [--rounds 10]
                                      [--tasks repair-median,workspace-json-to-csv]
                                      [--out benchmarks/results/grading_time.json]

Each round runs one worker process per checkout, alternating, so both see the same machine load;
a worker imports harness_gym from its checkout, and for every task starts a bubblewrap sandbox on
the task's workspace (``start_ms``) and grades it (``grade_ms``: ``Task.grade``, a fresh grading
sandbox). The ratio of medians (this / baseline) is what the reward-integrity issue bounds (1.5x).
Without ``--baseline`` only this checkout is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
DEFAULT_TASKS = "repair-median,workspace-json-to-csv,workspace-executable-script"


def worker(task_ids: list[str]) -> dict[str, dict[str, float]]:
    """Time starting a sandbox and grading, once per task, with the harness_gym on sys.path."""
    from harness_gym.sandboxes import BubblewrapSandbox
    from harness_gym.tasks import load_tasks

    tasks = {t.id: t for t in load_tasks("builtin:all")}
    times: dict[str, dict[str, float]] = {}
    with BubblewrapSandbox() as box:
        for task_id in task_ids:
            task = tasks[task_id]
            workspace = box.new_workspace()
            task.materialize(workspace)
            started = time.perf_counter()
            box.start(workspace, task.mount_path)
            begun = time.perf_counter()
            graded = task.grade(box)
            ended = time.perf_counter()
            if graded.error is not None and "reward" not in graded.log:
                raise RuntimeError(f"{task_id}: grading failed: {graded.error}\n{graded.log[-2000:]}")
            times[task_id] = {"start_ms": (begun - started) * 1000, "grade_ms": (ended - begun) * 1000}
    return times


def run_worker(checkout: Path, task_ids: list[str]) -> dict[str, dict[str, float]]:
    env = dict(os.environ, PYTHONPATH=str(checkout))
    out = subprocess.run(
        [sys.executable, __file__, "--worker", ",".join(task_ids)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", type=Path, help="a checkout of the code to compare against")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--tasks", default=DEFAULT_TASKS)
    parser.add_argument("--out", type=Path, default=HERE / "benchmarks" / "results" / "grading_time.json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker.split(","))))
        return
    task_ids = args.tasks.split(",")
    variants = {"current": HERE} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    samples: dict[str, dict[str, dict[str, list[float]]]] = {
        v: {t: {"start_ms": [], "grade_ms": []} for t in task_ids} for v in variants
    }
    for round_index in range(args.rounds):
        order = list(variants) if round_index % 2 == 0 else list(reversed(variants))
        for variant in order:
            for task_id, figures in run_worker(variants[variant], task_ids).items():
                for key, value in figures.items():
                    samples[variant][task_id][key].append(value)
    result: dict[str, object] = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "rounds": args.rounds,
        "medians_ms": {
            v: {t: {k: statistics.median(s) for k, s in per.items()} for t, per in by_task.items()}
            for v, by_task in samples.items()
        },
    }
    if "baseline" in variants:
        result["grade_ratio"] = {
            t: statistics.median(samples["current"][t]["grade_ms"])
            / statistics.median(samples["baseline"][t]["grade_ms"])
            for t in task_ids
        }
        result["start_ratio"] = {
            t: statistics.median(samples["current"][t]["start_ms"])
            / statistics.median(samples["baseline"][t]["start_ms"])
            for t in task_ids
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
