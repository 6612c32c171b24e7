"""Environments at rollout scale: simultaneous resets, the first tool-server call, thread exits.

    python benchmarks/rollout_scale.py [--environments 64] [--rounds 3] [--out benchmarks/results/rollout_scale.json]

Measured (ms): ``--environments`` environments reset at once from a thread pool of that size, the
first time (no spare) and again (warm spares, made by the spare pool), p50 and max per round; the
first non-bash tool call (a file-editor view) of an episode whose sandbox was a spare; and how many
sandboxes a pool's shutdown killed (reset in a pool, pool shut down, one command in each: lost when
it does not answer in the same shell). Prints the figures and writes them as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _task(root: Path) -> Any:
    from harness_gym.tasks.base import Task

    (root / "files").mkdir()
    (root / "files" / "a.txt").write_text("alpha\n")
    (root / "grader").mkdir()
    (root / "grader" / "grade.py").write_text("print(1.0)\n")
    return Task(id="scale", instruction="x", workspace_dir=root / "files", grader_files=(root / "grader",))


def _timed_reset(env: Any) -> float:
    started = time.perf_counter()
    env.reset(seed=0)
    return (time.perf_counter() - started) * 1000


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {"p50": round(statistics.median(ordered), 1), "max": round(ordered[-1], 1), "n": len(ordered)}


def measure(count: int, rounds: int) -> dict[str, Any]:
    from harness_gym import HarnessEnv

    with tempfile.TemporaryDirectory(prefix="hg-scale-") as folder:
        task = _task(Path(folder))
        envs = [HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=50) for _ in range(count)]
        try:
            resets: dict[str, list[float]] = {}
            for round_ in range(rounds + 1):
                with ThreadPoolExecutor(max_workers=count) as pool:
                    times = list(pool.map(_timed_reset, envs))
                label = "first (no spare)" if round_ == 0 else "with spares" if round_ > 1 else "second (no spare yet)"
                resets.setdefault(label, []).extend(times)
                time.sleep(2.0)  # the spares are made meanwhile
            lost = 0
            first_tool: list[float] = []
            call = '<tool_call>{"name": "file_editor", "arguments": {"command": "view", "path": "/workspace/a.txt"}}</tool_call>'
            for env in envs:
                sandbox: Any = env.sandbox
                shell = sandbox._proc
                if sandbox.run("cat a.txt").output != "alpha\n" or sandbox._proc is not shell:
                    lost += 1
                started = time.perf_counter()
                env.step(call)
                first_tool.append((time.perf_counter() - started) * 1000)
        finally:
            for env in envs:
                env.close()
    return {
        "environments": count,
        "resets_ms": {label: _summary(values) for label, values in resets.items()},
        "first_tool_server_call_ms": _summary(first_tool),
        "lost_to_pool_shutdowns": lost,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--environments", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="resets with spares after the first two")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "rollout_scale.json")
    args = parser.parse_args(argv)
    if args.environments < 1 or args.rounds < 1:
        parser.error("--environments and --rounds must be at least 1")
    result = measure(args.environments, args.rounds)
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
