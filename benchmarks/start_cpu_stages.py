"""Where a sandbox start and close spends CPU, stage by stage, beside 0 and ``--idle N`` live sandboxes
(CPU from a cgroup, not wall time: ``start_stages.py`` times the reset path's stages).

    python benchmarks/start_cpu_stages.py [--starts 20] [--idle 128] [--blocks 2]
                                      [--out benchmarks/results/start_cpu_stages.json]

A spare-less :class:`BubblewrapSandbox` life cycle on the first built-in task's layered workspace,
split into: ``workspace`` (the episode folder and its tmpfs), ``prepare`` (uid lease, idmapped layer
and overlay, cgroups), ``shell`` (the launcher, bwrap and bash up to its first answer), ``command``
(one ``true``), ``stop`` (kill, cgroups, uid) and ``release`` (the workspace's mounts and folder).
CPU is the ``cpuacct`` cgroup this process puts itself in (every sandbox process stays in it), so
a stage's figure includes the processes it starts. Blocks alternate between no other sandbox and
``--idle`` started ones (a rollout's other environments), so load shifts both sides alike; each
block reports the host's mount count (every sandbox start copies its namespace's mount table).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from harness_gym.sandboxes import BubblewrapSandbox
from harness_gym.tasks import load_tasks
from harness_gym.tasks.base import Task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grading_time import _cpu_seconds, cpu_meter, idle_sandboxes

STAGES = ("workspace", "prepare", "shell", "command", "stop", "release")


def one_cycle(task: Task) -> dict[str, float]:
    """CPU and wall milliseconds of each stage of one start and close."""
    sandbox = BubblewrapSandbox()
    marks: list[tuple[float, float]] = [(_cpu_seconds(), time.perf_counter())]

    def mark() -> None:
        marks.append((_cpu_seconds(), time.perf_counter()))

    workspace = sandbox.new_layered_workspace(task.workspace_sources(), task.materialize)
    if workspace is None:
        raise SystemExit("this host cannot make layered workspaces (root, overlayfs, idmapped mounts)")
    mark()
    sandbox.workspace, sandbox._mount_path = workspace, task.mount_path
    sandbox._prepare_start(())
    mark()
    sandbox._start_shell()
    mark()
    result = sandbox.run("true")
    if result.exit_code != 0:
        raise SystemExit(f"`true` failed in the sandbox: {result.output!r}")
    mark()
    sandbox._stop()
    mark()
    sandbox._release_workspace()
    mark()
    out: dict[str, float] = {}
    for name, (before, after) in zip(STAGES, itertools.pairwise(marks), strict=True):
        out[f"{name}_cpu_ms"] = (after[0] - before[0]) * 1e3
        out[f"{name}_wall_ms"] = (after[1] - before[1]) * 1e3
    return out


def summarize(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = rows[0].keys()
    summary = {f"{key}_p50": statistics.median(row[key] for row in rows) for key in keys}
    summary["total_cpu_ms_p50"] = statistics.median(sum(row[f"{s}_cpu_ms"] for s in STAGES) for row in rows)
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=20, help="start+close cycles per block")
    parser.add_argument("--idle", type=int, default=128, help="live sandboxes beside the odd blocks")
    parser.add_argument("--blocks", type=int, default=2, help="pairs of blocks (none, then --idle)")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/start_cpu_stages.json"))
    args = parser.parse_args()
    if args.starts < 1 or args.idle < 0 or args.blocks < 1:
        raise SystemExit("--starts and --blocks must be >= 1 and --idle >= 0")
    task = next(iter(load_tasks("builtin")))
    rows: dict[int, list[dict[str, float]]] = {0: [], args.idle: []}
    mounts: dict[int, list[int]] = {0: [], args.idle: []}
    loads = [os.getloadavg()[0]]
    with cpu_meter() as meter:
        for _ in range(args.blocks):
            for idle in (0, args.idle):
                with idle_sandboxes(idle, task):
                    mounts[idle].append(len(Path("/proc/self/mountinfo").read_text().splitlines()))
                    for _ in range(args.starts):
                        rows[idle].append(one_cycle(task))
                loads.append(os.getloadavg()[0])
    result: dict[str, Any] = {"cpu_measured_by": meter, "starts_per_block": args.starts, "blocks": args.blocks}
    for idle, found in rows.items():
        summary = summarize(found)
        result[f"idle_{idle}"] = {"host_mounts": mounts[idle], **summary}
        line = ", ".join(f"{s} {summary[f'{s}_cpu_ms_p50']:.1f}" for s in STAGES)
        print(
            f"beside {idle:4d} sandboxes ({max(mounts[idle])} host mounts): CPU ms p50 {line}; "
            f"total {summary['total_cpu_ms_p50']:.1f}"
        )
    result["machine"] = {"cpus": os.cpu_count(), "load_average_over_run": loads}
    print(f"load average (1 min) over the run: {', '.join(f'{x:.1f}' for x in loads)}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
