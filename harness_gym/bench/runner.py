"""``harness-gym bench``: episodes of one agent across harnesses and tasks, in parallel, appended
to a JSON-lines results file as they finish, resumable after a kill.

Every line of the results file is one complete episode record (see :func:`episode_record`). A run
killed midway loses at most the episodes in flight; ``resume=True`` skips every episode already
recorded and repairs a half-written last line.
"""

from __future__ import annotations

import functools
import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tqdm import tqdm

from harness_gym.agents.base import ContextOverflow, _resolve, as_agent, run_episode
from harness_gym.agents.factory import make_agent
from harness_gym.bench.external import run_external_plan
from harness_gym.bench.report import known_score
from harness_gym.env import make_env
from harness_gym.errors import BenchError
from harness_gym.llm_client import LLMError
from harness_gym.metrics import tool_calls_by_format, tool_calls_by_role
from harness_gym.records import EpisodePlan, HarnessChoice, ResultsFile, plan_episodes, write_trajectory
from harness_gym.sandboxes.isolation import die_with_parent
from harness_gym.tasks import Task, load_tasks

CALIBRATION = ("reference", "null")  # agents whose Pass@1 is known: 1.0 and 0.0 in every harness


class RoleEta:
    """Time left, estimated per role: the episodes left of each role (the model, each calibration
    agent) times that role's mean episode time so far, over the workers. A role with no finished
    episode yet borrows the mean of all roles."""

    def __init__(self, roles: Sequence[str], workers: int) -> None:
        self.left: dict[str, int] = {}
        for name in roles:
            self.left[name] = self.left.get(name, 0) + 1
        self.workers = max(int(workers), 1)
        self.seconds: dict[str, list[float]] = {}

    def finished(self, name: str, episode_s: float) -> None:
        self.left[name] = max(self.left.get(name, 0) - 1, 0)
        self.seconds.setdefault(name, []).append(max(episode_s, 0.0))

    def remaining_s(self) -> float | None:
        """Seconds left, or None before any episode finished."""
        every = [s for values in self.seconds.values() for s in values]
        if not every:
            return None
        overall = sum(every) / len(every)
        total = 0.0
        for name, left in self.left.items():
            values = self.seconds.get(name)
            total += left * (sum(values) / len(values) if values else overall)
        return total / self.workers

    def text(self) -> str:
        seconds = self.remaining_s()
        if seconds is None:
            return "-"
        minutes, secs = divmod(round(seconds), 60)
        hours, minutes = divmod(minutes, 60)
        return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


