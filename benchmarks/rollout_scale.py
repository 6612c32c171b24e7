"""Environments at rollout scale: resets alone and at once against one reset's floor, async vector
environments against the floor's steps/s, sandboxes lost to thread exits and reclaims.

    python benchmarks/rollout_scale.py [--environments 64] [--rounds 3] [--single-rounds 10] [--out benchmarks/results/rollout_scale.json]
    python benchmarks/rollout_scale.py --vector 32,64 [--vector-modes thread,async] [--vector-resets 20] [--vector-batches 200] [--out benchmarks/results/rollout_vector.json]
    python benchmarks/rollout_scale.py --losses 8,64,256 [--out benchmarks/results/rollout_losses.json]

Measured (ms). One reset's floor (:class:`FloorReset`: a tmpfs, an overlay of the task's layer, a
persistent bash in bwrap answering its first command), interleaved in shuffled rounds with a 0.5 s
pause before each contender, against ``env.reset`` with its spare ready, right after a reset (the
spare still being made: used up) and with no spare (another task each time). Then
``--environments`` environments reset at once from a thread pool of that size (a pool per round,
so its threads exit): the first time, right after a reset (every spare still being made: the worst
case, reported as such), and after the spares were made (the time that took is reported: in a
rollout the model's turn lasts seconds), p50, p90 and max; the first non-bash tool call of an
episode whose sandbox was a spare; and how many sandboxes a pool's shutdown killed (one command
in each: lost when it does not answer in the same shell). The targets of issue 27 are checked as
ratios to the floor's p50. Prints the figures and writes them as JSON.

``--vector``: at each count, each of ``--vector-modes``: ``thread`` (:class:`harness_gym.vector.ThreadVectorEnv`,
the sub-environments on threads of one process) and ``async`` (``gym.make_vec(...,
vectorization_mode="async")``, a process each): resets that crash (of ``--vector-resets``), and
steps per second of a bash `true` in every environment against as many floor shells stepped the
same way, batch by batch interleaved (target 0.6x); the rate is also given over the batches in
which no episode ended (was graded) or was reset.

``--losses`` counts only what an RL run must never meet, at each number of environments: an owner
process holding that many sandboxes is killed with -9 (its uids are leased again by this process,
which starts its uid search where the dead one did); this process resets as many environments,
half from a thread pool of random size shut down afterwards, half each from a thread of its own
that exits; a crash-recovery pass then reclaims the dead owner while they live; a second round
resets them all again (spares made by the spare pool's workers) from a new pool. After each stage,
a sandbox is lost when a command does not answer in the same shell, or an ``env.step`` ends the
episode. It fails (exit 1) on any loss, when no uid of the dead owner was leased again, or when
the recovery pass found no dead owner's log to reclaim (then the reclaim was not put to the test: the run
uses a state folder and uid range of its own, ``--shared-state`` for the host's, where another
process's start may reclaim the dead owner first).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import FloorShell  # noqa: E402


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


def _uptime() -> str:
    """The load the figures were taken under (``/proc/loadavg``)."""
    try:
        return "load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return {
        "p50": round(statistics.median(ordered), 1),
        "p90": round(p90, 1),
        "max": round(ordered[-1], 1),
        "n": len(ordered),
    }


def floor_bwrap() -> list[str]:
    """The floor's bwrap up to its shell: the system folders read-only, as sandboxes show them
    (compare.py's ``--ro-bind / /`` races other processes' workspace mounts on a busy host: bwrap's
    recursive remount fails when one goes meanwhile)."""
    from harness_gym.sandboxes import bubblewrap

    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--dev", "/dev", "--proc", "/proc"]
    for path in bubblewrap.SYSTEM_DIRS:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    return argv


class FloorReset:
    """One reset's floor, self-timed (ms): a size-limited tmpfs with an overlay of the task's layer
    on it (as copy-on-write workspaces are made), and a persistent bash in bwrap in its own session
    with the overlay at /workspace, until it answers its first command (compare.py's floor shell).
    What any reset on such workspaces must do at least: no uid lease, cgroup, idmapping, seccomp,
    registry or tool server. The previous one is closed before the clock starts (harness-gym
    closes a finished sandbox in the background too)."""

    self_timed = True

    def __init__(self, source: Path) -> None:
        from harness_gym.sandboxes import layers

        def fill(staging: Path) -> None:
            shutil.copytree(source, staging, dirs_exist_ok=True, symlinks=True)

        self.layer = layers.shared_layer([source], fill) if layers.available() else None
        self.source = source
        self.system = floor_bwrap()
        self.held: tuple[Path, Any] | None = None

    def __call__(self) -> float:
        from harness_gym.sandboxes import isolation, layers

        self.close()
        started = time.perf_counter()
        if self.layer is not None:
            workspace = layers.prepare(64)
            layers.mount(workspace, self.layer, None)
        else:  # no overlayfs here: the workspace is copied, as harness-gym then does
            workspace, _ = isolation.new_workspace(64)
            shutil.copytree(self.source, workspace, dirs_exist_ok=True, symlinks=True)
        shell = FloorShell(own_session=True, bwrap=[*self.system, "--bind", str(workspace), "/workspace"])
        self.held = (workspace, shell)
        shell.run("true")
        return (time.perf_counter() - started) * 1000

    def close(self) -> None:
        from harness_gym.sandboxes import isolation, layers

        if self.held is not None:
            workspace, shell = self.held
            shell.close()
            (layers.release if self.layer is not None else isolation.release_workspace)(workspace)
            self.held = None


class AfterAReset:
    """``env.reset`` right after a reset (self-timed, ms): the spare the first one started is still
    being made, so the second waits for it (a spare used up)."""

    self_timed = True

    def __init__(self, env: Any) -> None:
        self.env = env

    def __call__(self) -> float:
        self.env.reset(seed=0)
        return _timed_reset(self.env)


def _interleaved(contenders: dict[str, Callable[[], float]], rounds: int, pause_s: float) -> dict[str, list[float]]:
    """Each contender once per round, in an order shuffled each round, ``pause_s`` before each (what
    one started in the background settles, as it does during a model's turn)."""
    samples: dict[str, list[float]] = {name: [] for name in contenders}
    order = list(contenders.items())
    shuffler = random.Random(0)
    for _ in range(rounds):
        shuffler.shuffle(order)
        for name, call in order:
            time.sleep(pause_s)
            samples[name].append(call())
    return samples


def _settled(envs: list[Any], limit_s: float) -> float:
    """Wait until every environment's spare is made and its finished sandboxes are closed (at most
    ``limit_s``): how long it took, in seconds (``limit_s`` when they were not)."""
    started = time.perf_counter()
    while time.perf_counter() - started < limit_s:
        if all(env._spare.holds() is not None and env._spare.idle() for env in envs):
            break
        time.sleep(0.01)
    return round(time.perf_counter() - started, 2)


SINGLE = {
    "floor": "floor: tmpfs + overlay + bash in bwrap, first answer",
    "ready": "env.reset, spare ready (made during the model's turn)",
    "after": "env.reset right after a reset (spare used up)",
    "none": "env.reset, no spare (another task each time)",
}
AT_ONCE = {
    "first": "first (no spare)",
    "not_ready": "right after a reset (spares not ready: the worst case)",
    "ready": "spares ready (made during the model's turn)",
}
TARGETS = {"at_once_p50_vs_floor": 2.0, "at_once_max_ms": 1000.0, "after_a_reset_p50_vs_floor": 1.5}


def measure(
    count: int, rounds: int, single_rounds: int = 10, pause_s: float = 0.5, settle_limit_s: float = 120.0
) -> dict[str, Any]:
    """One reset alone (interleaved with the floor, ``single_rounds``), then ``count`` environments
    resetting at once (``rounds`` of spares not ready and ready)."""
    from harness_gym import HarnessEnv

    with tempfile.TemporaryDirectory(prefix="hg-scale-") as folder:
        task = _task(Path(folder))
        other = dataclasses.replace(task, id="scale-other")
        floor = FloorReset(task.workspace_dir)
        single_envs = [HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=50) for _ in range(2)]
        alternating = HarnessEnv("S0T0O0C0W0", tasks=[task, other], max_steps=50)
        switch = itertools.cycle([other.id, task.id])
        for env in single_envs:
            env.reset(seed=0)
        contenders: dict[str, Callable[[], float]] = {
            SINGLE["floor"]: floor,
            SINGLE["ready"]: functools.partial(_timed_reset, single_envs[0]),
            SINGLE["after"]: AfterAReset(single_envs[1]),
            SINGLE["none"]: lambda: _timed_reset_to(alternating, next(switch)),
        }
        try:
            single = _interleaved(contenders, single_rounds, pause_s)
        finally:
            floor.close()
            for env in [*single_envs, alternating]:
                env.close()

        envs = [HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=50) for _ in range(count)]
        at_once: dict[str, list[float]] = {label: [] for label in AT_ONCE.values()}
        settle_s: list[float] = []
        try:
            for round_ in range(rounds + 1):
                kind = "first" if round_ == 0 else "not_ready"
                with ThreadPoolExecutor(max_workers=count) as pool:  # a pool per round: threads that exit
                    at_once[AT_ONCE[kind]] += pool.map(_timed_reset, envs)
                if round_ == 0:
                    continue
                settle_s.append(_settled(envs, settle_limit_s))
                time.sleep(pause_s)  # the tool servers the spares primed start meanwhile
                with ThreadPoolExecutor(max_workers=count) as pool:
                    at_once[AT_ONCE["ready"]] += pool.map(_timed_reset, envs)
            lost = 0
            first_tool: list[float] = []
            call = '<tool_call>{"name": "file_editor", "arguments": {"command": "view", "path": "/workspace/a.txt"}}</tool_call>'
            time.sleep(pause_s)
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
    floor_p50 = statistics.median(single[SINGLE["floor"]])
    ready = _summary(at_once[AT_ONCE["ready"]])
    after = statistics.median(single[SINGLE["after"]])
    ratios = {
        "at_once_p50_vs_floor": round(ready["p50"] / floor_p50, 3),
        "at_once_max_ms": ready["max"],
        "after_a_reset_p50_vs_floor": round(after / floor_p50, 2),
        "at_once_not_ready_p50_vs_floor": round(statistics.median(at_once[AT_ONCE["not_ready"]]) / floor_p50, 2),
    }
    return {
        "uptime": _uptime(),
        "environments": count,
        "spare_workers": spare_workers(),
        "one_reset_ms": {label: _summary(values) for label, values in single.items()},
        "resets_at_once_ms": {label: _summary(values) for label, values in at_once.items()},
        "spares_ready_after_s": settle_s,
        "ratios": ratios,
        "targets": {
            name: {"target": limit, "value": ratios[name], "met": ratios[name] <= limit}
            for name, limit in TARGETS.items()
        },
        "first_tool_server_call_ms": _summary(first_tool),
        "lost_to_pool_shutdowns": lost,
    }


