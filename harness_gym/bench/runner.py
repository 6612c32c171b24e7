"""``harness-gym bench``: episodes of one agent across harnesses and tasks, in parallel, appended
to a JSON-lines results file as they finish, resumable after a kill.

Every line of the results file is one complete episode record (see :func:`episode_record`). A run
killed midway loses at most the episodes in flight; ``resume=True`` skips every episode already
recorded and repairs a half-written last line.
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from harness_gym.design import TRAINING_SET, heldout_set
from harness_gym.metrics import tool_calls_by_format
from harness_gym.presets import OUT_OF_SPACE, PRESETS
from harness_gym.sandboxes.isolation import die_with_parent
from harness_gym.space import BASE_CONFIG, HarnessConfig, all_configs
from harness_gym.tasks import Task, load_tasks

QUICK = ("S0T0O0C0W0", "S1T2O0C1W2", "heldout:1", "Harness-ClaudeCodeStyle")
CLASSES = ("training", "heldout", "in_space", "preset", "out_of_space", "custom")


@dataclass(frozen=True)
class HarnessChoice:
    """A harness to benchmark: an environment id (or spec file) and its class."""

    env_id: str
    klass: str
    config: str | None = None
    spec_path: str | None = None


def classify_config(config: HarnessConfig) -> str:
    if config in TRAINING_SET:
        return "training"
    if config in heldout_set():
        return "heldout"
    return "in_space"


def resolve_harnesses(text: str | Sequence[str]) -> list[HarnessChoice]:
    """Parse a harness selection: comma-separated ``training``, ``heldout`` (``heldout:N`` for the
    first N), ``all`` (243), ``base``, ``presets``, ``out-of-space``, ``quick``, configuration ids,
    environment ids (``HarnessAdapt-H1``) and spec files (``*.yaml``/``*.json``)."""
    items = [p.strip() for p in (text.split(",") if isinstance(text, str) else text) if p.strip()]
    chosen: list[HarnessChoice] = []

    def add(choice: HarnessChoice) -> None:
        if choice.env_id not in {c.env_id for c in chosen}:
            chosen.append(choice)

    def add_config(config: HarnessConfig) -> None:
        add(HarnessChoice(config.env_id, classify_config(config), config.code))

    for item in items:
        if item == "quick":
            for choice in resolve_harnesses(list(QUICK)):
                add(choice)
        elif item == "training":
            for c in TRAINING_SET:
                add_config(c)
        elif item == "heldout" or item.startswith("heldout:"):
            count = int(item.split(":")[1]) if ":" in item else None
            for c in list(heldout_set())[:count]:
                add_config(c)
        elif item == "all":
            for c in all_configs():
                add_config(c)
        elif item == "base":
            add_config(BASE_CONFIG)
        elif item == "presets":
            for env_id in PRESETS:
                add(HarnessChoice(env_id, "out_of_space" if env_id in OUT_OF_SPACE else "preset"))
        elif item in ("out-of-space", "out_of_space"):
            for env_id in OUT_OF_SPACE:
                add(HarnessChoice(env_id, "out_of_space"))
        elif item in PRESETS:
            add(HarnessChoice(item, "out_of_space" if item in OUT_OF_SPACE else "preset"))
        elif item.endswith((".yaml", ".yml", ".json")):
            path = Path(item)
            if not path.is_file():
                raise ValueError(f"harness spec file {item} does not exist")
            add(HarnessChoice(f"spec:{path.stem}", "custom", None, str(path.resolve())))
        else:
            add_config(HarnessConfig.parse(item))
    if not chosen:
        raise ValueError("no harness chosen")
    return chosen


@dataclass(frozen=True)
class EpisodePlan:
    harness: HarnessChoice
    task_id: str
    run: int
    seed: int

    @property
    def key(self) -> str:
        return f"{self.harness.env_id}|{self.task_id}|{self.run}"


def plan_episodes(
    harnesses: Sequence[HarnessChoice], tasks: Sequence[Task], runs: int, seed: int = 0
) -> list[EpisodePlan]:
    """Every (harness, task, run). The seed depends on task and run only, so harnesses are paired."""
    return [
        EpisodePlan(h, t.id, r, seed + 1000 * r + i)
        for h in harnesses
        for i, t in enumerate(tasks)
        for r in range(runs)
    ]


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)


def run_one(
    plan: EpisodePlan,
    agent_factory: Callable[[], Any],
    tasks: str | Sequence[Task],
    env_options: Mapping[str, Any],
    trajectory_dir: str | None,
) -> dict[str, Any]:
    """Run one planned episode and return its record (an error becomes a record, not a crash)."""
    import gymnasium as gym

    import harness_gym  # noqa: F401  (registers the environments in a fresh worker)
    from harness_gym.agents.base import run_episode
    from harness_gym.bench.trajectories import write_trajectory
    from harness_gym.env import HarnessEnv

    started = time.perf_counter()
    env = None
    base = {
        "episode_id": plan.key,
        "harness": plan.harness.env_id,
        "class": plan.harness.klass,
        "config": plan.harness.config,
        "task_id": plan.task_id,
        "run": plan.run,
        "seed": plan.seed,
    }
    try:
        task_list = load_tasks(tasks) if isinstance(tasks, str) else list(tasks)
        options = dict(env_options)
        if plan.harness.spec_path:
            env = HarnessEnv(spec=plan.harness.spec_path, tasks=task_list, **options)
        else:
            env = gym.make(plan.harness.env_id, tasks=task_list, **options)
        agent = agent_factory()
        result = run_episode(env, agent, seed=plan.seed, task_id=plan.task_id)
        record = episode_record(base, result, agent, time.perf_counter() - started)
        if trajectory_dir:
            path = Path(trajectory_dir) / f"{_safe(plan.key)}.jsonl"
            write_trajectory(path, record, result.transcript, result.infos)
            record["trajectory"] = str(path)
        return record
    except Exception as exc:  # a broken task or agent must not take down the run
        return {
            **base,
            "reward": 0.0,
            "passed": False,
            "error": f"{type(exc).__name__}: {exc}",
            "durations": {"episode_s": time.perf_counter() - started},
        }
    finally:
        if env is not None:
            env.close()


def episode_record(base: Mapping[str, Any], result: Any, agent: Any, seconds: float) -> dict[str, Any]:
    """The results-file line of one episode."""
    steps = result.infos[1:]
    calls = sum(len(i.get("parsed_calls", [])) for i in steps)
    parse_errors = sum(len(i.get("parse_errors", [])) for i in steps)
    tool_errors = sum(len(i.get("tool_errors", [])) for i in steps)
    final = result.final_info
    usage = getattr(agent, "usage", None) or {}
    return {
        **base,
        "reward": result.reward,
        "passed": result.reward >= 1.0,
        "breakdown": final.get("reward_breakdown", {}),
        "grader_error": final.get("grader_error"),
        "steps": result.steps,
        "terminated": result.terminated,
        "truncated": result.truncated,
        "truncation_reason": final.get("truncation_reason"),
        "tool_calls": calls,
        "valid_tool_calls": calls - parse_errors - tool_errors,
        "parse_errors": parse_errors,
        "tool_errors": tool_errors,
        "no_call_steps": sum(1 for i in steps if not i.get("parsed_calls")),
        "tool_calls_by_format": tool_calls_by_format(steps),
        "tokens": {"prompt": int(usage.get("prompt_tokens", 0)), "completion": int(usage.get("completion_tokens", 0))},
        "durations": {"episode_s": seconds, "agent_s": result.agent_s, "env_s": max(seconds - result.agent_s, 0.0)},
        "spec_hash": result.spec_hash,
        "agent": getattr(agent, "name", type(agent).__name__),
        "error": None,
    }


class ResultsFile:
    """An append-only JSON-lines file; thread-safe appends, each flushed and synced to disk."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lock = threading.Lock()

    def repair(self) -> None:
        """Drop a half-written last line (the run was killed while writing it)."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            self.path.write_bytes(data[: data.rfind(b"\n") + 1])

    def done_keys(self) -> set[str]:
        keys = set()
        if self.path.exists():
            for line in self.path.read_text(encoding="utf-8").splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if record.get("error") is None:
                    keys.add(record["episode_id"])
        return keys

    def append(self, record: Mapping[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with self.lock, open(self.path, "a", encoding="utf-8") as handle:
            handle.write(line)
            handle.flush()
            os.fsync(handle.fileno())


class BenchRunner:
    """Runs a benchmark. ``executor``: ``thread`` (default), ``process`` or ``ray``."""

    def __init__(
        self,
        agent_factory: Callable[[], Any],
        harnesses: Sequence[HarnessChoice],
        tasks: str | Sequence[Task],
        *,
        runs: int = 3,
        out_dir: str | Path = "bench-results",
        workers: int = 1,
        executor: str = "thread",
        seed: int = 0,
        resume: bool = False,
        env_options: Mapping[str, Any] | None = None,
        save_trajectories: bool = True,
        task_count: int | None = None,
        ray_address: str | None = None,
        progress: bool = True,
    ) -> None:
        if executor not in ("thread", "process", "ray"):
            raise ValueError(f"executor must be thread, process or ray, got {executor!r}")
        self.agent_factory = agent_factory
        self.harnesses = list(harnesses)
        all_tasks = load_tasks(tasks) if isinstance(tasks, str) else list(tasks)
        self.tasks = all_tasks[:task_count] if task_count else all_tasks
        # workers get the suite by name when they can load it themselves (cheap to send to processes)
        self.task_source: str | list[Task] = tasks if isinstance(tasks, str) and not task_count else self.tasks
        self.runs = runs
        self.out_dir = Path(out_dir)
        self.workers = max(1, workers)
        self.executor = executor
        self.seed = seed
        self.resume = resume
        self.env_options = dict(env_options or {})
        self.save_trajectories = save_trajectories
        self.ray_address = ray_address
        self.progress = progress
        self.results = ResultsFile(self.out_dir / "results.jsonl")

    def plan(self) -> list[EpisodePlan]:
        return plan_episodes(self.harnesses, self.tasks, self.runs, self.seed)

    def run(self, on_record: Callable[[dict[str, Any]], None] | None = None) -> Path:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if self.results.path.exists() and self.results.path.stat().st_size and not self.resume:
            raise FileExistsError(
                f"{self.results.path} already holds results; pass resume=True (--resume) to continue "
                "it, or choose another output folder"
            )
        self.results.repair()
        self._write_manifest()
        done = self.results.done_keys() if self.resume else set()
        todo = [p for p in self.plan() if p.key not in done]
        trajectories = str(self.out_dir / "trajectories") if self.save_trajectories else None
        work = functools.partial(
            run_one,
            agent_factory=self.agent_factory,
            tasks=self.task_source,
            env_options=self.env_options,
            trajectory_dir=trajectories,
        )
        from tqdm import tqdm

        with tqdm(
            total=len(todo) + len(done & {p.key for p in self.plan()}),
            initial=len(done),
            unit="episode",
            desc="bench",
            disable=not self.progress,
            dynamic_ncols=True,
        ) as bar:
            for record in self._execute(work, todo):
                self.results.append(record)
                bar.update()
                bar.set_postfix(passed=f"{record.get('reward', 0):.2f}", refresh=False)
                if on_record is not None:
                    on_record(record)
        return self.results.path

    def _execute(
        self, work: Callable[[EpisodePlan], dict[str, Any]], todo: Sequence[EpisodePlan]
    ) -> Iterable[dict[str, Any]]:
        if self.executor == "ray":
            yield from self._execute_ray(work, todo)
            return
        if self.executor == "thread":
            pool: ThreadPoolExecutor | ProcessPoolExecutor = ThreadPoolExecutor(max_workers=self.workers)
        else:  # workers die with this process, even on kill -9
            pool = ProcessPoolExecutor(max_workers=self.workers, initializer=die_with_parent)
        with pool:
            pending: set[Future[dict[str, Any]]] = set()
            queue = list(todo)
            while queue or pending:
                while queue and len(pending) < self.workers * 2:
                    pending.add(pool.submit(work, queue.pop(0)))
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    yield future.result()

    def _execute_ray(
        self, work: Callable[[EpisodePlan], dict[str, Any]], todo: Sequence[EpisodePlan]
    ) -> Iterable[dict[str, Any]]:
        try:
            import ray
        except ImportError as exc:
            raise RuntimeError('--ray needs Ray: pip install "harness-gym[ray]"') from exc
        if not ray.is_initialized():
            if self.ray_address:
                ray.init(address=self.ray_address)
            else:
                ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False)
        remote = ray.remote(num_cpus=1)(lambda plan: work(plan))
        queue = list(todo)
        pending: list[Any] = []
        while queue or pending:
            while queue and len(pending) < self.workers * 2:
                pending.append(remote.remote(queue.pop(0)))
            finished, pending = ray.wait(pending, num_returns=1)
            for ref in finished:
                yield ray.get(ref)

    def _write_manifest(self) -> None:
        manifest = {
            "harnesses": [asdict(h) for h in self.harnesses],
            "tasks": [t.id for t in self.tasks],
            "runs": self.runs,
            "seed": self.seed,
            "env_options": self.env_options,
        }
        (self.out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str) + "\n")
