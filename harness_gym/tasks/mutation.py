"""``harness-gym tasks audit SUITE --mutants N``: how strong is each task's grader?

A grader that accepts a wrong solution pays a policy for it. For every task with a reference
solution, the solution is replayed in the task's sandbox (the reference workspace, which must
score 1). Wrong versions of it, *mutants*, are then made from the files it changed: code mutants
change one site of the functions the solution changed (the generator's operators and the ones in
``tasks/mutation_operators.yaml``); output mutants perturb a file it wrote (truncated, reordered,
numbers off by one, a section emptied). Each mutant is graded by the task's own grader in a fresh
sandbox; a mutant that still scores 1 *survives*. Per task the mutation score is killed / valid
mutants; per suite, the share of tasks with at least one survivor.

Mutants that do not compile or equal the reference are discarded and counted. A task may declare a
mutant equivalent to the reference (``metadata.equivalent_mutants: {key: reason}``); it is then
neither killed nor survived. Results are appended to a JSON-lines file keyed by task, grader and
mutant, so an interrupted audit resumes, and a changed grader is audited afresh.

    harness-gym tasks audit builtin --mutants 40 --workers 2 --json m.json --markdown m.md
"""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness_gym.jsonl import ResultsFile, load_records
from harness_gym.sandboxes.base import Sandbox, SandboxError
from harness_gym.tasks.audit import UNSAFE_BACKENDS, on_world, open_audit_sandbox
from harness_gym.tasks.base import Task, TaskError
from harness_gym.tasks.mutants import (
    Mutant,
    audit_digest,
    grader_digest,
    instruction_paths,
    load_operators,
    mutant_pool,
    sample,
    text_files,
)

MIN_MUTANT_TIMEOUT_S = 10.0


def _open_sandbox(task: Task, backend: str | None, sandbox_options: Mapping[str, Any] | None) -> Sandbox:
    """A sandbox on the task's world (the reference must score there as in training)."""
    sandbox: Sandbox = open_audit_sandbox(task, backend, sandbox_options, "the mutation audit runs graders")
    return sandbox


def replay_solution(sandbox: Sandbox, task: Task, timeout_s: float = 300.0) -> list[str]:
    """Run the task's reference tool calls in a started sandbox (bash through the shell, edits
    through the file_editor tool script), as the reference agent would; returns the failed steps'
    output (what to show when the reference does not score 1)."""
    mount = shlex.quote(task.mount_path)
    failures = []
    for number, step in enumerate(task.solution, 1):
        arguments = dict(step.get("arguments", {}))
        sandbox.run(f"cd {mount}", timeout_s)
        if step.get("tool") == "execute_bash":
            result = sandbox.run(str(arguments.get("command", "")), timeout_s)
        elif step.get("tool") == "file_editor":
            if arguments.get("command") == "view":
                continue
            result = sandbox.run_tool("file_editor.py", {**arguments, "root": task.mount_path}, timeout_s)
        else:
            raise TaskError(f"task {task.id}: the audit cannot replay solution tool {step.get('tool')!r}")
        if result.exit_code != 0:
            failures.append(f"step {number} exited {result.exit_code}: {result.output[-500:]}")
    return failures


def _graded(task: Task) -> Task:
    return replace(task, judge=None) if task.judge is not None else task


TRANSCRIPT = [{"role": "assistant", "content": "Done."}]


@dataclass
class Reference:
    """A task's reference workspace (after its solution ran) and the files it changed."""

    folder: Path
    reward: float
    error: str | None
    original: dict[str, str]
    solved: dict[str, str]
    grading_s: float = 0.0

    def mutant_timeout_s(self, task: Task) -> float:
        """How long a mutant's grading may take: a mutant that hangs is wrong (killed), and waiting
        the task's full grader time for each would make the audit crawl."""
        return min(task.grader_timeout_s, max(MIN_MUTANT_TIMEOUT_S, 10 * self.grading_s))


