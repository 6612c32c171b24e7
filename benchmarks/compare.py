"""harness-gym's environment against the floor and its peers, side by side in one interleaved run.

    python benchmarks/compare.py [--quick] [--docker] [--steps-only] [--out benchmarks/results/compare.json]

Measured (medians and p90 in ms; every round calls each contender once, in an order shuffled each
round, so a machine that other jobs load slows all of them alike and the ratios stay meaningful):

- ``true`` round trips: the floor (a persistent bash inside bubblewrap reading a pipe), harness-gym's
  sandbox ``run("true")``, ``env.step`` with a bash call under S0T0O0C0W0 and S2T2O2C2W2, a bare host
  ``subprocess.run``, one ``bwrap`` per command, mini-swe-agent's ``LocalEnvironment`` and SWE-ReX's
  local runtime (``pip install 'harness-gym[compare]'``; skipped with a notice when absent), Docker
  exec (``--docker``: a private dockerd) — idle, then again with a background disk writer;
- a file-editor view against ``cat -n`` through bash; C2 steps against C0 steps; the engine's own
  time per step (``env.last_step_timing``), S0T0O0C0W0 and S2T2O2C2W2 interleaved with each other
  only (the target's figure) and as measured among the round-trip peers; env.step against the floor
  (issue 27's targets: p50 2.5x S0T0O0C0W0, 3.5x S2T2O2C2W2; p90 3.5x, 5x), each sample env.step
  alone (the reset that ends an episode is not in it; ``--steps-only`` runs just these);
- reset (workspace + shell) against workspace size, copy-on-write and copied: 1 MB, 100 MB, 300 MB
  (not in ``--quick``) and 10k small files;
- episodes per second of the reference agent at 1, 2 and 8 worker processes;
- memory per idle environment (sandbox processes' PSS plus the workspace's tmpfs) at 1, 16 and 64
  environments on a 100 MB task.

Prints a table, checks the issue's targets (ratios) and writes JSON and a PNG next to each other.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import multiprocessing
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from harness_gym import HarnessEnv
from harness_gym.sandboxes import BubblewrapSandbox, isolation, layers
from harness_gym.sandboxes.shell import ShellSandbox
from harness_gym.tasks.base import Task

Call = Callable[[], Any]
EPISODE_STEPS = 30  # episodes end, as real ones do (the context grows with every step)
BWRAP = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-all", "--die-with-parent"]
THINK_S = 0.3  # after an (untimed) reset: a model's first reply takes longer than the spare's start
TARGETS = {
    "round_trip_p50_vs_floor": 2.0,
    "round_trip_p90_vs_floor": 3.0,
    # issue 27: env.step (the engine's whole path, not sandbox.run) against the floor
    "step_S0T0O0C0W0_p50_vs_floor": 2.5,
    "step_S0T0O0C0W0_p90_vs_floor": 3.5,
    "step_S2T2O2C2W2_p50_vs_floor": 3.5,
    "step_S2T2O2C2W2_p90_vs_floor": 5.0,
    "view_vs_cat_n": 2.0,
    "c2_vs_c0_step": 1.5,
    "reset_p50_ms": 15.0,
    "engine_overhead_p50_ms": 0.1,
    "memory_64_envs_100mb_task_mb": 1024.0,
}


# ----------------------------------------------------------------------------- helpers


def stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[min(int(len(ordered) * 0.9), len(ordered) - 1)] * 1000,
        "n": len(ordered),
    }


def interleave(contenders: dict[str, Call], rounds: int) -> dict[str, dict[str, float]]:
    """Each round calls every contender once, in an order shuffled afresh (seeded) each round, so
    each runs about equally often right after each other one. A contender that leaves work behind
    (one bwrap per command: the kernel tears its namespaces down after it returns; Docker) slows
    whichever runs next: in a fixed order that was always the same one (env.step S0T0O0C0W0 showed
    twice S2T2O2C2W2's engine overhead only because it came first after those; a rotated order
    keeps the same successor). A contender with ``self_timed`` set times itself and returns its
    seconds (a :class:`Stepper`: env.step only, not the reset between episodes). Returns
    per-contender statistics."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    order = list(contenders.items())
    shuffler = random.Random(0)
    for call in contenders.values():  # warm-up
        call()
    for _ in range(rounds):
        shuffler.shuffle(order)
        for name, call in order:
            started = time.perf_counter()
            value = call()
            elapsed = time.perf_counter() - started
            samples[name].append(float(value) if getattr(call, "self_timed", False) else elapsed)
    return {name: stats(values) for name, values in samples.items()}


