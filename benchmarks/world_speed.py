"""Does a world cost anything? The host's folders against a built world, interleaved in one run.

    python benchmarks/world_speed.py [--world clawgym] [--rounds 300] [--resets 40]
                                     [--out benchmarks/results/world_speed.json]

Measures, for the local (bubblewrap) sandbox on the host's /usr and on the world: the round trip
of `true` and of `python3 -c pass` (the world's own interpreter), sandbox start-up (a new shell,
as at every reset) and `HarnessEnv.reset` with a built-in task. Rounds alternate between the two
sandboxes so that machine load hits both alike. Target (issue: task worlds): every figure on the
world within 10% of the host's (ratio <= 1.10).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from harness_gym import HarnessEnv
from harness_gym.sandboxes import BubblewrapSandbox
from harness_gym.tasks import load_tasks
from harness_gym.worlds import load_world

TARGET_RATIO = 1.10


def percentile(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(samples),
        "p90_ms": percentile(samples, 0.9),
        "n": len(samples),
    }


def interleaved(functions: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Run each function once per round, alternating the order every round."""
    samples: dict[str, list[float]] = {name: [] for name in functions}
    names = list(functions)
    for number in range(rounds):
        for name in names if number % 2 == 0 else reversed(names):
            started = time.perf_counter()
            functions[name]()
            samples[name].append((time.perf_counter() - started) * 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world", default="clawgym")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--resets", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/world_speed.json"))
    args = parser.parse_args()

    world = load_world(args.world)
    root = world.root()  # raises with the build command when the world is missing
    sandboxes = {"host": BubblewrapSandbox(), "world": BubblewrapSandbox(system_root=root)}
    workspaces = {name: sandbox.new_workspace() for name, sandbox in sandboxes.items()}
    for name, sandbox in sandboxes.items():
        sandbox.start(workspaces[name], "/workspace")

    def command(name: str, text: str) -> Callable[[], None]:
        def run() -> None:
            result = sandboxes[name].run(text)
            if result.exit_code != 0:
                raise RuntimeError(f"{name}: {text!r} failed: {result.output}")

        return run

    def restart(name: str) -> Callable[[], None]:
        def run() -> None:
            sandboxes[name].start(workspaces[name], "/workspace")  # a new shell, as every reset starts one

        return run

    figures: dict[str, dict[str, dict[str, float]]] = {}
    for label, text, rounds in (
        ("true", "true", args.rounds),
        ("python3 -c pass", "python3 -c pass", args.rounds // 5),
    ):
        runs = interleaved({name: command(name, text) for name in sandboxes}, rounds)
        figures[label] = {name: summary(values) for name, values in runs.items()}
    figures["shell start"] = {
        name: summary(values)
        for name, values in interleaved({name: restart(name) for name in sandboxes}, args.resets).items()
    }
    for sandbox in sandboxes.values():
        sandbox.close()

    tasks = load_tasks("builtin")[:1]
    envs = {"host": HarnessEnv(tasks=tasks, world="host"), "world": HarnessEnv(tasks=tasks, world=world.name)}
    resets = interleaved({name: functools.partial(env.reset, seed=0) for name, env in envs.items()}, args.resets)
    figures["env.reset"] = {name: summary(values) for name, values in resets.items()}
    for env in envs.values():
        env.close()

    rows: list[dict[str, object]] = []
    ratios_p50: list[float] = []
    print(f"world {world.name!r} ({world.digest}) against the host's folders; medians / p90 in ms")
    print(f"{'measure':<18} {'host':>16} {'world':>16} {'ratio p50':>10} {'ratio p90':>10}")
    for label, pair in figures.items():
        host, on_world = pair["host"], pair["world"]
        ratio50, ratio90 = on_world["median_ms"] / host["median_ms"], on_world["p90_ms"] / host["p90_ms"]
        ratios_p50.append(ratio50)
        rows.append({"measure": label, "host": host, "world": on_world, "ratio_p50": ratio50, "ratio_p90": ratio90})
        print(
            f"{label:<18} {host['median_ms']:7.2f} / {host['p90_ms']:6.2f} {on_world['median_ms']:7.2f} / "
            f"{on_world['p90_ms']:6.2f} {ratio50:10.2f} {ratio90:10.2f}"
        )
    met = all(ratio <= TARGET_RATIO for ratio in ratios_p50)
    print(f"target: world within {TARGET_RATIO:.2f}x of the host at the median: {'met' if met else 'NOT met'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "world": world.name,
                "digest": world.digest,
                "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                "target_ratio": TARGET_RATIO,
                "target_met_at_median": met,
                "rows": rows,
            },
            indent=1,
        )
    )
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