def build_reference(
    task: Task, destination: Path, backend: str | None = None, sandbox_options: Mapping[str, Any] | None = None
) -> Reference:
    """Replay the solution in a fresh sandbox, grade it, and copy the workspace to ``destination``."""
    with tempfile.TemporaryDirectory(prefix="harness-gym-original-") as scratch:
        task.materialize(Path(scratch))
        original = text_files(Path(scratch))
    sandbox = _open_sandbox(task, backend, sandbox_options)
    try:
        workspace = sandbox.new_workspace()
        task.materialize(workspace)
        sandbox.start(workspace, task.mount_path, task.hidden_paths)
        failures = replay_solution(sandbox, task)
        # before grading: a grader may change the workspace (SWE-format ones apply the test patch)
        shutil.copytree(workspace, destination, symlinks=True, dirs_exist_ok=True)
        started = time.perf_counter()
        result = _graded(task).grade(sandbox, [{"role": "user", "content": task.instruction}, *TRANSCRIPT])
        grading_s = time.perf_counter() - started
    finally:
        sandbox.close()
    why = "; ".join([*([result.error] if result.error else []), *failures])
    if result.reward < 1.0 and not why:
        why = f"breakdown {json.dumps(result.breakdown, default=str)[:500]}"
    return Reference(destination, result.reward, why or None, original, text_files(destination), grading_s)


@dataclass(frozen=True)
class MutantResult:
    """One mutant graded: ``survived`` when the grader still gave the reference's reward."""

    task_id: str
    key: str
    operator: str
    file: str
    line: int
    diff: str
    reward: float
    grader_error: str | None = None
    audit_error: str | None = None
    equivalent: str | None = None  # the task's reason for declaring it equivalent

    @property
    def mutant(self) -> str:
        """The mutant's digest (what ``metadata.equivalent_mutants`` names)."""
        return self.key.rsplit(":", 1)[-1]

    @property
    def survived(self) -> bool:
        return self.audit_error is None and self.equivalent is None and self.reward >= 1.0

    @property
    def killed(self) -> bool:
        return self.audit_error is None and self.equivalent is None and self.reward < 1.0

    def record(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "task": self.task_id,
            "operator": self.operator,
            "file": self.file,
            "line": self.line,
            "diff": self.diff,
            "reward": self.reward,
            "grader_error": self.grader_error,
            "audit_error": self.audit_error,
            "equivalent": self.equivalent,
        }


def run_mutant(
    task: Task,
    reference: Path,
    mutant: Mutant,
    key: str,
    backend: str | None = None,
    sandbox_options: Mapping[str, Any] | None = None,
    timeout_s: float | None = None,
) -> MutantResult:
    """Grade one mutant in a fresh sandbox holding the reference workspace with the mutant's files
    (within ``timeout_s``, default the task's grader time; a grading that times out scores 0)."""
    if timeout_s is not None:
        task = replace(task, grader_timeout_s=min(task.grader_timeout_s, timeout_s))
    base: dict[str, Any] = {
        "task_id": task.id,
        "key": key,
        "operator": mutant.operator,
        "file": mutant.file,
        "line": mutant.line,
        "diff": mutant.diff,
    }
    equivalent = dict(task.metadata.get("equivalent_mutants") or {}).get(mutant.digest)
    try:
        sandbox = _open_sandbox(task, backend, sandbox_options)
    except SandboxError as exc:
        return MutantResult(**base, reward=0.0, audit_error=f"{type(exc).__name__}: {exc}")
    try:
        workspace = sandbox.new_workspace()
        shutil.copytree(reference, workspace, symlinks=True, dirs_exist_ok=True)
        for relative, content in mutant.files.items():
            (workspace / relative).write_text(content, encoding="utf-8")
        sandbox.start(workspace, task.mount_path, task.hidden_paths)
        result = _graded(task).grade(sandbox, [{"role": "user", "content": task.instruction}, *TRANSCRIPT])
        return MutantResult(**base, reward=result.reward, grader_error=result.error, equivalent=equivalent)
    except (OSError, RuntimeError, ValueError) as exc:
        return MutantResult(**base, reward=0.0, audit_error=f"{type(exc).__name__}: {exc}")
    finally:
        sandbox.close()


# -------------------------------------------------------------------------------------- report


@dataclass
class TaskMutation:
    """The audit of one task: its mutants' results and what was discarded."""

    task_id: str
    results: list[MutantResult] = field(default_factory=list)
    pool_size: int = 0
    not_compiling: int = 0
    identical: int = 0
    duplicates: int = 0
    error: str | None = None  # the reference could not be built or did not score 1
    digest: str | None = None  # what the score is of (mutants.audit_digest): a recorded score is checked by it

    @property
    def valid(self) -> int:
        return sum(r.killed or r.survived for r in self.results)

    @property
    def killed(self) -> int:
        return sum(r.killed for r in self.results)

    @property
    def survivors(self) -> list[MutantResult]:
        return [r for r in self.results if r.survived]

    @property
    def errors(self) -> list[MutantResult]:
        return [r for r in self.results if r.audit_error]

    @property
    def score(self) -> float | None:
        """killed / valid; None when unknown (no valid mutant, a reference or audit error): a score
        must never hide a failure to measure."""
        if self.error or self.errors or not self.valid:
            return None
        return self.killed / self.valid