class EpisodeFailure(BenchError):
    """An exception while running an episode, with the part that raised it: ``agent``, ``endpoint``, ``env`` or ``grader``."""

    def __init__(self, kind: str, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.kind = kind


class _BlamingAgent:
    """Forwards to the agent and marks what it raises as the agent's (or the endpoint's) fault,
    so an error record says which side failed. Context overflow passes through: it is an outcome."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent

    def _blame(self, call: Callable[[], Any]) -> Any:
        try:
            return _resolve(call())
        except ContextOverflow:
            raise
        except LLMError as exc:
            raise EpisodeFailure("endpoint", exc) from exc
        except Exception as exc:
            raise EpisodeFailure("agent", exc) from exc

    def reset(self, env: Any) -> None:
        if hasattr(self.agent, "reset"):
            self._blame(lambda: self.agent.reset(env))

    def act(self, observation: Mapping[str, Any]) -> Any:
        return self._blame(lambda: self.agent.act(observation))


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
        "role": plan.role,
    }
    if plan.harness.klass == "external":  # a real agent CLI (issue 26): its own runner, the same record
        try:
            task_list = load_tasks(tasks) if isinstance(tasks, str) else list(tasks)
        except Exception as exc:
            return {**base, "reward": 0.0, "passed": False, "outcome": "error", "error": str(exc), "error_kind": "env"}
        record, episode = run_external_plan(plan, agent_factory, task_list, env_options)
        if trajectory_dir and episode is not None:
            path = Path(trajectory_dir) / f"{_safe(plan.key)}.jsonl"
            write_trajectory(path, record, episode.transcript, [])
            episode.proxy_records.write(path.with_suffix(".proxy.json"))  # one record at a time
            record["trajectory"] = str(path)
        return record
    try:
        try:
            task_list = load_tasks(tasks) if isinstance(tasks, str) else list(tasks)
            options = dict(env_options)
            env = make_env(plan.harness.ref, task_list, **options)  # the one way every command builds one
        except Exception as exc:
            raise EpisodeFailure("env", exc) from exc
        try:
            agent = as_agent(agent_factory()) if plan.role == "model" else make_agent(plan.role)
        except Exception as exc:
            raise EpisodeFailure("agent", exc) from exc
        try:
            result = run_episode(env, _BlamingAgent(agent), seed=plan.seed, task_id=plan.task_id)
        except EpisodeFailure:
            raise
        except Exception as exc:  # raised by the environment: the harness, the sandbox, the task
            raise EpisodeFailure("env", exc) from exc
        record = episode_record(base, result, agent, time.perf_counter() - started)
        if trajectory_dir:
            path = Path(trajectory_dir) / f"{_safe(plan.key)}.jsonl"
            write_trajectory(path, record, result.transcript, result.infos)
            record["trajectory"] = str(path)
        return record
    except EpisodeFailure as exc:  # a broken task or agent must not take down the run
        return {
            **base,
            "reward": 0.0,
            "passed": False,
            "outcome": "error",
            "error": str(exc),
            "error_kind": exc.kind,
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
    grader_error = final.get("grader_error")
    if grader_error:
        outcome = "error"
    elif result.outcome == "context_overflow":
        outcome = "context_overflow"
    else:
        outcome = "passed" if result.reward >= 1.0 else "failed"
    return {
        **base,
        "reward": result.reward,
        "passed": outcome == "passed",
        "outcome": outcome,
        "breakdown": final.get("reward_breakdown", {}),
        "grader_error": grader_error,
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
        "tool_calls_by_role": tool_calls_by_role(steps),
        "tokens": {"prompt": int(usage.get("prompt_tokens", 0)), "completion": int(usage.get("completion_tokens", 0))},
        "durations": {"episode_s": seconds, "agent_s": result.agent_s, "env_s": max(seconds - result.agent_s, 0.0)},
        "spec_hash": result.spec_hash,
        "agent": getattr(agent, "name", type(agent).__name__),
        "error": f"grader: {grader_error}" if grader_error else None,
        "error_kind": "grader" if grader_error else None,
    }


class ManifestMismatch(BenchError, ValueError):
    """``--resume`` of a folder whose recorded run differs from the one asked for."""


class BenchAborted(BenchError):
    """The run stopped early: most episodes errored (the message says how and why)."""


def harness_gym_version() -> str:
    try:
        return version("harness-gym")
    except Exception:  # not installed as a distribution (a source checkout on PYTHONPATH)
        return "unknown"


def manifest_differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Human-readable differences between two run manifests (notices and timestamps aside)."""
    skip = {"notices", "created"}
    out = []
    for key in sorted((set(old) | set(new)) - skip):
        before, after = old.get(key), new.get(key)
        if json.dumps(before, sort_keys=True, default=str) == json.dumps(after, sort_keys=True, default=str):
            continue
        if isinstance(before, list) and isinstance(after, list):
            gone = [x for x in before if x not in after]
            added = [x for x in after if x not in before]
            detail = (
                "; ".join(
                    part
                    for part in (
                        f"only in the recorded run: {_short(gone)}" if gone else "",
                        f"only in this command: {_short(added)}" if added else "",
                    )
                    if part
                )
                or "same items, other order"
            )
            out.append(f"{key}: {detail}")
        else:
            out.append(f"{key}: recorded {before!r}, now {after!r}")
    return out


def _short(items: Sequence[Any], limit: int = 5) -> str:
    shown = ", ".join(str(i) for i in items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


class BenchRunner:
    """Runs a benchmark. ``executor``: ``thread`` (default), ``process`` or ``ray``.

    ``agent_info`` (agent, model, endpoint, tool mode, ...) goes into the run manifest beside the
    harnesses, tasks, runs, seed and version; ``calibration`` agents (default none; the CLI runs
    reference and null) run once per (harness, task) beside the model. The run stops early when
    more than ``max_error_rate`` of at least ``min_episodes_before_stop`` finished episodes errored.
    """

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
        agent_info: Mapping[str, Any] | None = None,
        calibration: Sequence[str] = (),
        max_error_rate: float | None = 0.5,
        min_episodes_before_stop: int = 5,
        notices: Sequence[str] = (),
    ) -> None:
        if executor not in ("thread", "process", "ray"):
            raise ValueError(f"executor must be thread, process or ray, got {executor!r}")
        unknown = [c for c in calibration if c not in CALIBRATION]
        if unknown:
            raise ValueError(f"unknown calibration agents {unknown}; choose from {CALIBRATION}")
        if runs < 1:
            raise ValueError(f"runs must be at least 1, got {runs}")
        self.agent_factory = agent_factory
        self.harnesses = list(harnesses)
        all_tasks = load_tasks(tasks) if isinstance(tasks, str) else list(tasks)
        self.tasks = all_tasks[:task_count] if task_count else all_tasks
        if not self.tasks:
            raise ValueError(f"the task selection {tasks if isinstance(tasks, str) else '(list)'} holds no task")
        # every record carries its task's grader strength (None: not measured), for the report
        self.mutation_scores = {t.id: known_score(t.metadata.get("mutation_score")) for t in self.tasks}
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
        self.agent_info = dict(agent_info or {})
        self.calibration = tuple(calibration)
        self.max_error_rate = max_error_rate
        self.min_episodes_before_stop = min_episodes_before_stop
        self.notices = list(notices)
        self.results = ResultsFile(self.out_dir / "results.jsonl")
        self._stop = threading.Event()

    def plan(self) -> list[EpisodePlan]:
        return plan_episodes(self.harnesses, self.tasks, self.runs, self.seed, self.calibration)

    def manifest(self) -> dict[str, Any]:
        """What this run is: compared on ``--resume``, so results of two different runs never mix."""
        return {
            **self.agent_info,
            "harnesses": [h.env_id for h in self.harnesses],
            "harness_specs": [h.spec_path for h in self.harnesses if h.spec_path],
            "tasks": [t.id for t in self.tasks],
            "runs": self.runs,
            "seed": self.seed,
            "env_options": {k: v for k, v in sorted(self.env_options.items())},
            "calibration": list(self.calibration),
            "harness_gym_version": harness_gym_version(),
            "notices": self.notices,
        }

    def prepare(self) -> None:
        """Check the output folder without writing anything: results there are continued only
        with ``resume`` and an identical manifest. A folder whose every recorded episode errored
        (a run with a broken setup) does not block a new run."""
        if self.out_dir.exists() and not self.out_dir.is_dir():
            raise FileExistsError(f"{self.out_dir} exists and is not a folder")
        manifest_path = self.out_dir / "manifest.json"
        if self.resume and manifest_path.exists():
            try:
                recorded = json.loads(manifest_path.read_text(encoding="utf-8"))
            except json.JSONDecodeError as exc:
                raise ManifestMismatch(f"{manifest_path} is not JSON ({exc.msg}); cannot check --resume") from exc
            differences = manifest_differences(recorded, self.manifest())
            if differences:
                raise ManifestMismatch(
                    f"--resume refused: {self.out_dir} holds a different run.\n  "
                    + "\n  ".join(differences)
                    + "\nRun the recorded command again, or choose another --out."
                )
        if not self.resume and self.results.path.exists() and self.results.path.stat().st_size:
            finished = self.results.done_keys()
            if finished:
                raise FileExistsError(
                    f"{self.results.path} already holds {len(finished)} finished episodes; pass resume=True "
                    "(--resume) to continue it, or choose another output folder"
                )

    def run(self, on_record: Callable[[dict[str, Any]], None] | None = None) -> Path:
        self.prepare()
        self.out_dir.mkdir(parents=True, exist_ok=True)
        ignore = self.out_dir / ".gitignore"
        if not ignore.exists():
            ignore.write_text("# written by harness-gym bench: results stay out of git\n*\n")
        if not self.resume and self.results.path.exists() and self.results.path.stat().st_size:
            # every recorded episode errored (prepare() checked): keep them aside, start afresh
            self.results.path.rename(self.out_dir / f"results.errored-{time.strftime('%Y%m%d-%H%M%S')}.jsonl")
        self.results.repair()
        self._write_manifest()
        done = self.results.done_keys() if self.resume else set()
        plan = self.plan()
        todo = [p for p in plan if p.key not in done]
        trajectories = str(self.out_dir / "trajectories") if self.save_trajectories else None
        work = functools.partial(
            run_one,
            agent_factory=self.agent_factory,
            tasks=self.task_source,
            env_options=self.env_options,
            trajectory_dir=trajectories,
        )
        finished = errors = passed = model_finished = 0
        error_messages: dict[str, int] = {}
        started = time.perf_counter()
        eta = RoleEta([p.role for p in todo], self.workers)
        self._stop.clear()
        with tqdm(
            total=len(plan),
            initial=len(done & {p.key for p in plan}),
            unit="episode",
            desc="bench",
            disable=not self.progress,
            dynamic_ncols=True,
            # tqdm's own ETA assumes every episode takes the mean so far: a few slow model episodes
            # then predict hours for hundreds of quick calibration ones. RoleEta's replaces it.
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
        ) as bar:
            for record in self._execute(work, todo):
                record["mutation_score"] = self.mutation_scores.get(record.get("task_id", ""))
                self.results.append(record)
                finished += 1
                if record.get("error"):
                    errors += 1
                    message = str(record["error"])[:300]
                    error_messages[message] = error_messages.get(message, 0) + 1
                if record.get("role", "model") == "model":
                    model_finished += 1
                    passed += bool(record.get("passed"))
                eta.finished(
                    str(record.get("role", "model")), float((record.get("durations") or {}).get("episode_s", 0.0))
                )
                bar.update()
                bar.set_postfix(
                    eta=eta.text(),
                    pass_rate=f"{passed / model_finished:.2f}" if model_finished else "-",
                    errors=errors,
                    eps=f"{finished / max(time.perf_counter() - started, 1e-9):.2f}/s",
                    refresh=False,
                )
                if on_record is not None:
                    on_record(record)
                if (
                    self.max_error_rate is not None
                    and not self._stop.is_set()
                    and finished >= min(self.min_episodes_before_stop, len(todo))
                    and errors > self.max_error_rate * finished
                ):
                    self._stop.set()  # episodes in flight finish and are recorded; no new ones start
        if self._stop.is_set():
            common, count = max(error_messages.items(), key=lambda item: item[1])
            skipped = len(todo) - finished
            head = f"stopped early, {skipped} episodes not run: " if skipped else "most episodes errored: "
            raise BenchAborted(
                f"{head}{errors} of {finished} episodes errored (more than "
                f"{100 * (self.max_error_rate or 0):.0f}%); the most common error ({count}x): {common}"
            )
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
            while (queue and not self._stop.is_set()) or pending:
                while queue and not self._stop.is_set() and len(pending) < self.workers * 2:
                    pending.add(pool.submit(work, queue.pop(0)))
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    yield future.result()

    def _execute_ray(
        self, work: Callable[[EpisodePlan], dict[str, Any]], todo: Sequence[EpisodePlan]
    ) -> Iterable[dict[str, Any]]:
        try:
            import ray  # optional dependency (the ray extra), only for executor='ray'
        except ImportError as exc:
            raise RuntimeError('--ray needs Ray: pip install "harness-gym[ray]"') from exc
        if not ray.is_initialized():
            if self.ray_address:
                ray.init(address=self.ray_address)
            else:
                ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False)
        remote: Any = ray.remote(num_cpus=1)(lambda plan: work(plan))
        queue = list(todo)
        pending: list[Any] = []
        while (queue and not self._stop.is_set()) or pending:
            while queue and not self._stop.is_set() and len(pending) < self.workers * 2:
                pending.append(remote.remote(queue.pop(0)))
            finished, pending = ray.wait(pending, num_returns=1)
            for ref in finished:
                yield ray.get(ref)

    def _write_manifest(self) -> None:
        manifest = {**self.manifest(), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (self.out_dir / "manifest.json").write_text(json.dumps(manifest, indent=2, default=str) + "\n")