def _timed_reset_to(env: Any, task_id: str) -> float:
    started = time.perf_counter()
    env.reset(seed=0, options={"task_id": task_id})
    return (time.perf_counter() - started) * 1000


def spare_workers() -> int:
    from harness_gym.sandboxes import spare

    return spare.worker_limit()


def _lost(envs: list[Any]) -> int:
    """How many of ``envs`` lost their sandbox: a command not answered in the same shell, or a
    step through the environment that ends the episode."""
    lost = 0
    for env in envs:
        bash = next(t.name for t in env.tool_interface.tools.values() if t.implementation == "bash")
        call = f'<tool_call>{{"name": "{bash}", "arguments": {{"command": "cat a.txt"}}}}</tool_call>'
        sandbox: Any = env.sandbox
        shell = sandbox._proc
        if sandbox.run("cat a.txt").output != "alpha\n" or sandbox._proc is not shell:
            lost += 1
            continue
        observation, _, terminated, truncated, _ = env.step(call)
        if terminated or truncated or "alpha" not in str(observation) or sandbox._proc is not shell:
            lost += 1
    return lost


def hold(count: int, task_root: Path, cursor: int) -> None:
    """The owner to be killed: ``count`` live sandboxes, then a line on stdout, then wait."""
    from harness_gym import HarnessEnv
    from harness_gym.sandboxes import isolation

    isolation._uid_cursor = cursor  # where its uid search starts (random per process otherwise)
    task = _task(task_root)
    envs = [HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=50) for _ in range(count)]
    with ThreadPoolExecutor(max_workers=min(count, 16)) as pool:
        list(pool.map(lambda env: env.reset(seed=0), envs))
    print("ready", flush=True)
    time.sleep(3600)