@dataclass
class MutationReport:
    tasks: list[TaskMutation]
    mutants_per_task: int | None
    seed: int

    def with_survivors(self) -> list[TaskMutation]:
        return [t for t in self.tasks if t.survivors]

    @property
    def survivor_share(self) -> float | None:
        """Share of audited tasks (a score or a survivor known) with at least one surviving mutant."""
        audited = [t for t in self.tasks if t.score is not None or t.survivors]
        return len(self.with_survivors()) / len(audited) if audited else None

    def scores(self) -> dict[str, float | None]:
        return {t.task_id: t.score for t in self.tasks}

    def to_json(self) -> dict[str, Any]:
        return {
            "mutants_per_task": self.mutants_per_task,
            "seed": self.seed,
            "tasks_with_survivors": len(self.with_survivors()),
            "tasks": len(self.tasks),
            "survivor_share": self.survivor_share,
            "per_task": {
                t.task_id: {
                    "score": t.score,
                    "digest": t.digest,
                    "valid": t.valid,
                    "killed": t.killed,
                    "survived": len(t.survivors),
                    "equivalent": sum(r.equivalent is not None for r in t.results),
                    "audit_errors": len(t.errors),
                    "pool": t.pool_size,
                    "discarded": {
                        "not_compiling": t.not_compiling,
                        "identical": t.identical,
                        "duplicates": t.duplicates,
                    },
                    "error": t.error,
                    "survivors": [r.record() for r in t.survivors],
                    "errors": [r.record() for r in t.errors],
                }
                for t in self.tasks
            },
        }

    def table(self) -> str:
        width = max([len(t.task_id) for t in self.tasks] + [4]) + 2
        lines = [f"{'task':<{width}}{'score':>7}{'killed':>8}{'valid':>7}{'pool':>6}{'discarded':>11}  notes"]
        for t in self.tasks:
            score = "-" if t.score is None else f"{t.score:.2f}"
            notes = t.error or (f"{len(t.errors)} audit errors" if t.errors else "")
            if t.survivors:
                notes = f"{len(t.survivors)} survived " + notes
            discarded = t.not_compiling + t.identical + t.duplicates
            lines.append(
                f"{t.task_id:<{width}}{score:>7}{t.killed:>8}{t.valid:>7}{t.pool_size:>6}{discarded:>11}  {notes}"
            )
        share = self.survivor_share
        lines.append(
            f"{len(self.with_survivors())} of {len(self.tasks)} tasks with a surviving mutant"
            + (f" ({share:.0%} of those audited)" if share is not None else "")
        )
        for t in self.with_survivors():
            for r in t.survivors:
                lines.append(
                    f"\nSURVIVED {t.task_id} [{r.mutant}] {r.operator} at {r.file}:{r.line}\n{r.diff.rstrip()}"
                )
        return "\n".join(lines)

    def markdown(self) -> str:
        share = self.survivor_share
        out = [
            "# Mutation audit",
            "",
            f"{self.mutants_per_task or 'all'} mutants per task, seed {self.seed}. "
            f"Tasks with a surviving mutant: {len(self.with_survivors())} of {len(self.tasks)}"
            + (f" ({share:.0%} of those audited)." if share is not None else "."),
            "",
            "| task | score | killed | valid | pool | discarded | notes |",
            "|---|---:|---:|---:|---:|---:|---|",
        ]
        for t in self.tasks:
            score = "–" if t.score is None else f"{t.score:.2f}"
            notes = t.error or (f"{len(t.errors)} audit errors" if t.errors else "")
            out.append(
                f"| {t.task_id} | {score} | {t.killed} | {t.valid} | {t.pool_size} | "
                f"{t.not_compiling + t.identical + t.duplicates} | {notes.replace('|', '/')} |"
            )
        for t in self.with_survivors():
            out += ["", f"## Survivors of {t.task_id}"]
            for r in t.survivors:
                out += ["", f"`{r.mutant}`: {r.operator} at `{r.file}:{r.line}`", "", "```diff", r.diff.rstrip(), "```"]
        return "\n".join(out) + "\n"


