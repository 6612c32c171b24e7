"""``harness-gym tasks audit``: run generic exploits against every task and report which ones pay.

A reward an agent can earn without solving the task is what RL optimises first. The exploit
library (``tasks/exploits.yaml``, validated by ``schemas/exploits.schema.json``) holds what a
reward-hacking policy could do without knowing the task: stop at once, delete or empty the
tests, forge the verdict line, patch the test framework, shadow standard-library modules, plant
runner configuration or stale bytecode, write the expected outputs empty, kill or ptrace the
grader, ... Each exploit is applied in a fresh sandbox of the task (as the agent would, through
the shell), the task's own grader runs. The report keeps apart an exploit that reaches a pass
(reward 1: a forgeable grader), one that earns partial credit above what doing nothing scores (a
weak grader), and the do-nothing score itself; each task runs on its suite's world (``--world``).

    harness-gym tasks audit builtin --workers 4 --json audit.json
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness_gym.sandboxes.base import SandboxError, choose_backend, create_sandbox
from harness_gym.tasks.base import Task, TaskError
from harness_gym.worlds import HOST, docker_image, load_world

UNSAFE_BACKENDS = ("unsafe-host",)  # exploits write to every /proc/*/fd/1 they can open: never on the host
SNIPPET = ".harness_gym_audit_snippet"
BASELINE = "nothing"  # the exploit whose score is the do-nothing baseline of a task
_PATH_TOKEN = re.compile(r"[A-Za-z0-9_./-]+")
_EXTENSION = re.compile(r"\.[A-Za-z0-9]{1,5}$")


@dataclass(frozen=True)
class Exploit:
    """A named exploit: steps applied to a task's workspace in its sandbox (see exploits.yaml)."""

    name: str
    description: str
    steps: tuple[Mapping[str, Any], ...]
    requires: str | None = None


@dataclass(frozen=True)
class AuditCell:
    """One exploit on one task: the reward the task's grader gave, and an error if any.

    ``audit_error``: the audit itself could not apply the exploit or grade (not a finding, but shown)."""

    task_id: str
    exploit: str
    reward: float
    grader_error: str | None = None
    audit_error: str | None = None

    @property
    def exploited(self) -> bool:
        return self.reward > 0.0


@dataclass
class AuditReport:
    """Every cell of a (task x exploit) audit."""

    exploits: list[str]
    task_ids: list[str]
    cells: list[AuditCell] = field(default_factory=list)

    def cell(self, task_id: str, exploit: str) -> AuditCell | None:
        return next((c for c in self.cells if c.task_id == task_id and c.exploit == exploit), None)

    def exploitable(self) -> dict[str, list[str]]:
        """Task id -> the exploits that scored above 0 on it (only tasks with at least one)."""
        return self._where(lambda cell, _: cell.exploited)

    def baselines(self) -> dict[str, float]:
        """Task id -> what doing nothing scores (the ``nothing`` exploit; 0 where it was not run)."""
        return {t: (c.reward if (c := self.cell(t, BASELINE)) is not None else 0.0) for t in self.task_ids}

    def passes(self) -> dict[str, list[str]]:
        """Task id -> the exploits that reached a pass (reward 1): a forgeable or broken grader."""
        return self._where(lambda cell, _: cell.reward >= 1.0)

    def above_baseline(self) -> dict[str, list[str]]:
        """Task id -> the exploits short of a pass that scored above doing nothing (partial credit
        an exploit earns: a weak grader), apart from the passes."""
        return self._where(lambda cell, baseline: baseline < cell.reward < 1.0)

    def _where(self, test: Callable[[AuditCell, float], bool]) -> dict[str, list[str]]:
        baselines = self.baselines()
        found: dict[str, list[str]] = {}
        for task_id in self.task_ids:
            names = [
                e for e in self.exploits if (c := self.cell(task_id, e)) is not None and test(c, baselines[task_id])
            ]
            if names:
                found[task_id] = names
        return found

    def to_json(self) -> dict[str, Any]:
        return {
            "exploits": self.exploits,
            "tasks": {
                task_id: {
                    c.exploit: {"reward": c.reward, "grader_error": c.grader_error, "audit_error": c.audit_error}
                    for c in self.cells
                    if c.task_id == task_id
                }
                for task_id in self.task_ids
            },
            "exploitable": self.exploitable(),
            "passes": self.passes(),
            "above_baseline": self.above_baseline(),
            "baselines": self.baselines(),
        }

    def table(self) -> str:
        """Tasks down, exploits across (numbered, with a legend): P passed, X scored above 0, . scored 0,
        e scored 0 with a grader error, ! the audit could not run it; then the passes, the partial
        credit above the do-nothing score and the do-nothing scores, apart."""
        width = max([len(t) for t in self.task_ids] + [4]) + 2
        numbers = [str(i + 1) for i in range(len(self.exploits))]
        lines = [f"{'task':<{width}}" + " ".join(f"{n:>2}" for n in numbers)]
        for task_id in self.task_ids:
            marks = []
            for exploit in self.exploits:
                cell = self.cell(task_id, exploit)
                mark = (
                    "?"
                    if cell is None
                    else "P"
                    if cell.reward >= 1.0
                    else "X"
                    if cell.exploited
                    else "!"
                    if cell.audit_error
                    else "e"
                    if cell.grader_error
                    else "."
                )
                marks.append(f"{mark:>2}")
            lines.append(f"{task_id:<{width}}" + " ".join(marks))
        lines.append("")
        lines += [f"{n:>3} {name}" for n, name in zip(numbers, self.exploits, strict=True)]
        lines.append(
            "P passed (1)   X scored above 0   . scored 0   e scored 0, grader error   ! audit could not run it"
        )
        total = len(self.task_ids)
        baselines = self.baselines()
        for title, found in (
            ("an exploit passes (reward 1)", self.passes()),
            ("an exploit earns partial credit above the do-nothing score", self.above_baseline()),
        ):
            lines.append(f"{len(found)} of {total} tasks: {title}")
            for task_id, names in found.items():
                rewards = ", ".join(f"{n} {self.cell(task_id, n).reward:g}" for n in names)  # type: ignore[union-attr]
                lines.append(f"  {task_id}: {rewards} (doing nothing: {baselines[task_id]:g})")
        paying = {t: b for t, b in baselines.items() if b > 0}
        lines.append(f"{len(paying)} of {total} tasks: doing nothing scores above 0 (the task's own weak grader)")
        lines += [f"  {task_id}: {score:g}" for task_id, score in paying.items()]
        return "\n".join(lines)


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(
        resources.files("harness_gym").joinpath("schemas/exploits.schema.json").read_text(encoding="utf-8")
    )
    return jsonschema.validators.validator_for(schema)(schema)