def _dead_owner(count: int, folder: Path, cursor: int) -> set[str]:
    """Start an owner of ``count`` sandboxes, kill it with -9 once they run: the uids it leased."""
    from harness_gym.sandboxes import isolation

    root = folder / "dead-owner"
    root.mkdir()
    command = [sys.executable, str(Path(__file__).resolve()), "--hold", str(count), "--task-root", str(root)]
    command += ["--cursor", str(cursor)]
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the owner to be killed did not start its {count} sandboxes (exit {proc.poll()})")
        uids: set[str] = set()
        for log in (isolation.state_dir() / "owners").glob(f"{proc.pid}-*.log"):
            uids |= set(isolation.read_registry(log.read_text("utf-8", "surrogateescape")).get("uid", []))
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    return {token.partition(":")[0] for token in uids}


PRIVATE_UID_BASE = "3100000"  # far from the default pool (the soak's starts at 3,000,000)


def private_host_state() -> Path:
    """A state folder and a uid range of this process's own (its children inherit them), so that
    only this run reclaims its dead owner: the pass :func:`losses` runs is then the one that meets
    it. Call before anything else uses a sandbox; the caller removes the folder."""
    from harness_gym.sandboxes import isolation

    folder = Path(tempfile.mkdtemp(prefix="hg-scale-state-"))
    os.environ[isolation.STATE_DIR_VARIABLE] = str(folder)
    os.environ[isolation.UID_BASE_VARIABLE] = PRIVATE_UID_BASE
    return folder