def mutation_audit(
    tasks: Sequence[Task],
    mutants: int | None = 20,
    *,
    seed: int = 0,
    workers: int = 1,
    backend: str | None = None,
    sandbox_options: Mapping[str, Any] | None = None,
    results_path: Path | None = None,
    operators: Mapping[str, Any] | None = None,
    progress: Callable[[str, int], None] | None = None,
    world: str | None = None,
) -> MutationReport:
    """Audit every task with a reference solution with ``mutants`` sampled mutants each (None: all).

    ``progress(kind, total_delta_or_done)``: ``("total", n)`` when n more mutants are planned,
    ``("done", 1)`` per graded mutant. ``results_path``: a JSON-lines file of graded mutants; those
    already in it (without an audit error) are not graded again. Each task runs on its suite's
    world, or on ``world`` ("host": the host's folders)."""
    tasks = on_world(tasks, world)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    repeated = sorted({t.id for t in tasks if [u.id for u in tasks].count(t.id) > 1})
    if repeated:
        raise ValueError(f"task ids must be unique in one audit; repeated: {repeated}")
    if backend in UNSAFE_BACKENDS:
        raise SandboxError(f"the mutation audit runs graders and refuses the {backend!r} backend (no isolation)")
    table = dict(operators or load_operators())
    done: dict[str, dict[str, Any]] = {}
    results_file = None
    if results_path is not None:
        results_file = ResultsFile(Path(results_path))
        results_file.repair()
        if Path(results_path).exists():
            done = {r["key"]: r for r in load_records(results_path) if r.get("key") and r.get("audit_error") is None}
    entries = {t.id: TaskMutation(t.id, digest=audit_digest(t, table)) for t in tasks}
    report = MutationReport([entries[t.id] for t in tasks], mutants, seed)
    with (
        tempfile.TemporaryDirectory(prefix="harness-gym-mutation-") as scratch,
        ThreadPoolExecutor(max_workers=workers) as pool,
    ):

        def prepare(task: Task) -> list[tuple[Task, Path, Mutant, str, float]]:
            entry = entries[task.id]
            if not task.solution:
                why = task.metadata.get("reference_error")
                entry.error = "no reference solution" + (f" ({why})" if why else "")
                return []
            try:
                reference = build_reference(task, Path(scratch) / task.id, backend, sandbox_options)
            except (OSError, RuntimeError, ValueError) as exc:  # SandboxError, TaskError, a missing image: reported
                entry.error = f"reference: {type(exc).__name__}: {exc}"
                return []
            if reference.reward < 1.0:
                entry.error = f"the reference solution scores {reference.reward:g}" + (
                    f" ({reference.error})" if reference.error else ""
                )
                return []
            found = mutant_pool(reference.original, reference.solved, table, instruction_paths(task))
            entry.pool_size, entry.not_compiling = len(found.mutants), found.not_compiling
            entry.identical, entry.duplicates = found.identical, found.duplicates
            grading = grader_digest(task)
            jobs = []
            for mutant in sample(found.mutants, mutants, seed, task.id):
                key = f"{task.id}:{grading}:{mutant.digest}"
                if key in done:
                    entry.results.append(_from_record(done[key], mutant, task))
                else:
                    jobs.append((task, reference.folder, mutant, key, reference.mutant_timeout_s(task)))
            if progress is not None:
                progress("total", len(jobs))
            return jobs

        jobs = [job for batch in pool.map(prepare, tasks) for job in batch]
        futures = [
            pool.submit(run_mutant, t, folder, m, key, backend, sandbox_options, timeout)
            for t, folder, m, key, timeout in jobs
        ]
        for future in as_completed(futures):
            result = future.result()
            entries[result.task_id].results.append(result)
            if results_file is not None:
                results_file.append(result.record())
            if progress is not None:
                progress("done", 1)
    for entry in report.tasks:
        entry.results.sort(key=lambda r: r.key)
    return report


def _from_record(record: Mapping[str, Any], mutant: Mutant, task: Task) -> MutantResult:
    """A result read back from the results file (its equivalence re-read from the task: declaring
    one needs no re-run)."""
    return MutantResult(
        task_id=task.id,
        key=str(record["key"]),
        operator=mutant.operator,
        file=mutant.file,
        line=mutant.line,
        diff=mutant.diff,
        reward=float(record.get("reward", 0.0)),
        grader_error=record.get("grader_error"),
        equivalent=dict(task.metadata.get("equivalent_mutants") or {}).get(mutant.digest),
    )
