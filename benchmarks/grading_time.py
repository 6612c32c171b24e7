"""Grading time per episode: the trusted-parent / untrusted-child repair graders against the
in-process unittest graders they replaced, interleaved in one run; and (``--episodes``) what a
rollout costs the environment.

    python benchmarks/grading_time.py [--rounds 3] [--baseline 0ce0c15] [--tasks repair-median,...]
                                      [--out benchmarks/results/grading_time.json]
    python benchmarks/grading_time.py --episodes [--rounds 3] [--turns 30] [--tasks ...] [--idle 0]
                                      [--out benchmarks/results/episode_cost.json]

``--episodes`` (issue 27): every built-in task through ``env.step`` as a rollout meets it: the
reference agent's solution after enough shell turns (``ls``, ``cat``, ``grep``) to make ``--turns``
turns, on S0T0O0C0W0 with warm spares. Per task: ``Task.grade`` wall time (the grader in a fresh
sandbox) and its CPU time; per episode: the environment's CPU time (this process and every
sandbox process, which it reaps: ``getrusage`` self + children, spares included) and wall time.
The paper's GRPO step (1,024 rollouts x 30 turns) is then 1,024 x the median episode's CPU
seconds, in core-seconds; the target is 200, and grading 150 ms p50 per task. ``--idle N`` keeps N
other started sandboxes on their own layered workspaces for the whole run (a rollout's other
environments): every sandbox start copies the host's mount table, so their mounts cost each start.

For every built-in task (default: the 20 repair tasks and workspace-executable-script, whose graders
changed), the reference solution is applied in a bubblewrap sandbox and ``Task.grade`` is timed,
alternating the current grader and the baseline one (the task folders of git revision
``--baseline``, before the issue-11 graders). Reports the median per task and the ratio of the
medians; the target (issue 11) is at most 1.5x. Other load on the machine shifts both sides alike
(interleaved), so the ratio is the figure to read.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def grade_seconds(task: Task, solved: Path) -> tuple[float, float, float]:
    """(seconds ``task.grade`` took, its CPU seconds, reward) on a copy of the solved workspace (CPU:
    see :func:`cpu_meter`)."""
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
        started, cpu = time.perf_counter(), _cpu_seconds()
        result = task.grade(sandbox, [])
        return time.perf_counter() - started, _cpu_seconds() - cpu, result.reward
    finally:
        sandbox.close()


GRPO_ROLLOUTS = 1024
GRADE_TARGET_MS = 150.0
GRPO_TARGET_CORE_S = 200.0
PADDING = ("ls -la", "cat README.md 2>/dev/null | head -20", "grep -rn def . | head -5", "ls -R | head -30")


CPUACCT = Path("/sys/fs/cgroup/cpuacct")
_meter: Path | None = None


@contextlib.contextmanager
def cpu_meter() -> Iterator[str]:
    """Count CPU time of this process and everything it starts: a cgroup-v1 ``cpuacct`` group of
    its own where the host has one and we may make it (sandboxes join only memory and pids groups,
    so their processes stay in it), else ``getrusage`` (self + reaped children: that misses sandbox
    processes reaped inside their namespaces, so the figure is then a floor). Yields which."""
    global _meter
    group = CPUACCT / f"harness-gym-bench-{os.getpid()}"
    try:
        group.mkdir()
        (group / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
        yield "getrusage (sandbox processes reaped in their namespaces are missed)"
        return
    _meter = group
    try:
        yield "cpuacct cgroup (this process and every process it started)"
    finally:
        _meter = None
        with contextlib.suppress(OSError):
            (CPUACCT / "cgroup.procs").write_text(str(os.getpid()))
        for _ in range(50):  # a sandbox process still exiting keeps the group busy a moment
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def _cpu_seconds() -> float:
    """CPU seconds so far: the meter's cgroup where :func:`cpu_meter` made one, else getrusage."""
    if _meter is not None:
        return int((_meter / "cpuacct.usage").read_text()) / 1e9
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class PaddedReference:
    """The reference agent after ``padding`` shell turns of looking around (a rollout's length)."""

    def __init__(self, padding: int) -> None:
        from harness_gym.agents import ReferenceAgent

        self.inner, self.padding, self.turn = ReferenceAgent(), padding, 0
        self.env: Any = None

    def reset(self, env: Any) -> Any:
        self.turn, self.env = 0, env
        return self.inner.reset(env) if hasattr(self.inner, "reset") else None

    def act(self, observation: Any) -> Any:
        self.turn += 1
        if self.turn <= self.padding:
            name = self.env.unwrapped.tool_interface.name_for("execute_bash")
            command = PADDING[self.turn % len(PADDING)]
            call = json.dumps({"name": name, "arguments": {"command": command}})
            return f"Looking around first.\n<tool_call>{call}</tool_call>"
        return self.inner.act(observation)


