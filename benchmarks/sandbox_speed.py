"""Sandbox speed and footprint, side by side in one run.

    python benchmarks/sandbox_speed.py [--rounds 300] [--concurrent 64] [--no-docker]
                                       [--out benchmarks/results/sandbox_speed.json]

Measures: the round trip of `true` and of `python3 -c pass` in the local (bubblewrap) sandbox, as a
bare `subprocess.run` on the host, through the Docker sandbox's persistent `docker exec` shell and
as one-shot `docker exec` calls; environment reset latency with a 1 MB workspace; memory (PSS) per
idle sandbox; and N concurrent sandboxes each running commands, on however many cores there are.
Docker figures need a Docker engine: the one at DOCKER_HOST, or (as root) a private dockerd this
script starts and stops; `--no-docker` skips them.

Targets (issue: sandboxes): median round trip of `true` under 5 ms, reset under 50 ms, idle memory
under 10 MB per sandbox, no failures at 64 concurrent.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from harness_gym import HarnessEnv, Task
from harness_gym.sandboxes import BubblewrapSandbox, CommandResult, DockerSandbox, SandboxError, isolation
from harness_gym.sandboxes.docker_support import local_docker

TARGETS = {"true_round_trip_ms": 5.0, "reset_ms": 50.0, "idle_memory_mb": 10.0}
PYTHON = "/usr/bin/python3"


def timed(function: Callable[[], object], rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        function()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "median_ms": statistics.median(samples),
        "p90_ms": statistics.quantiles(samples, n=10)[-1],
        "mean_ms": statistics.fmean(samples),
        "n": len(samples),
    }


def checked(result: CommandResult, expected_output: str = "") -> None:
    if result.exit_code != 0 or result.output != expected_output:
        raise RuntimeError(f"unexpected result: {result}")


def round_trips(rounds: int, docker: tuple[str, str] | None) -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, float]] = {}
    rows["host subprocess.run: true"] = summary(timed(lambda: subprocess.run(["true"], check=True), rounds))
    rows["host subprocess.run: python3 -c pass"] = summary(
        timed(lambda: subprocess.run([PYTHON, "-c", "pass"], check=True), rounds // 3)
    )
    with BubblewrapSandbox() as box:
        box.start(box.new_workspace(), "/workspace")
        rows["bubblewrap sandbox: true"] = summary(timed(lambda: checked(box.run("true")), rounds))
        rows["bubblewrap sandbox: python3 -c pass"] = summary(
            timed(lambda: checked(box.run("python3 -c pass")), rounds // 3)
        )
    if docker is not None:
        host, image = docker
        with DockerSandbox(image, docker_host=host) as box:
            box.start(box.new_workspace(), "/workspace")
            rows["docker sandbox (persistent exec): true"] = summary(timed(lambda: checked(box.run("true")), rounds))
            rows["docker sandbox (persistent exec): python3 -c pass"] = summary(
                timed(lambda: checked(box.run("python3 -c pass")), rounds // 3)
            )
            env = dict(os.environ, DOCKER_HOST=host)
            container = box.container.id
            rows["docker exec (one-shot CLI): true"] = summary(
                timed(
                    lambda: subprocess.run(["docker", "exec", container, "true"], check=True, env=env),
                    max(rounds // 10, 10),
                )
            )
    return rows


def megabyte_task() -> Task:
    """A task whose workspace holds 1 MB in 64 files."""
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="harness-gym-bench-task-"))
    for i in range(64):
        (folder / "data" / f"part{i // 16}").mkdir(parents=True, exist_ok=True)
        (folder / "data" / f"part{i // 16}" / f"file{i}.txt").write_bytes(os.urandom(8192).hex().encode())
    grader = folder.parent / (folder.name + "-grader")
    grader.mkdir()
    (grader / "grade.py").write_text("print(1.0)\n")
    return Task(id="one-megabyte", instruction="Nothing to do.", workspace_dir=folder, grader_files=(grader,))


def reset_latency(rounds: int, docker: tuple[str, str] | None) -> dict[str, dict[str, float]]:
    task = megabyte_task()
    rows = {}
    env = HarnessEnv(tasks=[task])
    env.reset(seed=0)
    rows["bubblewrap: env.reset, 1 MB workspace"] = summary(timed(lambda: env.reset(seed=1), rounds))
    env.close()
    if docker is not None:
        host, image = docker
        env = HarnessEnv(tasks=[task], sandbox="docker", sandbox_options={"image": image, "docker_host": host})
        env.reset(seed=0)
        rows["docker: env.reset, 1 MB workspace"] = summary(timed(lambda: env.reset(seed=1), max(rounds // 5, 5)))
        env.close()
    return rows


def tree_memory_kb(pid: int, field: str) -> int:
    """A memory figure (``Pss:`` or ``Rss:``) summed over a process and all its descendants."""
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                if line.startswith(field):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{current}/task").iterdir():
                stack += [int(p) for p in (task / "children").read_text().split()]
    return total


def shell_pid_on_host(box: BubblewrapSandbox) -> int:
    """The host pid at the root of a started sandbox's processes (its bwrap), whose memory we sum."""
    if box._proc is None:
        raise RuntimeError("the sandbox has no running shell to measure")
    return box._proc.pid


