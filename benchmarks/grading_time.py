"""Grading time per episode: the trusted-parent / untrusted-child repair graders against the
in-process unittest graders they replaced, interleaved in one run.

    python benchmarks/grading_time.py [--rounds 3] [--baseline 0ce0c15] [--tasks repair-median,...]
                                      [--out benchmarks/results/grading_time.json]

For every built-in task (default: the 20 repair tasks and workspace-executable-script, whose graders
changed), the reference solution is applied in a bubblewrap sandbox and ``Task.grade`` is timed,
alternating the current grader and the baseline one (the task folders of git revision
``--baseline``, before the issue-11 graders). Reports the median per task and the ratio of the
medians; the target (issue 11) is at most 1.5x. Other load on the machine shifts both sides alike
(interleaved), so the ratio is the figure to read.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from harness_gym.sandboxes.base import create_sandbox
from harness_gym.tasks import load_tasks
from harness_gym.tasks.base import Task
from harness_gym.tasks.builtin import load_task_dir
from harness_gym.tasks.generator import correct_project

TARGET_RATIO = 1.5
ROOT = Path(__file__).resolve().parent.parent


def baseline_tasks(revision: str, folder: Path) -> dict[str, Task]:
    """The built-in tasks as they were at ``revision`` (extracted from git into ``folder``)."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", revision, "harness_gym/tasks/builtin"], capture_output=True, check=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    root = folder / "harness_gym" / "tasks" / "builtin"
    return {d.name: load_task_dir(d) for d in sorted(root.iterdir()) if d.is_dir() and not d.name.startswith("_")}


def solve(task: Task, destination: Path) -> None:
    """The reference solution's file edits applied on the host (our own data)."""
    correct_project(task, destination)
    for step in task.solution:
        arguments = step["arguments"]
        if step["tool"] == "file_editor" and arguments.get("command") == "create":
            path = destination / arguments["path"]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(arguments["file_text"])
            path.chmod(0o755)


def grade_seconds(task: Task, solved: Path) -> tuple[float, float]:
    """(seconds ``task.grade`` took, reward) on a copy of the solved workspace."""
    sandbox = create_sandbox("bubblewrap")
    try:
        workspace = sandbox.new_workspace()
        task.materialize(workspace)
        for path in solved.rglob("*"):
            if path.is_file():
                target = workspace / path.relative_to(solved)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
        sandbox.start(workspace, task.mount_path)
        started = time.perf_counter()
        result = task.grade(sandbox, [])
        return time.perf_counter() - started, result.reward
    finally:
        sandbox.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="0ce0c15", help="git revision of the graders to compare with")
    parser.add_argument(
        "--tasks", help="comma-separated task ids (default: repair tasks + workspace-executable-script)"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/grading_time.json"))
    args = parser.parse_args()
    current = {t.id: t for t in load_tasks("builtin")}
    chosen = (
        args.tasks.split(",")
        if args.tasks
        else [i for i, t in current.items() if t.signed_verdict or t.metadata.get("family") == "repository-repair"]
    )
    rows = {}
    with tempfile.TemporaryDirectory(prefix="grading-time-") as scratch:
        old = baseline_tasks(args.baseline, Path(scratch) / "baseline")
        for task_id in chosen:
            solved = Path(scratch) / "solved" / task_id
            solve(current[task_id], solved)
            samples: dict[str, list[float]] = {"current": [], "baseline": []}
            for _ in range(args.rounds):
                for name, task in (("current", current[task_id]), ("baseline", old[task_id])):
                    seconds, reward = grade_seconds(task, solved)
                    if reward != 1.0:
                        raise SystemExit(f"{task_id}: the {name} grader gave {reward} to the reference solution")
                    samples[name].append(seconds)
            rows[task_id] = {k: statistics.median(v) * 1000 for k, v in samples.items()}
            print(
                f"{task_id:<32} current {rows[task_id]['current']:7.1f} ms   baseline {rows[task_id]['baseline']:7.1f} ms"
            )
    current_ms = statistics.median(r["current"] for r in rows.values())
    baseline_ms = statistics.median(r["baseline"] for r in rows.values())
    ratio = current_ms / baseline_ms
    print(f"median grading time: current {current_ms:.1f} ms, baseline {baseline_ms:.1f} ms, ratio {ratio:.2f}")
    print(f"target: ratio <= {TARGET_RATIO}: {'met' if ratio <= TARGET_RATIO else 'NOT met'}")
    result = {
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
        "rounds": args.rounds,
        "baseline": args.baseline,
        "per_task_ms": rows,
        "median_current_ms": current_ms,
        "median_baseline_ms": baseline_ms,
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