@contextlib.contextmanager
def idle_sandboxes(count: int, task: Task) -> Iterator[None]:
    """``count`` started sandboxes on ``task``'s layered workspace (or a copy), idle while the body runs."""
    from harness_gym.sandboxes import BubblewrapSandbox

    started: list[BubblewrapSandbox] = []
    try:
        for _ in range(count):
            sandbox = BubblewrapSandbox()
            started.append(sandbox)
            workspace = sandbox.new_layered_workspace(task.workspace_sources(), task.materialize)
            if workspace is None:
                workspace = sandbox.new_workspace()
                task.materialize(workspace)
            sandbox.start(workspace, task.mount_path)
        yield
    finally:
        for sandbox in started:
            sandbox.close()


def episode_cost(rounds: int, turns: int, task_ids: list[str] | None) -> dict[str, Any]:
    """Per built-in task: grading wall and CPU time through the environment; per episode: the
    environment's CPU and wall time; the GRPO step's core-seconds from the median episode."""
    from harness_gym import HarnessEnv
    from harness_gym.agents import run_episode

    grades: dict[str, list[tuple[float, float]]] = {}
    original = Task.grade

    def timed_grade(task: Task, *args: Any, **kwargs: Any) -> Any:
        cpu, wall = _cpu_seconds(), time.perf_counter()
        result = original(task, *args, **kwargs)
        grades.setdefault(task.id, []).append((time.perf_counter() - wall, _cpu_seconds() - cpu))
        return result

    Task.grade = timed_grade  # type: ignore[method-assign,assignment]
    env = HarnessEnv("S0T0O0C0W0", tasks="builtin", max_steps=turns + 10)
    ids = task_ids or [t.id for t in env.tasks]
    by_id = {t.id: t for t in env.tasks}
    episodes: list[dict[str, Any]] = []
    try:
        for round_index in range(rounds):
            for task_id in ids:
                padding = max(0, turns - len(by_id[task_id].solution) - 1)
                cpu, wall = _cpu_seconds(), time.perf_counter()
                result = run_episode(env, PaddedReference(padding), seed=round_index, task_id=task_id)
                episodes.append(
                    {
                        "task": task_id,
                        "turns": result.steps,
                        "reward": result.reward,
                        "wall_s": time.perf_counter() - wall,
                        "cpu_s": _cpu_seconds() - cpu,
                    }
                )
        closing = _cpu_seconds()
        env.close()  # the last sandboxes and the spare are reaped here: their CPU counts too
        tail_cpu = _cpu_seconds() - closing
    finally:
        Task.grade = original  # type: ignore[method-assign]
    per_task: dict[str, dict[str, Any]] = {
        task_id: {
            "grade_p50_ms": statistics.median(w for w, _ in samples) * 1000,
            "grade_cpu_p50_ms": statistics.median(c for _, c in samples) * 1000,
            "rewards": [e["reward"] for e in episodes if e["task"] == task_id],
        }
        for task_id, samples in grades.items()
    }
    cpu_each = (sum(e["cpu_s"] for e in episodes) + tail_cpu) / len(episodes)
    median_cpu = statistics.median(e["cpu_s"] for e in episodes)
    grade_cpu = statistics.median(c for samples in grades.values() for _, c in samples)
    return {
        "turns": turns,
        "rounds": rounds,
        "per_task": per_task,
        "episodes": episodes,
        "worst_task_grade_p50_ms": max(r["grade_p50_ms"] for r in per_task.values()),
        "median_task_grade_p50_ms": statistics.median(r["grade_p50_ms"] for r in per_task.values()),
        "episode_cpu_s_median": median_cpu,
        "episode_cpu_s_mean_with_close": cpu_each,
        "episode_wall_s_median": statistics.median(e["wall_s"] for e in episodes),
        "grade_cpu_s_median": grade_cpu,
        "grpo_step_core_s": GRPO_ROLLOUTS * cpu_each,
        "grpo_step_grading_core_s": GRPO_ROLLOUTS * grade_cpu,
        "how": (
            f"{GRPO_ROLLOUTS} rollouts x the mean environment CPU seconds of one {turns}-turn episode "
            "(the CPU meter of cpu_measured_by over every episode and the final close, divided by the episodes)"
        ),
        "failures": sum(e["reward"] != 1.0 for e in episodes),
    }


