"""The reset's kill of the finished episode, frozen against waited for, interleaved in one run.

    python benchmarks/reset_kill.py [--environments 64] [--rounds 6] [--out benchmarks/results/reset_kill.json]

A reset ends the finished episode's processes before it returns (``SandboxBackend.stop_agent``).
``freeze``: the code as it is (where the sandbox is in a v2 cgroup: frozen, every process SIGKILLed,
thawed; the kernel's teardown of them left to the background close). ``wait``: the same code with
the freeze refused (``isolation.kill_frozen`` returns False), so the reset kills and waits until the
sandbox's processes are gone, as before. Rounds alternate the two (``wait`` first in odd rounds); each
round: one ``env.reset`` with its spare ready (0.5 s after the spare was made, as in a model's turn),
and ``--environments`` resets at once from a thread pool with every spare ready. Also the
``stop_agent`` call alone, and the CPU of each round (a ``cpuacct`` cgroup holding this process and
every sandbox process: spares' starts and the closes included, so its difference is the kill's).
Prints the figures and writes them as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grading_time import _cpu_seconds, cpu_meter
from rollout_scale import _settled, _summary, _task, _uptime

VARIANTS = ("freeze", "wait")


@contextlib.contextmanager
def variant(name: str) -> Iterator[None]:
    """``wait``: the reset's freeze refused, so it kills and waits as before."""
    from harness_gym.sandboxes import isolation

    original = isolation.kill_frozen
    if name == "wait":
        isolation.kill_frozen = lambda *args, **kwargs: False
    try:
        yield
    finally:
        isolation.kill_frozen = original


def _timed(env: Any) -> float:
    started = time.perf_counter()
    env.reset(seed=0)
    return (time.perf_counter() - started) * 1000


def _timed_stop(env: Any) -> float:
    """One reset, returning how long its ``stop_agent`` of the finished sandbox took (ms)."""
    sandbox = env.sandbox
    spent: list[float] = []
    original = sandbox.stop_agent

    def timed() -> None:
        started = time.perf_counter()
        original()
        spent.append((time.perf_counter() - started) * 1000)

    sandbox.stop_agent = timed
    env.reset(seed=0)
    return spent[0] if spent else float("nan")


def measure(count: int, rounds: int, pause_s: float = 0.5) -> dict[str, Any]:
    from harness_gym import HarnessEnv
    from harness_gym.sandboxes import isolation

    samples: dict[str, dict[str, list[float]]] = {
        name: {"one_reset_ms": [], "stop_agent_ms": [], "at_once_ms": [], "cpu_s_per_reset": []} for name in VARIANTS
    }
    with tempfile.TemporaryDirectory(prefix="hg-kill-") as folder, cpu_meter() as meter:
        task = _task(Path(folder))
        single = HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=50)
        envs = [HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=50) for _ in range(count)]
        try:
            for _ in range(2):  # a spare is kept from an environment's second reset of a task on
                single.reset(seed=0)
                with ThreadPoolExecutor(max_workers=count) as pool:
                    list(pool.map(lambda env: env.reset(seed=0), envs))
            freezable = any(isolation.freezable(group) for group in single.sandbox._cgroups)  # type: ignore[union-attr]
            for round_ in range(rounds):
                for name in VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]:
                    with variant(name):
                        cpu = _cpu_seconds()
                        _settled([single], 60)
                        time.sleep(pause_s)
                        samples[name]["one_reset_ms"].append(_timed(single))
                        _settled([single], 60)
                        time.sleep(pause_s)
                        samples[name]["stop_agent_ms"].append(_timed_stop(single))
                        _settled([single, *envs], 120)
                        time.sleep(pause_s)
                        with ThreadPoolExecutor(max_workers=count) as pool:
                            samples[name]["at_once_ms"] += pool.map(_timed, envs)
                        _settled([single, *envs], 120)  # the closes and the next spares, counted in
                        samples[name]["cpu_s_per_reset"].append((_cpu_seconds() - cpu) / (count + 2))
        finally:
            for env in [single, *envs]:
                env.close()
    figures = {
        name: {
            key: (_summary(values) if key != "cpu_s_per_reset" else round(statistics.median(values), 4))
            for key, values in found.items()
        }
        for name, found in samples.items()
    }

    def p50(name: str, key: str) -> float:
        summary = figures[name][key]
        assert isinstance(summary, dict)
        return summary["p50"]

    ratios = {
        key: round(p50("freeze", key) / p50("wait", key), 3) for key in ("one_reset_ms", "stop_agent_ms", "at_once_ms")
    }
    return {
        "uptime_after": _uptime(),
        "environments": count,
        "rounds": rounds,
        "freezer_group": freezable,
        "cpu_measured_by": meter,
        "figures": figures,
        "freeze_over_wait_p50": ratios,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--environments", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=6, help="rounds, each variant once per round")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/reset_kill.json"))
    args = parser.parse_args()
    if args.environments < 1 or args.rounds < 1:
        raise SystemExit("--environments and --rounds must be >= 1")
    before = _uptime()
    result = {"uptime_before": before, **measure(args.environments, args.rounds)}
    for name, found in result["figures"].items():
        print(
            f"{name:6s}: one reset p50 {found['one_reset_ms']['p50']} ms (max {found['one_reset_ms']['max']}), "
            f"its stop_agent p50 {found['stop_agent_ms']['p50']} ms; {args.environments} at once p50 "
            f"{found['at_once_ms']['p50']} ms, max {found['at_once_ms']['max']}; CPU per reset "
            f"{found['cpu_s_per_reset'] * 1000:.1f} ms"
        )
    print(f"freeze / wait, p50: {result['freeze_over_wait_p50']}; freezer group: {result['freezer_group']}")
    print(f"{before} before, {result['uptime_after']} after; CPU: {result['cpu_measured_by']}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
