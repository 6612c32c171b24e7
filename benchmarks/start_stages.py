"""Where a sandbox start without a spare goes: per-stage timers over starts interleaved with the floor.

    python benchmarks/start_stages.py [--starts 30] [--pause 0.3] [--out benchmarks/results/start_stages.json]

A reset right after a reset waits for a sandbox start (its spare is still being made), which costs
what a start without a spare does. This times that start's stages apart (``time.perf_counter``
around the library functions each stage is, wrapped here for the run only), on the caller's
thread: ``env.reset`` of an environment whose spares are off (``HARNESS_GYM_WARM_SPARE=0``),
interleaved start by start with the floor (:class:`rollout_scale.FloorReset`: tmpfs, overlay,
bash in bwrap answering) in alternating order, a pause before each. Per stage p50 and mean ms, and
what no stage covers ("rest"). Prints the figures and writes them as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from rollout_scale import FloorReset, _task, _uptime  # noqa: E402

# (label, module, attribute path): each wrapped with a timer; nested stages are reported apart and
# their time is taken out of the stage around them (each figure is its own part of the start)
STAGES: tuple[tuple[str, str, str], ...] = (
    ("end of the last episode (kill, unmount, release)", "harness_gym.env", "HarnessEnv._end_episode"),
    (
        "layered workspace (tmpfs; layer lookup)",
        "harness_gym.sandboxes.bubblewrap",
        "BubblewrapSandbox.new_layered_workspace",
    ),
    ("descriptor limit, control folder", "harness_gym.sandboxes.isolation", "private_folder"),
    ("uid lease", "harness_gym.sandboxes.isolation", "UidLease.acquire"),
    ("registry lines", "harness_gym.sandboxes.isolation", "Registry.add"),
    ("idmapped overlay mount", "harness_gym.sandboxes.layers", "EpisodeMounts.mount"),
    ("cgroups", "harness_gym.sandboxes.isolation", "make_sandbox_cgroups"),
    ("lease record", "harness_gym.sandboxes.isolation", "UidLease.record"),
    ("seccomp program fd", "harness_gym.sandboxes.bubblewrap", "_seccomp_fd"),
    ("bwrap argv (shadowed paths)", "harness_gym.sandboxes.bubblewrap", "BubblewrapSandbox._bwrap_argv"),
    ("fork+exec of sh (Popen, launcher thread)", "harness_gym.sandboxes.shell", "launch"),
    ("sh, setpriv, bwrap, bash to the first answer", "harness_gym.sandboxes.shell", "ShellSandbox._collect"),
    ("observation and the rest of the reset", "harness_gym.env", "HarnessEnv._new_episode"),
)


class Timers:
    """Exclusive time per label: a stage's time without the stages timed inside it."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self._stack: list[list[float]] = []  # per open stage: [started, time of nested stages]

    @contextlib.contextmanager
    def stage(self, label: str) -> Iterator[None]:
        frame = [time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            yield
        finally:
            self._stack.pop()
            spent = time.perf_counter() - frame[0]
            self.totals[label] += spent - frame[1]
            if self._stack:
                self._stack[-1][1] += spent

    def take(self) -> dict[str, float]:
        totals, self.totals = dict(self.totals), defaultdict(float)
        return totals


def _wrap(timers: Timers, label: str, module: str, path: str, main: int) -> Callable[[], None]:
    """Time ``module.path`` under ``label`` on the thread ``main`` only; returns the undo."""
    import importlib

    owner: Any = importlib.import_module(module)
    *parents, name = path.split(".")
    for part in parents:
        owner = getattr(owner, part)
    original = owner.__dict__[name]
    function = original.__func__ if isinstance(original, classmethod) else original

    def timed(*args: Any, **kwargs: Any) -> Any:
        if threading_ident() != main:
            return function(*args, **kwargs)
        with timers.stage(label):
            return function(*args, **kwargs)

    setattr(owner, name, classmethod(timed) if isinstance(original, classmethod) else timed)
    # a module that imported the function by name sees the wrapper too
    replaced = []
    if not parents:
        for other in list(sys.modules.values()):
            ours = other is not None and other is not owner and getattr(other, "__name__", "").startswith("harness_gym")
            if ours and getattr(other, name, None) is original:
                setattr(other, name, timed)
                replaced.append(other)

    def undo() -> None:
        setattr(owner, name, original)
        for other in replaced:
            setattr(other, name, original)

    return undo


def threading_ident() -> int:
    import threading

    return threading.get_ident()


def measure(starts: int, pause_s: float) -> dict[str, Any]:
    from harness_gym import HarnessEnv

    os.environ["HARNESS_GYM_WARM_SPARE"] = "0"  # every reset starts its own sandbox, on its clock
    timers = Timers()
    undo = [_wrap(timers, label, module, path, threading_ident()) for label, module, path in STAGES]
    per_stage: dict[str, list[float]] = defaultdict(list)
    resets: list[float] = []
    floors: list[float] = []
    try:
        with tempfile.TemporaryDirectory(prefix="hg-stages-") as folder:
            task = _task(Path(folder))
            floor = FloorReset(task.workspace_dir)
            env = HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=50)
            try:
                env.reset(seed=0)
                floor()
                timers.take()
                for index in range(starts):
                    for side in ("env", "floor") if index % 2 == 0 else ("floor", "env"):
                        time.sleep(pause_s)
                        if side == "floor":
                            floors.append(floor())
                            continue
                        timers.take()  # the floor's own mounts are not the reset's
                        started = time.perf_counter()
                        env.reset(seed=0)
                        total = time.perf_counter() - started
                        stages = timers.take()
                        resets.append(total * 1000)
                        for label, _, _ in STAGES:
                            per_stage[label].append(stages.get(label, 0.0) * 1000)
                        per_stage["rest (untimed)"].append((total - sum(stages.values())) * 1000)
            finally:
                env.close()
                floor.close()
    finally:
        for step in undo:
            step()
    floor_p50 = statistics.median(floors)
    return {
        "uptime": _uptime(),
        "starts": starts,
        "reset_without_spare_ms": {
            "p50": round(statistics.median(resets), 2),
            "mean": round(statistics.mean(resets), 2),
        },
        "floor_ms": {"p50": round(floor_p50, 2), "mean": round(statistics.mean(floors), 2)},
        "reset_vs_floor_p50": round(statistics.median(resets) / floor_p50, 2),
        "stages_ms": {
            label: {"p50": round(statistics.median(values), 2), "mean": round(statistics.mean(values), 2)}
            for label, values in per_stage.items()
        },
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=30)
    parser.add_argument("--pause", type=float, default=0.3, help="seconds before each start")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "start_stages.json")
    args = parser.parse_args(argv)
    if args.starts < 2:
        parser.error("--starts must be at least 2")
    result = measure(args.starts, args.pause)
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