def losses(count: int, seed: int) -> dict[str, Any]:
    """The sandboxes lost to thread exits, pool shutdowns and a reclaim pass, at ``count`` environments."""
    from harness_gym import HarnessEnv
    from harness_gym.sandboxes import isolation

    rng = random.Random(seed)
    cursor = int.from_bytes(os.urandom(2), "big")
    with tempfile.TemporaryDirectory(prefix="hg-scale-") as name:
        folder = Path(name)
        # this process's once-per-start recovery pass runs now, while the owner to be killed lives:
        # the pass below finds its registry log with uids this process has leased again since
        isolation.registry()
        dead_uids = _dead_owner(count, folder, cursor)
        isolation._uid_cursor = cursor  # this process's uid search starts where the dead owner's did
        task = _task(folder)
        envs = [HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=50) for _ in range(count)]
        try:
            half = count // 2
            pool_size = rng.randint(1, max(1, half))
            with ThreadPoolExecutor(max_workers=pool_size) as pool:
                list(pool.map(lambda env: env.reset(seed=0), envs[:half]))
            threads = [threading.Thread(target=env.reset, kwargs={"seed": 0}) for env in envs[half:]]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            time.sleep(1.0)  # the threads have exited: a sandbox tied to its spawning thread is dead by now
            leased_again = sum(str(getattr(env.sandbox, "uid", None)) in dead_uids for env in envs)
            lost_to_thread_exits = _lost(envs)
            dead_logs = len(isolation.dead_owner_logs())
            reclaimed = isolation.reclaim_dead_owners()
            dead_logs -= len(isolation.dead_owner_logs())
            lost_to_the_reclaim = _lost(envs)
            second_pool = rng.randint(1, count)
            with ThreadPoolExecutor(max_workers=second_pool) as pool:
                list(pool.map(lambda env: env.reset(seed=0), envs))
            time.sleep(1.0)
            lost_after_a_second_round = _lost(envs)
        finally:
            for env in envs:
                env.close()
    return {
        "environments": count,
        "pool_sizes": [pool_size, second_pool],
        "dead_owner_uids": len(dead_uids),
        "uids_leased_again_from_the_dead_owner": leased_again,
        "dead_owner_logs_reclaimed": dead_logs,
        "reclaim_lines": len(reclaimed),
        "state": "private" if os.environ.get(isolation.UID_BASE_VARIABLE) == PRIVATE_UID_BASE else "the host's",
        "lost_to_thread_exits_and_pool_shutdowns": lost_to_thread_exits,
        "lost_to_the_reclaim": lost_to_the_reclaim,
        "lost_after_a_second_round_with_spares": lost_after_a_second_round,
    }