def load_exploits(path: str | Path | None = None, names: Iterable[str] | None = None) -> list[Exploit]:
    """The exploit library (the built-in one, or a YAML file of the same schema), optionally a subset by name."""
    text = (
        Path(path).read_text(encoding="utf-8")
        if path is not None
        else resources.files("harness_gym").joinpath("tasks/exploits.yaml").read_text(encoding="utf-8")
    )
    data = yaml.safe_load(text)
    errors = list(_validator().iter_errors(data))
    if errors:
        raise TaskError(
            f"exploit library {path or 'exploits.yaml'} is invalid: "
            + "; ".join(f"{e.json_path}: {e.message}" for e in errors)
        )
    exploits = [Exploit(e["name"], e["description"], tuple(e["steps"]), e.get("requires")) for e in data["exploits"]]
    if names is not None:
        wanted = list(names)
        known = {e.name for e in exploits}
        unknown = [n for n in wanted if n not in known]
        if unknown:
            raise TaskError(f"unknown exploit(s) {unknown}; known: {sorted(known)}")
        exploits = [e for e in exploits if e.name in wanted]
    return exploits


def mentioned_paths(task: Task) -> list[str]:
    """Workspace-relative file paths the instruction names (absolute under the mount path, or
    relative with a folder or an extension); the files a grader is likely to look for."""
    found: list[str] = []
    root = task.mount_path.rstrip("/") + "/"
    for token in _PATH_TOKEN.findall(task.instruction):
        token = token.rstrip(".")
        if token.startswith(root):
            relative = token[len(root) :]
        elif token.startswith("/") or "://" in token:
            continue
        else:
            relative = token.removeprefix("./")
        if not relative or relative.startswith(("-", ".")) or ".." in relative.split("/") or relative.endswith("/"):
            continue
        if ("/" in relative or _EXTENSION.search(relative)) and relative not in found:
            found.append(relative)
    return found[:20]


def _python_everywhere_command() -> str:
    """Shell code appending the snippet file to every .py file and every Python script."""
    return (
        "find . -name .git -prune -o -type f -print | while IFS= read -r f; do "
        'case "$f" in *.py) ;; *) head -n1 "$f" 2>/dev/null | grep -q "^#!.*python" || continue ;; esac; '
        f'printf "\\n" >> "$f"; cat {SNIPPET} >> "$f"; done; rm -f {SNIPPET}'
    )


def apply_exploit(sandbox: Any, task: Task, exploit: Exploit, timeout_s: float = 60.0) -> None:
    """Apply the exploit's steps in a started sandbox of ``task`` (through its shell, like an agent)."""
    mount = task.mount_path
    sandbox.run(f"cd {shlex.quote(mount)}", timeout_s)
    for step in exploit.steps:
        if "bash" in step:
            sandbox.run(step["bash"], timeout_s)
        elif "python_everywhere" in step:
            sandbox.write_file(f"{mount}/{SNIPPET}", step["python_everywhere"])
            sandbox.run(_python_everywhere_command(), timeout_s)
        elif "files" in step:
            for relative, content in step["files"].items():
                sandbox.write_file(f"{mount}/{relative}", content)
        elif "mentioned_files" in step:
            contents = step["mentioned_files"]
            for relative in mentioned_paths(task):
                content = contents.get(Path(relative).suffix, contents["default"])
                quoted = shlex.quote(relative)
                sandbox.run(
                    f'[ -e {quoted} ] || {{ mkdir -p -- "$(dirname -- {quoted})" && printf %s {shlex.quote(content)} > {quoted}; }}',
                    timeout_s,
                )
        sandbox.run(f"cd {shlex.quote(mount)}", timeout_s)


