"""Per-step overhead of `harness-gym serve-env` over the wire, against ``env.step`` in process.

The same scripted steps (a ``true`` shell command, a file view, a reply without a tool call) run
through a ``gym.make`` environment in this process and through openenv-core's own client
(``GenericEnvClient``, WebSocket) against ``harness-gym serve-env`` in another process on
127.0.0.1 (as deployed: no shared interpreter lock with the client), interleaved in rounds so
that load from other processes hits both alike. Overhead = client-side step time minus in-process
step time (medians); it covers JSON serialisation of the whole observation, pydantic validation,
the WebSocket round trip and the server's thread hand-off; a bare round trip (a ``state`` message,
no environment work) is reported as the protocol's floor. Also reported: the size of a step's
observation on the wire, which grows with the context (every step sends the full message list).

    python benchmarks/env_server_overhead.py [--rounds 8] [--steps 24] [--out benchmarks/results/env_server_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

import gymnasium as gym
from openenv.core import GenericEnvClient

import harness_gym  # noqa: F401  (registers the environments)

ENV_ID = "Harness-S0T0O0C0W0"
TASK_ID = "workspace-config-update"


def actions() -> list[str]:
    return [
        '<tool_call>{"name": "execute_bash", "arguments": {"command": "true"}}</tool_call>',
        '<tool_call>{"name": "file_editor", "arguments": {"command": "view", "path": "."}}</tool_call>',
        "Thinking about what to do next, without calling a tool.",
    ]


KINDS = ("shell command", "file view", "no tool call")


class KindFigures(TypedDict):
    """One action kind's step times, in process and over the wire."""

    in_process: dict[str, float]
    over_the_wire: dict[str, float]
    overhead_median_ms: float


def in_process_round(env: gym.Env[Any, Any], steps: int, seed: int) -> list[float]:
    env.reset(seed=seed, options={"task_id": TASK_ID})
    times = []
    for i in range(steps):
        started = time.perf_counter()
        env.step(actions()[i % 3])
        times.append((time.perf_counter() - started) * 1000)
    return times


def wire_round(client: Any, steps: int, seed: int) -> tuple[list[float], list[int]]:
    client.reset(seed=seed, task_id=TASK_ID)
    times, sizes = [], []
    for i in range(steps):
        started = time.perf_counter()
        result = client.step({"text": actions()[i % 3]})
        times.append((time.perf_counter() - started) * 1000)
        sizes.append(len(json.dumps(result.observation)))
    return times, sizes


def state_round_trips(client: Any, count: int) -> list[float]:
    """``state`` messages: the protocol's own round trip, with no environment work behind it."""
    times = []
    for _ in range(count):
        started = time.perf_counter()
        client.state()
        times.append((time.perf_counter() - started) * 1000)
    return times


def summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8, help="interleaved rounds (one episode each way per round)")
    parser.add_argument("--steps", type=int, default=24, help="steps per episode")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/env_server_overhead.json"))
    args = parser.parse_args()
    if args.steps % len(KINDS):
        parser.error(f"--steps must be a multiple of {len(KINDS)} (the actions cycle)")

    # a step budget above the episode length, so no episode is graded mid-measurement
    kwargs = {"max_steps": args.steps + 1}
    env = gym.make(ENV_ID, max_episode_steps=args.steps + 1, **kwargs)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness_gym.cli",
            "serve-env",
            ENV_ID,
            "--port",
            "0",
            "--env-kwargs",
            json.dumps(kwargs),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert server.stdout is not None
    url = server.stdout.readline().split(" at ")[1].split()[0]
    local: list[float] = []
    wire: list[float] = []
    sizes: list[int] = []
    bare: list[float] = []
    try:
        with GenericEnvClient(base_url=url).sync() as client:
            wire_round(client, 3, seed=0)  # warm-up: imports, first sandbox, first connection
            in_process_round(env, 3, seed=0)
            for round_index in range(args.rounds):
                local += in_process_round(env, args.steps, seed=round_index)
                times, round_sizes = wire_round(client, args.steps, seed=round_index)
                wire += times
                sizes += round_sizes
                bare += state_round_trips(client, args.steps)
    finally:
        env.close()
        server.terminate()
        server.wait(timeout=60)

    local_summary, wire_summary = summary(local), summary(wire)
    per_kind: dict[str, KindFigures] = {
        kind: {
            "in_process": summary(local[i::3]),
            "over_the_wire": summary(wire[i::3]),
            "overhead_median_ms": round(statistics.median(wire[i::3]) - statistics.median(local[i::3]), 3),
        }
        for i, kind in enumerate(KINDS)
    }
    overhead = round(wire_summary["median_ms"] - local_summary["median_ms"], 3)
    result = {
        "benchmark": "env_server_overhead",
        "env_id": ENV_ID,
        "rounds": args.rounds,
        "steps_per_episode": args.steps,
        "in_process_step": local_summary,
        "over_the_wire_step": wire_summary,
        "overhead_median_ms": overhead,
        "bare_round_trip": summary(bare),
        "per_action_kind": per_kind,
        "ratio_median": round(wire_summary["median_ms"] / local_summary["median_ms"], 2),
        "observation_bytes": {"first": sizes[0], "last": sizes[-1], "median": int(statistics.median(sizes))},
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "note": "interleaved rounds on a shared machine: compare the ratio, not absolute times",
    }
    print(f"in-process env.step : median {local_summary['median_ms']:.2f} ms, p90 {local_summary['p90_ms']:.2f} ms")
    print(f"over the wire (WS)  : median {wire_summary['median_ms']:.2f} ms, p90 {wire_summary['p90_ms']:.2f} ms")
    print(f"overhead per step   : {overhead:.2f} ms (x{result['ratio_median']})")
    for kind, figures in per_kind.items():
        print(
            f"  {kind:<14}: in process {figures['in_process']['median_ms']:.2f} ms, "
            f"over the wire {figures['over_the_wire']['median_ms']:.2f} ms (+{figures['overhead_median_ms']:.2f} ms)"
        )
    print(f"bare round trip     : median {result['bare_round_trip']['median_ms']:.2f} ms (a state message)")
    print(f"observation size    : {sizes[0]} to {sizes[-1]} bytes as JSON (full context every step)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