def _floor_batch(floors: list[Any]) -> None:
    """One `true` in each floor shell, all sent before any answer is read (as a vector env steps)."""
    for floor in floors:
        floor.stdin.write(b"true\necho __END__\n")
    for floor in floors:
        data = b""
        while not data.endswith(b"__END__\n"):
            chunk = os.read(floor.fd, 65536)
            if not chunk:
                raise RuntimeError("a floor shell exited")
            data += chunk


VECTOR_MODES = ("thread", "async")


def _vector_envs(mode: str, count: int) -> Any:
    """``count`` S0T0O0C0W0 environments vectorised by ``mode``: ``thread`` (:class:`ThreadVectorEnv`,
    one process) or ``async`` (``gym.make_vec``'s process per environment)."""
    import gymnasium as gym

    import harness_gym  # noqa: F401  (registers the ids)
    from harness_gym.vector import make_vec

    if mode == "thread":
        return make_vec("Harness-S0T0O0C0W0", num_envs=count)
    return gym.make_vec("Harness-S0T0O0C0W0", num_envs=count, vectorization_mode=mode)


def vector(count: int, resets: int, batches: int, mode: str = "async") -> dict[str, Any]:
    """``count`` environments vectorised by ``mode`` (see :func:`_vector_envs`): ``resets`` resets
    (a crash counts, the run goes on), then ``batches`` steps of a bash `true` in every environment,
    interleaved batch by batch with ``count`` floor shells stepped the same way."""
    crashes: list[str] = []
    envs = _vector_envs(mode, count)
    floors = [FloorShell(own_session=True, bwrap=floor_bwrap()) for _ in range(count)]
    vec_s: list[float] = []
    step_only_s: list[float] = []  # batches in which no episode ended (graded) and none was reset
    floor_s: list[float] = []
    started_load = _uptime()
    try:
        infos: dict[str, Any] = {}
        reset_ms: list[float] = []
        for seed in range(resets):
            started = time.perf_counter()
            try:
                _, infos = envs.reset(seed=seed)
            except Exception as exc:  # counted, not raised: the figure is how many of the resets crash
                crashes.append(f"reset {seed}: {type(exc).__name__}: {exc}"[:300])
                envs.close()
                envs = _vector_envs(mode, count)
                continue
            reset_ms.append((time.perf_counter() - started) * 1000)
        if not infos:
            raise RuntimeError(f"no reset of {count} {mode} vector environments succeeded: {crashes[:3]}")
        call = '<tool_call>{"name": "%s", "arguments": {"command": "true"}}</tool_call>'
        actions = tuple(call % name for name in infos["tool_names"]["execute_bash"])
        envs.step(actions)  # warm: the first step of an episode
        _floor_batch(floors)
        resetting = False  # an episode ended at the last step: this one resets it (NEXT_STEP autoreset)
        for index in range(batches):
            for side in ("vec", "floor") if index % 2 == 0 else ("floor", "vec"):
                started = time.perf_counter()
                if side == "vec":
                    _, _, terminated, truncated, _ = envs.step(actions)
                    ended = bool(terminated.any() or truncated.any())
                    vec_s.append(time.perf_counter() - started)
                    if not (ended or resetting):
                        step_only_s.append(vec_s[-1])
                    resetting = ended
                else:
                    _floor_batch(floors)
                    floor_s.append(time.perf_counter() - started)
    finally:
        envs.close()
        for floor in floors:
            floor.close()
    vec_rate, floor_rate = count * len(vec_s) / sum(vec_s), count * len(floor_s) / sum(floor_s)
    step_rate = count * len(step_only_s) / sum(step_only_s) if step_only_s else None
    return {
        "mode": mode,
        "environments": count,
        "resets": resets,
        "crashed_resets": len(crashes),
        "crashes": crashes[:5],
        "reset_ms": _summary(reset_ms) if reset_ms else None,
        "batch_ms": _summary([s * 1000 for s in vec_s]),
        "floor_batch_ms": _summary([s * 1000 for s in floor_s]),
        "steps_per_s": round(vec_rate, 1),
        "floor_steps_per_s": round(floor_rate, 1),
        "steps_per_s_vs_floor": round(vec_rate / floor_rate, 3),
        "batches_without_an_episode_end": len(step_only_s),
        "steps_per_s_without_episode_ends": round(step_rate, 1) if step_rate else None,
        "steps_per_s_without_episode_ends_vs_floor": round(step_rate / floor_rate, 3) if step_rate else None,
        "target_vs_floor": 0.6,
        "met": not crashes and vec_rate / floor_rate >= 0.6,
        "uptime": f"{started_load} at the start, {_uptime()} at the end",
        "batches": batches,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--environments", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3, help="resets at once, spares not ready and ready")
    parser.add_argument("--single-rounds", type=int, default=10, help="one reset alone against the floor")
    parser.add_argument(
        "--losses", help="comma-separated numbers of environments: count the sandboxes lost, measure nothing"
    )
    parser.add_argument(
        "--vector", help="comma-separated numbers of async vector environments: resets and steps/s only"
    )
    parser.add_argument(
        "--vector-modes",
        default=",".join(VECTOR_MODES),
        help=f"--vector: comma-separated vectorisations to measure, of {', '.join(VECTOR_MODES)}",
    )
    parser.add_argument("--vector-resets", type=int, default=20)
    parser.add_argument("--vector-batches", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--shared-state", action="store_true", help="--losses: the host's state folder and uid pool, not the run's own"
    )
    parser.add_argument("--out", type=Path, help="default benchmarks/results/rollout_scale.json (rollout_losses.json)")
    parser.add_argument("--hold", type=int, help=argparse.SUPPRESS)  # the owner process to be killed
    parser.add_argument("--task-root", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--cursor", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hold is not None:
        hold(args.hold, args.task_root, args.cursor)
        return 0
    if args.environments < 1 or args.rounds < 1:
        parser.error("--environments and --rounds must be at least 1")
    results = ROOT / "benchmarks" / "results"
    if args.vector is not None:
        counts = [int(part) for part in args.vector.split(",") if part.strip().isdigit()]
        if not counts or min(counts) < 1:
            parser.error(f"--vector takes numbers of environments separated by commas, got {args.vector!r}")
        modes = [part.strip() for part in args.vector_modes.split(",") if part.strip()]
        if not modes or set(modes) - set(VECTOR_MODES):
            parser.error(f"--vector-modes takes some of {', '.join(VECTOR_MODES)}, got {args.vector_modes!r}")
        runs = [vector(count, args.vector_resets, args.vector_batches, mode) for count in counts for mode in modes]
        report = {"uptime": _uptime(), "runs": runs, "passed": all(run["met"] for run in runs)}
        print(json.dumps(report, indent=2))
        out = args.out or results / "rollout_vector.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        return 0 if report["passed"] else 1
    if args.losses is not None:
        try:
            counts = [int(part) for part in args.losses.split(",")]
        except ValueError:
            parser.error(f"--losses takes numbers separated by commas, got {args.losses!r}")
        if not counts or min(counts) < 2:
            parser.error("--losses: each number of environments must be at least 2")
        state = None if args.shared_state else private_host_state()
        try:
            runs = [losses(count, args.seed + index) for index, count in enumerate(counts)]
        finally:
            if state is not None:
                shutil.rmtree(state, ignore_errors=True)
        failed = [
            run["environments"]
            for run in runs
            if run["uids_leased_again_from_the_dead_owner"] == 0
            or (run["state"] == "private" and run["dead_owner_logs_reclaimed"] == 0)
            or any(value for key, value in run.items() if key.startswith("lost_"))
        ]
        report = {"uptime": _uptime(), "runs": runs, "passed": not failed}
        print(json.dumps(report, indent=2))
        out = args.out or results / "rollout_losses.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(report, indent=2) + "\n")
        return 1 if failed else 0
    result = measure(args.environments, args.rounds, args.single_rounds)
    print(json.dumps(result, indent=2))
    out = args.out or results / "rollout_scale.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