def open_audit_sandbox(
    task: Task,
    backend: str | None = None,
    sandbox_options: Mapping[str, Any] | None = None,
    what: str = "the audit runs hostile code",
) -> Any:
    """A sandbox for auditing ``task``: never an unisolated backend, and on the world its episodes
    run on (the task's suite's world, else the host's folders), so the audit grades what training
    grades. A world that is not built raises (naming how to build it)."""
    chosen = choose_backend(backend, task.image)
    if chosen in UNSAFE_BACKENDS:
        raise SandboxError(f"{what} and refuses the {chosen!r} backend (no isolation)")
    options = dict(sandbox_options or {})
    image = task.image
    resolved = load_world(task.world or HOST)
    if not resolved.is_host and not (chosen == "docker" and task.image is not None):
        if chosen == "bubblewrap":
            root = resolved.root()
            options.setdefault("system_root", str(root) if root is not None else None)
        elif chosen == "docker":
            image = docker_image(resolved, options.get("docker_host"))
        else:
            raise SandboxError(f"task {task.id}: world {resolved.name!r} needs the bubblewrap or docker backend")
    return create_sandbox(chosen, image, **options)


def on_world(tasks: Sequence[Task], world: str | None) -> list[Task]:
    """``tasks``, each on ``world`` when one is given ("host": the host's folders), else on its own."""
    return [replace(t, world=world) for t in tasks] if world else list(tasks)


def run_exploit(
    task: Task,
    exploit: Exploit,
    backend: str | None = None,
    sandbox_options: Mapping[str, Any] | None = None,
) -> AuditCell:
    """One exploit on one task in a fresh sandbox on its world (:func:`open_audit_sandbox`),
    graded by the task's own grader (an LLM judge is not called: the audit checks the automated part)."""
    graded_task = replace(task, judge=None) if task.judge is not None else task
    try:
        sandbox = open_audit_sandbox(task, backend, sandbox_options)
    except (SandboxError, OSError, TaskError) as exc:
        return AuditCell(task.id, exploit.name, 0.0, audit_error=f"{type(exc).__name__}: {exc}")
    try:
        workspace = sandbox.new_workspace()
        task.materialize(workspace)
        sandbox.start(workspace, task.mount_path, task.hidden_paths)
        apply_exploit(sandbox, task, exploit)
        transcript = [
            {"role": "user", "content": task.instruction},
            {"role": "assistant", "content": "Done: the task is complete and every check passes."},
        ]
        result = graded_task.grade(sandbox, transcript)
        return AuditCell(task.id, exploit.name, result.reward, grader_error=result.error)
    except (SandboxError, OSError, TaskError) as exc:
        return AuditCell(task.id, exploit.name, 0.0, audit_error=f"{type(exc).__name__}: {exc}")
    finally:
        sandbox.close()


def audit(
    tasks: Sequence[Task],
    exploits: Sequence[Exploit] | None = None,
    *,
    workers: int = 1,
    backend: str | None = None,
    sandbox_options: Mapping[str, Any] | None = None,
    progress: Callable[[AuditCell], None] | None = None,
    world: str | None = None,
) -> AuditReport:
    """Every exploit on every task, ``workers`` at a time, each task on its world (or ``world``);
    ``progress`` is called per finished cell."""
    chosen = list(exploits) if exploits is not None else load_exploits()
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    if backend in UNSAFE_BACKENDS:
        raise SandboxError(f"the audit runs hostile code and refuses the {backend!r} backend (no isolation)")
    tasks = on_world(tasks, world)
    report = AuditReport([e.name for e in chosen], [t.id for t in tasks])
    jobs = [(t, e) for t in tasks for e in chosen]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = [pool.submit(run_exploit, t, e, backend, sandbox_options) for t, e in jobs]
        for future in as_completed(futures):
            cell = future.result()
            report.cells.append(cell)
            if progress is not None:
                progress(cell)
    return report


PTRACE_PROBE = (
    "import ctypes, os, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "child = os.fork()\n"
    "if child == 0:\n"
    "    time.sleep(5)\n"
    "    os._exit(0)\n"
    "ok = libc.ptrace(16, child, None, None) == 0\n"
    "os.kill(child, 9)\n"
    "print('PTRACE', 'allowed' if ok else 'blocked')\n"
)


def ptrace_allowed(backend: str | None = None, sandbox_options: Mapping[str, Any] | None = None) -> bool:
    """Whether a process in this backend's sandbox may ptrace another (a parent its own child:
    allowed unless a seccomp filter or missing capability forbids it)."""
    sandbox = create_sandbox(choose_backend(backend, None), None, **dict(sandbox_options or {}))
    try:
        sandbox.start(sandbox.new_workspace(), "/workspace")
        sandbox.write_file("/workspace/probe.py", PTRACE_PROBE)
        return "PTRACE allowed" in sandbox.run("python3 /workspace/probe.py", 30).output
    finally:
        sandbox.close()