def idle_memory(count: int) -> dict[str, float]:
    boxes = []
    try:
        for _ in range(count):
            box = BubblewrapSandbox()
            box.start(box.new_workspace(), "/workspace")
            boxes.append(box)
        time.sleep(0.5)
        pss = [tree_memory_kb(shell_pid_on_host(box), "Pss:") / 1024 for box in boxes]
        rss = [tree_memory_kb(shell_pid_on_host(box), "Rss:") / 1024 for box in boxes]
    finally:
        for box in boxes:
            box.close()
    return {
        "sandboxes": count,
        "mean_pss_mb": statistics.fmean(pss),
        "max_pss_mb": max(pss),
        "mean_rss_mb": statistics.fmean(rss),
    }


def concurrent(count: int, commands: int) -> dict[str, float]:
    def episode(index: int) -> int:
        failures = 0
        with BubblewrapSandbox(command_timeout_s=120) as box:
            box.start(box.new_workspace(), "/workspace")
            for step in range(commands):
                command = f"echo {index}-{step} > f.txt && cat f.txt" if step % 5 else "python3 -c 'print(6*7)'"
                expected = "42\n" if step % 5 == 0 else f"{index}-{step}\n"
                result = box.run(command)
                failures += result.exit_code != 0 or result.output != expected
        return failures

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=count) as pool:
        failures = list(pool.map(lambda i: _guard(episode, i), range(count)))
    elapsed = time.perf_counter() - started
    return {
        "sandboxes": count,
        "commands_each": commands,
        "failures": sum(failures),
        "wall_s": elapsed,
        "commands_per_s": count * commands / elapsed,
        "cores": os.cpu_count() or 0,
    }


def _guard(function: Callable[[int], int], index: int) -> int:
    try:
        return function(index)
    except Exception as exc:  # a crash counts as one failure per command it prevented
        print(f"  sandbox {index} failed: {exc}")
        return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--concurrent", type=int, default=64)
    parser.add_argument("--no-docker", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/sandbox_speed.json"))
    args = parser.parse_args()

    docker_context: contextlib.AbstractContextManager[tuple[str, str] | None] = contextlib.nullcontext(None)
    if not args.no_docker:
        docker_context = local_docker("harness-gym-bench:latest")
    result: dict[str, Any] = {
        "benchmark": "sandbox_speed",
        "targets": TARGETS,
        "machine": {"platform": platform.platform(), "cores": os.cpu_count()},
        "isolation": isolation.capabilities().__dict__,
    }
    try:
        with docker_context as docker:
            result["round_trip"] = round_trips(args.rounds, docker)
            result["reset"] = reset_latency(max(args.rounds // 5, 20), docker)
    except SandboxError as exc:
        print(f"Docker unavailable ({exc}); rerun with --no-docker to skip it")
        raise
    result["idle_memory"] = idle_memory(16)
    result["concurrent"] = concurrent(args.concurrent, 20)

    print(f"{'round trip':<52}{'median ms':>10}{'p90 ms':>9}")
    for name, row in {**result["round_trip"], **result["reset"]}.items():
        print(f"{name:<52}{row['median_ms']:>10.2f}{row['p90_ms']:>9.2f}")
    memory, load = result["idle_memory"], result["concurrent"]
    print(
        f"\nidle memory per bubblewrap sandbox (PSS, {memory['sandboxes']} sandboxes): "
        f"mean {memory['mean_pss_mb']:.2f} MB, max {memory['max_pss_mb']:.2f} MB "
        f"(RSS, counting shared pages in full: {memory['mean_rss_mb']:.2f} MB)"
    )
    print(
        f"{load['sandboxes']} concurrent sandboxes x {load['commands_each']} commands on {load['cores']} cores: "
        f"{load['failures']} failures, {load['wall_s']:.1f} s, {load['commands_per_s']:.0f} commands/s"
    )
    checks = {
        "true_round_trip_ms": result["round_trip"]["bubblewrap sandbox: true"]["median_ms"]
        < TARGETS["true_round_trip_ms"],
        "reset_ms": result["reset"]["bubblewrap: env.reset, 1 MB workspace"]["median_ms"] < TARGETS["reset_ms"],
        "idle_memory_mb": memory["mean_pss_mb"] < TARGETS["idle_memory_mb"],
        "no_failures_concurrent": load["failures"] == 0,
    }
    result["meets_targets"] = checks
    print("targets:", ", ".join(f"{k} {'ok' if v else 'MISSED'}" for k, v in checks.items()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