class FloorShell:
    """The floor: a persistent bash in bubblewrap over a pipe, end marked by an echoed line."""

    def __init__(self, own_session: bool = False, bwrap: Sequence[str] = BWRAP) -> None:
        # bwrap: its command line up to the shell (a reset's floor shows only the system and a workspace)
        # own_session: like every sandbox (bwrap --new-session, a process group to kill). Where the
        # kernel groups scheduling by session (sched_autogroup), a loaded machine then wakes it later
        # than a shell in the caller's own session
        extra = ["--new-session"] if own_session else []
        self.proc = subprocess.Popen(
            [*bwrap, *extra, "bash", "--noprofile", "--norc"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
            start_new_session=own_session,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin, self.fd = self.proc.stdin, self.proc.stdout.fileno()

    def run(self, command: str) -> bytes:
        self.stdin.write(f"{command}\necho __END__\n".encode())
        data = b""
        while not data.endswith(b"__END__\n"):
            chunk = os.read(self.fd, 65536)
            if not chunk:
                raise RuntimeError(f"the floor shell exited (status {self.proc.wait()})")
            data += chunk
        return data

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


def step_action(env: HarnessEnv, command: str) -> str:
    name = env.tool_interface.name_for("execute_bash")
    return f'Plan:\n1. run\n<tool_call>{{"name": "{name}", "arguments": {{"command": "{command}"}}}}</tool_call>'


class Stepper:
    """env.step with one bash call, resetting whenever the episode ends; records the engine's share.

    Self-timed: a sample is ``env.step`` alone (observation included), never the reset that ends
    an episode (resets have their own rows). After a reset it waits ``think_s``, as a rollout waits
    for the model's first reply: the warm spare, the finished sandbox's close and the next tool
    server's interpreter start, all in the background, finish then and not on top of the steps
    (30 `true` steps take ~10 ms, far less than one sandbox start)."""

    self_timed = True

    def __init__(self, config: str, task: Task, think_s: float = THINK_S) -> None:
        self.env = HarnessEnv(config, tasks=[task], max_steps=10_000)
        self.think_s = think_s
        self._new_episode(seed=0)
        self.action = step_action(self.env, "true")
        self.overheads: list[float] = []

    def _new_episode(self, seed: int) -> None:
        self.env.reset(seed=seed)
        time.sleep(self.think_s)

    def __call__(self) -> float:
        started = time.perf_counter()
        _, _, terminated, truncated, _ = self.env.step(self.action)
        elapsed = time.perf_counter() - started
        self.overheads.append(self.env.last_step_timing["overhead_s"])
        if terminated or truncated or self.env.steps >= EPISODE_STEPS:
            self._new_episode(seed=1)
        return elapsed


def optional_peers() -> tuple[dict[str, Call], list[Callable[[], None]], list[str]]:
    """mini-swe-agent and SWE-ReX when installed (the [compare] extra)."""
    calls: dict[str, Call] = {}
    closers: list[Callable[[], None]] = []
    notices: list[str] = []
    try:
        from minisweagent.environments.local import LocalEnvironment

        local: Any = LocalEnvironment()  # 1.x and 2.x differ in execute's argument; mini() tries both

        def mini() -> Any:
            try:
                return local.execute({"command": "true"})  # 2.x takes an action mapping
            except AttributeError:
                return local.execute("true")  # 1.x takes the command

        mini()
        calls["mini-swe-agent LocalEnvironment"] = mini
    except Exception as exc:  # absent or incompatible: a notice, not a failure
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        notices.append(f"mini-swe-agent skipped ({type(exc).__name__}: {first}); pip install 'harness-gym[compare]'")
    try:
        from swerex.runtime.abstract import BashAction, CreateBashSessionRequest
        from swerex.runtime.local import LocalRuntime

        loop = asyncio.new_event_loop()
        runtime = LocalRuntime()
        home = os.environ.get("HOME")
        os.environ["HOME"] = tempfile.mkdtemp(prefix="harness-gym-swerex-home-")  # no user rc files
        try:
            loop.run_until_complete(runtime.create_session(CreateBashSessionRequest()))
        finally:
            if home is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = home

        def swerex() -> Any:
            return loop.run_until_complete(runtime.run_in_session(BashAction(command="true")))

        swerex()
        calls["SWE-ReX local runtime"] = swerex

        def close_swerex() -> None:
            loop.run_until_complete(runtime.close())
            loop.close()

        closers.append(close_swerex)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        notices.append(f"SWE-ReX skipped ({type(exc).__name__}: {first}); pip install 'harness-gym[compare]'")
    return calls, closers, notices


def make_task(folder: Path, task_id: str = "compare") -> Task:
    grader = folder.parent / f"{folder.name}-grader"
    grader.mkdir(exist_ok=True)
    (grader / "grade.py").write_text("print(1.0)\n")
    return Task(id=task_id, instruction="Nothing to do.", workspace_dir=folder, grader_files=(grader,))


def make_workspace(folder: Path, total_bytes: int, files: int) -> Path:
    folder.mkdir(parents=True)
    size = max(total_bytes // files, 1)
    block = os.urandom(min(size, 1 << 20))
    for index in range(files):
        sub = folder / f"d{index // 500}"
        sub.mkdir(exist_ok=True)
        with open(sub / f"f{index}.txt", "wb") as handle:
            left = size
            while left > 0:
                handle.write(block[:left])
                left -= len(block)
    (folder / "a.txt").write_text("alpha\n" * 50)
    return folder


# ----------------------------------------------------------------------------- parts


def round_trips(
    rounds: int, task: Task, docker: bool
) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, dict[str, float]], list[str]]:
    floor, floor_session = FloorShell(), FloorShell(own_session=True)
    box = BubblewrapSandbox()
    box.start(box.new_workspace(), "/workspace")
    base, full = Stepper("S0T0O0C0W0", task), Stepper("S2T2O2C2W2", task)
    contenders: dict[str, Call] = {
        "floor: persistent bash in bwrap, pipe": lambda: floor.run("true"),
        "floor in its own session (as sandboxes are)": lambda: floor_session.run("true"),
        "harness-gym sandbox run('true')": lambda: box.run("true"),
        "env.step S0T0O0C0W0 (bash true)": base,
        "env.step S2T2O2C2W2 (bash true)": full,
        "bare host subprocess.run": lambda: subprocess.run(["true"]),
        "one bwrap per command": lambda: subprocess.run([*BWRAP, "true"]),
    }
    peers, closers, notices = optional_peers()
    contenders.update(peers)
    engine: Any = None
    if docker:
        engine = contextlib.ExitStack()
        try:
            from harness_gym.sandboxes import DockerSandbox
            from harness_gym.sandboxes.docker_support import local_docker

            host, image = engine.enter_context(local_docker("harness-gym-compare:latest"))
            container = DockerSandbox(image, docker_host=host)
            engine.callback(container.close)
            container.start(container.new_workspace(), "/workspace")
            contenders["docker exec (harness-gym DockerSandbox)"] = lambda: container.run("true")
        except Exception as exc:
            notices.append(f"Docker skipped ({type(exc).__name__}: {exc})")
    try:
        idle = interleave(contenders, rounds)
        engine_share = {
            "S0T0O0C0W0": stats(base.overheads),
            "S2T2O2C2W2": stats(full.overheads),
        }
        base.overheads.clear()
        full.overheads.clear()
        with disk_writer():
            busy = interleave(contenders, rounds)
    finally:
        floor.close()
        floor_session.close()
        box.close()
        base.env.close()
        full.env.close()
        for close in closers:
            with contextlib.suppress(Exception):
                close()
        if engine is not None:
            engine.close()
    return {"idle": idle, "busy_disk": busy}, engine_share, notices


def engine_overhead(rounds: int, task: Task) -> dict[str, dict[str, float]]:
    """The engine's own time per step (``env.last_step_timing["overhead_s"]``), S0T0O0C0W0 and
    S2T2O2C2W2 interleaved with each other only: among the round-trip peers, the kernel's teardown
    of one bwrap per command (and Docker's, SWE-ReX's work) runs on the second core during whichever
    step comes next and doubles this tens-of-microseconds figure; that is the peers' cost, kept as
    ``engine_overhead_among_peers``."""
    steppers = {config: Stepper(config, task) for config in ("S0T0O0C0W0", "S2T2O2C2W2")}
    try:
        interleave(dict(steppers), rounds)
        return {config: stats(stepper.overheads[1:]) for config, stepper in steppers.items()}  # less the warm-up
    finally:
        for stepper in steppers.values():
            stepper.env.close()


@contextlib.contextmanager
def disk_writer() -> Iterator[None]:
    """A background process writing and syncing to disk, as a noisy neighbour does."""
    folder = tempfile.mkdtemp(prefix="harness-gym-disk-", dir="/var/tmp")
    code = (
        "import os, sys\nblock = os.urandom(1 << 20)\n"
        "while True:\n    with open(sys.argv[1], 'wb') as f:\n"
        "        for _ in range(8):\n            f.write(block)\n        f.flush(); os.fsync(f.fileno())\n"
    )
    writer = subprocess.Popen([sys.executable, "-c", code, f"{folder}/load.bin"])
    time.sleep(0.3)
    try:
        yield
    finally:
        writer.kill()
        writer.wait()
        shutil.rmtree(folder, ignore_errors=True)


def tools_and_context(rounds: int, task: Task) -> dict[str, dict[str, float]]:
    box = BubblewrapSandbox()
    workspace = box.new_workspace()
    task.materialize(workspace)
    box.start(workspace, "/workspace")
    view = {"command": "view", "path": "a.txt", "root": "/workspace"}
    c0, c2 = Stepper("S0T0O0C0W0", task), Stepper("S0T0O0C2W0", task)
    try:
        return interleave(
            {
                "file_editor view (tool server)": lambda: box.run_tool("file_editor.py", view),
                "cat -n through bash": lambda: box.run("cat -n a.txt"),
                "env.step C0 (S0T0O0C0W0)": c0,
                "env.step C2 (S0T0O0C2W0)": c2,
            },
            rounds,
        )
    finally:
        box.close()
        c0.env.close()
        c2.env.close()


def resets(rounds: int, sizes: dict[str, tuple[int, int]], root: Path) -> dict[str, dict[str, float]]:
    """Workspace resets (release the previous one, make the next), copy-on-write and copied, interleaved
    across sizes; and full resets (workspace plus a new shell) at the smallest and largest size."""
    sources = {
        label: make_workspace(root / label.replace(" ", "_"), total, files) for label, (total, files) in sizes.items()
    }
    uid = isolation.uid_pool()[-1] if isolation.is_root() else None
    contenders: dict[str, Call] = {}
    boxes: list[BubblewrapSandbox] = []
    held: dict[str, Path | None] = {}

    def fill_from(source: Path) -> Callable[[Path], None]:
        def fill(destination: Path) -> None:
            shutil.copytree(source, destination, dirs_exist_ok=True, symlinks=True)

        return fill

    for label, source in sources.items():
        fill = fill_from(source)
        if layers.available():
            layer = layers.shared_layer([source], fill)

            def layered(key: str = f"cow {label}", layer: Path = layer) -> None:
                previous = held.get(key)
                if previous is not None:
                    layers.release(previous)
                workspace = held[key] = layers.prepare(2048)
                layers.mount(workspace, layer, uid)

            contenders[f"workspace reset, copy-on-write, {label}"] = layered

        def copied(key: str = f"copy {label}", fill: Callable[[Path], None] = fill) -> None:
            previous = held.get(key)
            if previous is not None:
                isolation.release_workspace(previous)
            workspace, _ = isolation.new_workspace(2048)
            held[key] = workspace
            fill(workspace)
            if uid is not None:
                isolation.chown_tree(workspace, uid, uid)

        contenders[f"workspace reset, copied, {label}"] = copied
    for label in (next(iter(sources)), list(sources)[-1]):
        source, fill = sources[label], fill_from(sources[label])
        box = BubblewrapSandbox(workspace_size_mb=2048)
        boxes.append(box)

        def full(box: BubblewrapSandbox = box, source: Path = source, fill: Callable[[Path], None] = fill) -> None:
            workspace = box.new_layered_workspace([source], fill)
            if workspace is None:
                workspace = box.new_workspace()
                fill(workspace)
            box.start(workspace, "/workspace")

        contenders[f"full reset (workspace + new shell), {label}"] = full
    envs: list[HarnessEnv] = []
    for label in (next(iter(sources)), list(sources)[-1]):
        # what an RL loop sees: env.reset on the same task, with the other contenders' work between
        # two resets standing in for an episode (the warm spare is made meanwhile)
        env = HarnessEnv("S0T0O0C0W0", tasks=[make_task(sources[label], f"reset-{label}")], max_steps=10_000)
        envs.append(env)
        contenders[f"env.reset (warm spare), {label}"] = functools.partial(env.reset, seed=0)
    try:
        return interleave(contenders, rounds)
    finally:
        for env in envs:
            env.close()
        for box in boxes:
            box.close()
        for key, path in held.items():
            if path is not None:
                (layers.release if key.startswith("cow") else isolation.release_workspace)(path)
        for source in sources.values():
            with contextlib.suppress(OSError):
                shutil.rmtree(Path(tempfile.gettempdir()) / f"{layers.LAYER_PREFIX}{layers.signature([source])}")


def _episodes_worker(arguments: tuple[int, int]) -> tuple[int, int, float]:
    from harness_gym.agents import ReferenceAgent, run_episode

    seed, count = arguments
    env = HarnessEnv("S0T0O0C0W0", tasks="builtin:eval")
    failures = 0
    started = time.perf_counter()
    for index in range(count):
        task = env.tasks[(seed + index) % len(env.tasks)]
        try:
            failures += run_episode(env, ReferenceAgent(), seed=index, task_id=task.id).reward != 1.0
        except Exception:
            failures += 1
    env.close()
    return count, failures, time.perf_counter() - started


def throughput(workers_list: list[int], episodes_each: int) -> list[dict[str, float]]:
    rows = []
    context = multiprocessing.get_context("spawn")
    for workers in workers_list:
        started = time.perf_counter()
        with context.Pool(workers) as pool:
            results = pool.map(_episodes_worker, [(w * 7, episodes_each) for w in range(workers)])
        elapsed = time.perf_counter() - started
        episodes = sum(r[0] for r in results)
        rows.append(
            {
                "workers": workers,
                "episodes": episodes,
                "failures": sum(r[1] for r in results),
                "seconds": elapsed,
                "episodes_per_s": episodes / elapsed,
            }
        )
    return rows


def tree_pss_kb(pid: int) -> int:
    total, stack = 0, [pid]
    while stack:
        current = stack.pop()
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
            for thread in Path(f"/proc/{current}/task").iterdir():
                stack += [int(p) for p in (thread / "children").read_text().split()]
    return total


def sandbox_pss_mb(env: HarnessEnv) -> float:
    """PSS of an environment's sandbox processes; its warm spare (the next episode's sandbox) counts
    as the environment's."""
    total_kb = 0
    for box in (env.sandbox, env._spare.holds()):
        if box is None:
            continue
        if not isinstance(box, ShellSandbox) or box._proc is None:
            raise RuntimeError(f"{type(box).__name__} has no running shell process to measure")
        total_kb += tree_pss_kb(box._proc.pid)
    return total_kb / 1024


def started_workspace(env: HarnessEnv) -> Path:
    """The workspace of an environment that has been reset."""
    if env.workspace is None:
        raise RuntimeError("the environment has no workspace; reset it first")
    return env.workspace


def idle_memory(counts: list[int], task: Task) -> list[dict[str, float]]:
    """Per idle environment after reset (and one tool call, so the tool server runs): sandbox
    processes' PSS plus what its workspace holds in RAM (its tmpfs)."""
    rows = []
    for count in counts:
        envs = []
        try:
            for index in range(count):
                env = HarnessEnv("S0T1O0C0W0", tasks=[task], max_steps=10_000)
                env.reset(seed=index)
                if env.sandbox is None:
                    raise RuntimeError("reset started no sandbox")
                env.sandbox.run_tool("library.py", {"op": "read_file", "args": {"path": "a.txt"}, "root": "/workspace"})
                envs.append(env)
            time.sleep(0.3)
            processes = [sandbox_pss_mb(env) for env in envs]
            workspaces = []
            for env in envs:
                workspace = started_workspace(env)
                folder = workspace.parent if layers.is_layered(workspace) else workspace
                info = os.statvfs(folder)
                workspaces.append((info.f_blocks - info.f_bfree) * info.f_frsize / (1 << 20))
            rows.append(
                {
                    "environments": count,
                    "layered": layers.is_layered(started_workspace(envs[0])),
                    "process_pss_mb_each": statistics.fmean(processes),
                    "workspace_ram_mb_each": statistics.fmean(workspaces),
                    "total_mb": sum(processes) + sum(workspaces),
                }
            )
        finally:
            for env in envs:
                env.close()
    return rows


# ----------------------------------------------------------------------------- report


def ratio(rows: dict[str, dict[str, float]], name: str, other: str, key: str) -> float:
    return rows[name][key] / rows[other][key]


def check_targets(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    checks: dict[str, dict[str, Any]] = {}
    ours = "harness-gym sandbox run('true')"
    floors = {
        "floor": "floor: persistent bash in bwrap, pipe",
        "own-session floor": "floor in its own session (as sandboxes are)",
    }
    for phase in ("idle", "busy_disk"):
        rows = result["round_trip"][phase]
        for label, floor in floors.items():
            for key, target in (
                ("p50_ms", TARGETS["round_trip_p50_vs_floor"]),
                ("p90_ms", TARGETS["round_trip_p90_vs_floor"]),
            ):
                value = ratio(rows, ours, floor, key)
                checks[f"round trip {key[:3]} vs {label} ({phase})"] = {
                    "value": value,
                    "target": f"<= {target}x",
                    "met": value <= target,
                }
        for config in ("S0T0O0C0W0", "S2T2O2C2W2"):
            for key in ("p50_ms", "p90_ms"):
                target = TARGETS[f"step_{config}_{key[:3]}_vs_floor"]
                value = ratio(rows, f"env.step {config} (bash true)", floors["floor"], key)
                checks[f"env.step {config} {key[:3]} vs floor ({phase})"] = {
                    "value": value,
                    "target": f"<= {target}x",
                    "met": value <= target,
                }
        mini = "mini-swe-agent LocalEnvironment"
        if mini in rows:
            faster = rows[ours]["p50_ms"] < rows[mini]["p50_ms"] and rows[ours]["p90_ms"] < rows[mini]["p90_ms"]
            checks[f"faster than mini-swe-agent LocalEnvironment ({phase})"] = {
                "value": ratio(rows, ours, mini, "p50_ms"),
                "target": "< 1x at p50 and p90",
                "met": faster,
            }
    tools = result.get("tools_and_context")  # (absent from a --steps-only run)
    if tools:
        value = ratio(tools, "file_editor view (tool server)", "cat -n through bash", "p50_ms")
        checks["file-editor view vs cat -n"] = {
            "value": value,
            "target": "<= 2x",
            "met": value <= TARGETS["view_vs_cat_n"],
        }
        value = ratio(tools, "env.step C2 (S0T0O0C2W0)", "env.step C0 (S0T0O0C0W0)", "p50_ms")
        checks["C2 step vs C0 step"] = {"value": value, "target": "<= 1.5x", "met": value <= TARGETS["c2_vs_c0_step"]}
    for name, row in result.get("reset", {}).items():
        if name.startswith(("workspace reset, copy-on-write", "env.reset")):
            checks[f"{name} p50 ms"] = {
                "value": row["p50_ms"],
                "target": "<= 15 ms",
                "met": row["p50_ms"] <= TARGETS["reset_p50_ms"],
            }
    for key, where in (("engine_overhead", ""), ("engine_overhead_among_peers", ", among the round-trip peers")):
        for config, row in result[key].items():
            checks[f"engine overhead per step {config}{where} p50 ms"] = {
                "value": row["p50_ms"],
                "target": "<= 0.1 ms",
                "met": row["p50_ms"] <= TARGETS["engine_overhead_p50_ms"],
            }
    for row in result.get("idle_memory", []):
        if row["environments"] == 64:
            checks["64 idle envs on a 100 MB task, MB"] = {
                "value": row["total_mb"],
                "target": "< 1024 MB",
                "met": row["total_mb"] < TARGETS["memory_64_envs_100mb_task_mb"],
            }
    return checks


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(15, 6))
    rows = result["round_trip"]["idle"]
    names = list(rows)
    positions = range(len(names))
    left.barh([p + 0.2 for p in positions], [rows[n]["p50_ms"] for n in names], height=0.4, label="p50")
    left.barh([p - 0.2 for p in positions], [rows[n]["p90_ms"] for n in names], height=0.4, label="p90")
    left.set_yticks(list(positions), names, fontsize=8)
    left.set_xscale("log")
    left.set_xlabel("ms per `true` (log scale)")
    left.set_title("Round trip, interleaved (idle disk)")
    left.legend()
    resets = result.get("reset") or {"(not measured: --steps-only)": {"p50_ms": 1.0}}
    right.barh(list(resets), [row["p50_ms"] for row in resets.values()])
    right.set_xscale("log")
    right.set_xlabel("reset p50, ms (log scale)")
    right.set_title("Reset against workspace size")
    right.tick_params(axis="y", labelsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def print_table(result: dict[str, Any]) -> None:
    print(f"\n{'round trip (true)':<46}{'idle p50':>10}{'p90':>9}{'busy p50':>10}{'p90':>9}")
    idle, busy = result["round_trip"]["idle"], result["round_trip"]["busy_disk"]
    for name, row in idle.items():
        print(
            f"{name:<46}{row['p50_ms']:>10.3f}{row['p90_ms']:>9.3f}{busy[name]['p50_ms']:>10.3f}{busy[name]['p90_ms']:>9.3f}"
        )
    print(f"\n{'tools and context':<46}{'p50 ms':>10}{'p90 ms':>9}")
    for name, row in {**result.get("tools_and_context", {}), **result.get("reset", {})}.items():
        print(f"{name:<46}{row['p50_ms']:>10.3f}{row['p90_ms']:>9.3f}")
    for config, row in result["engine_overhead"].items():
        print(f"{'engine overhead per step ' + config:<46}{row['p50_ms']:>10.3f}{row['p90_ms']:>9.3f}")
    for config, row in result["engine_overhead_among_peers"].items():
        print(f"{'  the same among the round-trip peers ' + config:<46}{row['p50_ms']:>10.3f}{row['p90_ms']:>9.3f}")
    print("\nepisodes/s (reference agent, builtin:eval, S0T0O0C0W0):")
    for row in result.get("throughput", []):
        print(
            f"  {row['workers']} workers: {row['episodes_per_s']:.2f} episodes/s ({row['episodes']} episodes, "
            f"{row['failures']} failures)"
        )
    print("memory per idle environment (100 MB task):")
    for row in result.get("idle_memory", []):
        print(
            f"  {row['environments']:>3} envs ({'copy-on-write' if row['layered'] else 'copied'}): processes "
            f"{row['process_pss_mb_each']:.2f} MB + workspace {row['workspace_ram_mb_each']:.2f} MB each, "
            f"total {row['total_mb']:.0f} MB"
        )
    print("\ntargets:")
    for name, check in result["targets"].items():
        print(f"  {'met   ' if check['met'] else 'MISSED'} {name}: {check['value']:.3f} (target {check['target']})")


#: what each round-trip row times, for the README's table (issue 27: a figure says its path)
PATHS = {
    "floor: persistent bash in bwrap, pipe": "write a line, read to an end marker",
    "floor in its own session (as sandboxes are)": "the same, `--new-session`",
    "harness-gym sandbox run('true')": "`sandbox.run` only: the shell protocol, no engine",
    "env.step S0T0O0C0W0 (bash true)": "`env.step` whole: parse, validate, `sandbox.run`, observe, history (no reset)",
    "env.step S2T2O2C2W2 (bash true)": "`env.step` whole, with O2 rendering, C2 folds (a summary file every 3rd step), W2",
    "bare host subprocess.run": "fork/exec of `true`, no sandbox",
    "one bwrap per command": "a new bwrap per command",
    "mini-swe-agent LocalEnvironment": "its `execute` (a host subprocess, no sandbox)",
    "SWE-ReX local runtime": "`run_in_session` (a host bash over its runtime)",
    "docker exec (harness-gym DockerSandbox)": "`DockerSandbox.run` (persistent exec)",
}


def markdown(result: dict[str, Any]) -> str:
    """The README's Speed tables, from a result."""
    idle, busy = result["round_trip"]["idle"], result["round_trip"]["busy_disk"]
    lines = [
        "| `true` round trip | path timed | p50 ms | p90 ms | p50 ms, disk busy | p90 ms, disk busy |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for name, row in idle.items():
        lines.append(
            f"| {name} | {PATHS.get(name, '')} | {row['p50_ms']:.3f} | {row['p90_ms']:.3f} | "
            f"{busy[name]['p50_ms']:.3f} | {busy[name]['p90_ms']:.3f} |"
        )
    lines += ["", "| operation | p50 ms | p90 ms |", "|---|---:|---:|"]
    rows = {**result.get("tools_and_context", {}), **result.get("reset", {})}
    rows.update({f"engine overhead per step, {k}": v for k, v in result["engine_overhead"].items()})
    rows.update(
        {
            f"engine overhead per step, {k}, among the round-trip peers": v
            for k, v in result["engine_overhead_among_peers"].items()
        }
    )
    for name, row in rows.items():
        lines.append(f"| {name} | {row['p50_ms']:.3f} | {row['p90_ms']:.3f} |")
    lines += [
        "",
        "| episodes/s (reference agent, builtin:eval) | workers | episodes | failures |",
        "|---:|---:|---:|---:|",
    ]
    for row in result.get("throughput", []):
        lines.append(f"| {row['episodes_per_s']:.2f} | {row['workers']} | {row['episodes']} | {row['failures']} |")
    lines += ["", "| idle environments, 100 MB task | processes MB each | workspace RAM MB each | total MB |"]
    lines.append("|---:|---:|---:|---:|")
    for row in result.get("idle_memory", []):
        lines.append(
            f"| {row['environments']} | {row['process_pss_mb_each']:.2f} | {row['workspace_ram_mb_each']:.2f} | "
            f"{row['total_mb']:.0f} |"
        )
    lines += ["", "| target | value | met |", "|---|---:|:---:|"]
    for name, check in result["targets"].items():
        lines.append(f"| {name} ({check['target']}) | {check['value']:.3f} | {'yes' if check['met'] else 'no'} |")
    return "\n".join(lines) + "\n"


def other_parts(
    result: dict[str, Any], quick: bool, rounds: int, sizes: dict[str, tuple[int, int]], root: Path, small: Task
) -> None:
    """Everything but the round trips: tools and context, resets, throughput, idle memory."""
    print("tools and context ...", flush=True)
    result["tools_and_context"] = tools_and_context(rounds, small)
    print("resets ...", flush=True)
    result["reset"] = resets(10 if quick else 30, sizes, root / "sizes")
    print("throughput ...", flush=True)
    result["throughput"] = throughput([1, 2, 8], 3 if quick else 10)
    print("idle memory ...", flush=True)
    hundred = make_workspace(root / "hundred", 100 << 20, 4)
    result["idle_memory"] = idle_memory([1, 16, 64], make_task(hundred, "hundred-mb"))
    with contextlib.suppress(OSError):
        shutil.rmtree(Path(tempfile.gettempdir()) / f"{layers.LAYER_PREFIX}{layers.signature([hundred])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer rounds and episodes, no 300 MB workspace")
    parser.add_argument("--docker", action="store_true", help="also Docker exec (starts a private dockerd)")
    parser.add_argument(
        "--steps-only",
        action="store_true",
        help="only the round trips and the engine's share (env.step against the floor); default --out "
        "benchmarks/results/compare_steps.json",
    )
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.out is None:
        args.out = Path(f"benchmarks/results/compare{'_steps' if args.steps_only else ''}.json")
    rounds = 60 if args.quick else 300
    sizes = {"1 MB": (1 << 20, 1), "100 MB": (100 << 20, 4), "10k files": (10_000 * 200, 10_000)}
    if not args.quick:
        sizes["300 MB"] = (300 << 20, 12)
    result: dict[str, Any] = {
        "benchmark": "compare",
        "command": " ".join(["python", "benchmarks/compare.py", *sys.argv[1:]]),
        "machine": {
            "platform": platform.platform(),
            "cores": os.cpu_count(),
            "load_average": os.getloadavg(),
            "sched_autogroup": Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip()
            if Path("/proc/sys/kernel/sched_autogroup_enabled").exists()
            else "absent",
        },
        "note": "one interleaved run; other jobs may load the machine, so compare ratios, not absolute numbers",
    }
    with tempfile.TemporaryDirectory(prefix="harness-gym-compare-", dir="/var/tmp") as scratch:
        root = Path(scratch)
        small = make_task(make_workspace(root / "small", 64 << 10, 8))
        print("round trips ...", flush=True)
        result["round_trip"], result["engine_overhead_among_peers"], result["notices"] = round_trips(
            rounds, small, args.docker
        )
        print("engine overhead ...", flush=True)
        result["engine_overhead"] = engine_overhead(rounds * 4, small)
        for notice in result["notices"]:
            print("notice:", notice)
        if not args.steps_only:
            other_parts(result, args.quick, rounds, sizes, root, small)
    result["targets"] = check_targets(result)
    result["targets_not_measured_here"] = ["OpenRLHF executor <= 2 ms per turn: benchmarks/executor_overhead.py"]
    print_table(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    plot(result, args.out.with_suffix(".png"))
    args.out.with_suffix(".md").write_text(markdown(result))
    print(f"\nwritten to {args.out}, {args.out.with_suffix('.png')} and {args.out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