def main_episodes(args: argparse.Namespace) -> None:
    out = (
        args.out
        if args.out != Path("benchmarks/results/grading_time.json")
        else Path("benchmarks/results/episode_cost.json")
    )
    if args.idle < 0:
        raise SystemExit(f"--idle must be 0 or more, got {args.idle}")
    first = next(iter(load_tasks("builtin")))
    with idle_sandboxes(args.idle, first), cpu_meter() as meter:
        mounts = len(Path("/proc/self/mountinfo").read_text().splitlines())
        result = episode_cost(args.rounds, args.turns, args.tasks.split(",") if args.tasks else None)
    result["cpu_measured_by"] = meter
    result["idle_sandboxes"], result["host_mounts_at_start"] = args.idle, mounts
    print(f"{args.idle} idle sandboxes; {mounts} mounts on the host (each sandbox start copies them all)")
    print(f"CPU measured by: {meter}")
    for task_id, row in result["per_task"].items():
        print(f"{task_id:<34} grade p50 {row['grade_p50_ms']:7.1f} ms (CPU {row['grade_cpu_p50_ms']:6.1f} ms)")
    print(
        f"grading p50 per task: median {result['median_task_grade_p50_ms']:.1f} ms, worst "
        f"{result['worst_task_grade_p50_ms']:.1f} ms (target <= {GRADE_TARGET_MS:g}): "
        f"{'met' if result['worst_task_grade_p50_ms'] <= GRADE_TARGET_MS else 'NOT met'}"
    )
    print(
        f"one {args.turns}-turn episode: {result['episode_cpu_s_mean_with_close']:.3f} core-s "
        f"(median {result['episode_cpu_s_median']:.3f}), wall {result['episode_wall_s_median']:.3f} s; "
        f"grading {result['grade_cpu_s_median']:.3f} core-s"
    )
    print(
        f"GRPO step ({GRPO_ROLLOUTS} x {args.turns} turns): {result['grpo_step_core_s']:.0f} core-s, of which "
        f"grading {result['grpo_step_grading_core_s']:.0f} (target <= {GRPO_TARGET_CORE_S:g}): "
        f"{'met' if result['grpo_step_core_s'] <= GRPO_TARGET_CORE_S else 'NOT met'}; failures {result['failures']}"
    )
    result["machine"] = {"cpus": os.cpu_count(), "load_average": os.getloadavg(), "python": platform.python_version()}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default="0ce0c15", help="git revision of the graders to compare with")
    parser.add_argument(
        "--tasks", help="comma-separated task ids (default: repair tasks + workspace-executable-script)"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/grading_time.json"))
    parser.add_argument("--episodes", action="store_true", help="grading and environment CPU per rollout (issue 27)")
    parser.add_argument("--turns", type=int, default=30, help="--episodes: turns per episode")
    parser.add_argument(
        "--idle", type=int, default=0, help="--episodes: other started sandboxes kept idle meanwhile (a rollout's)"
    )
    args = parser.parse_args()
    if args.episodes:
        main_episodes(args)
        return
    current = {t.id: t for t in load_tasks("builtin")}
    chosen = (
        args.tasks.split(",")
        if args.tasks
        else [i for i, t in current.items() if t.signed_verdict or t.metadata.get("family") == "repository-repair"]
    )
    rows = {}
    with tempfile.TemporaryDirectory(prefix="grading-time-") as scratch, cpu_meter() as meter:
        old = baseline_tasks(args.baseline, Path(scratch) / "baseline")
        for task_id in chosen:
            solved = Path(scratch) / "solved" / task_id
            solve(current[task_id], solved)
            samples: dict[str, list[float]] = {"current": [], "baseline": [], "current_cpu": [], "baseline_cpu": []}
            for _ in range(args.rounds):
                for name, task in (("current", current[task_id]), ("baseline", old[task_id])):
                    seconds, cpu, reward = grade_seconds(task, solved)
                    if reward != 1.0:
                        raise SystemExit(f"{task_id}: the {name} grader gave {reward} to the reference solution")
                    samples[name].append(seconds)
                    samples[f"{name}_cpu"].append(cpu)
            rows[task_id] = {k: statistics.median(v) * 1000 for k, v in samples.items()}
            print(
                f"{task_id:<32} current {rows[task_id]['current']:7.1f} ms (CPU {rows[task_id]['current_cpu']:6.1f})"
                f"   baseline {rows[task_id]['baseline']:7.1f} ms (CPU {rows[task_id]['baseline_cpu']:6.1f})"
            )
    current_ms = statistics.median(r["current"] for r in rows.values())
    baseline_ms = statistics.median(r["baseline"] for r in rows.values())
    ratio = current_ms / baseline_ms
    current_cpu = statistics.median(r["current_cpu"] for r in rows.values())
    baseline_cpu = statistics.median(r["baseline_cpu"] for r in rows.values())
    print(f"median grading time: current {current_ms:.1f} ms, baseline {baseline_ms:.1f} ms, ratio {ratio:.2f}")
    print(f"median grading CPU ({meter}): current {current_cpu:.1f} ms, baseline {baseline_cpu:.1f} ms")
    print(f"target: ratio <= {TARGET_RATIO}: {'met' if ratio <= TARGET_RATIO else 'NOT met'}")
    result = {
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
        "rounds": args.rounds,
        "baseline": args.baseline,
        "per_task_ms": rows,
        "median_current_ms": current_ms,
        "median_baseline_ms": baseline_ms,
        "median_current_cpu_ms": current_cpu,
        "median_baseline_cpu_ms": baseline_cpu,
        "cpu_measured_by": meter,
        "load_average": os.getloadavg(),
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
