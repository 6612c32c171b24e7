"""SWE-bench / SWE-Gym instances and R2E-Gym rows, run in the Docker sandbox.

SWE-bench (JSON list or JSON lines): ``repo, instance_id, base_commit, patch, test_patch,
problem_statement, hints_text, version, FAIL_TO_PASS, PASS_TO_PASS, environment_setup_commit``.
The image is SWE-bench's published ``swebench/sweb.eval.{arch}.{instance_id.lower()}:latest`` (a
``__`` in the id becomes ``_1776_``), or the same name without ``swebench/`` (what SWE-bench's
harness tags a local build) where only that one is on the engine; the repository at /testbed becomes the workspace. Resolved = every FAIL_TO_PASS and
PASS_TO_PASS test passes after the test patch is applied.

R2E-Gym (rows): ``repo_name, docker_image, commit_hash, problem_statement, expected_output_json,
parsed_commit_content, ...``; the hidden tests in /r2e_tests are deleted from the agent's container
and run with ``pytest -rA`` when grading; reward 1 only if every status matches
``expected_output_json``. The gold patch, rebuilt from ``parsed_commit_content``
(``tasks/parsed_commit.py``), is the reference solution, as a SWE-bench row's ``patch`` is; a row
whose commit cannot be read still loads, without a reference (``metadata.reference_error`` says why).

The agent sees the problem statement only: never the gold patch, the test patch, the test code
(R2E's ``prompt`` and ``execution_result_content``) or the hints unless asked for (``#hints``).

    tasks="swebench:/data/swe-bench-verified.jsonl"   tasks="r2e:/data/r2e-lite.jsonl"
    options after '#', comma-separated: hints, arch=arm64, image=<tag> (one image for all)
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from collections.abc import Container
from pathlib import Path
from typing import Any

from harness_gym.paths import cache_dir
from harness_gym.sandboxes.docker_support import docker_client
from harness_gym.tasks.base import VERDICT_MODULE, Suite, Task, TaskError, register_loader
from harness_gym.tasks.parsed_commit import ParsedCommitError, gold_patch

RUNNER = Path(__file__).resolve().parent / "graders" / "swebench_runner.py"
SWEBENCH_FIELDS = ("instance_id", "problem_statement", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS")
R2E_FIELDS = ("repo_name", "docker_image", "commit_hash", "problem_statement", "expected_output_json")
# SWE-bench images keep the project's environment in conda env "testbed"; activate it where present
# (a failing `.` would end a POSIX shell, hence the test first)
GRADE_COMMAND = (
    "if [ -f /opt/miniconda3/bin/activate ]; then . /opt/miniconda3/bin/activate testbed; fi; "
    "cd /testbed && python3 -I -S {grader}/runner.py {grader}"
)
GRADER_SCRIPTS = ("runner_config.py", "pytest_report.py")  # copied next to runner.py
# The format runs ``python -m pytest`` from /testbed, which puts /testbed on sys.path (the tests
# import the repository); the runner script itself never has the workspace on its path.
RUNNER_ENV = {"PYTHONSAFEPATH": ""}


PUBLISHED_PREFIX = "swebench/"  # the namespace SWE-bench publishes its instance images under


def swebench_images(instance_id: str, arch: str = "x86_64") -> tuple[str, str]:
    """(the published name, the local build's name) of an instance's image."""
    local = f"sweb.eval.{arch}.{instance_id.lower().replace('__', '_1776_')}:latest"
    return PUBLISHED_PREFIX + local, local


def swebench_image(instance_id: str, arch: str = "x86_64", present: Container[str] = ()) -> str:
    """The image to run: the published name, unless only the local build's name is ``present``."""
    published, local = swebench_images(instance_id, arch)
    return local if local in present and published not in present else published


class LocalImages:
    """The image tags on the Docker engine, listed once at first use; none where no engine answers
    (the published name is then chosen, and a missing image is reported when an episode starts)."""

    def __init__(self) -> None:
        self._tags: set[str] | None = None

    def __contains__(self, tag: object) -> bool:
        if self._tags is None:
            try:
                client = docker_client(None)
                self._tags = {t for image in client.images.list() for t in image.tags}
            except Exception:  # no SDK, no engine: nothing is known to be present
                self._tags = set()
        return tag in self._tags


def _json_list(value: Any, field: str, task_id: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise TaskError(f"task {task_id}: {field} is not a JSON list: {exc}") from exc
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TaskError(f"task {task_id}: {field} must be a list of test names")
    return value


def _test_files(test_patch: str) -> list[str]:
    return sorted({line[len("+++ b/") :].strip() for line in test_patch.splitlines() if line.startswith("+++ b/")})


def _grader_folder(kind: str, task_id: str, spec: dict[str, Any], test_patch: str = "") -> Path:
    digest = hashlib.sha256(json.dumps([spec, test_patch], sort_keys=True).encode()).hexdigest()[:16]
    folder = cache_dir() / kind / f"{task_id}-{digest}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "spec.json").write_text(json.dumps(spec), encoding="utf-8")
    (folder / "test.patch").write_text(test_patch, encoding="utf-8")
    shutil.copy2(RUNNER, folder / "runner.py")
    for name in GRADER_SCRIPTS:
        shutil.copy2(RUNNER.parent / name, folder / name)
    shutil.copy2(VERDICT_MODULE, folder / "verdict.py")  # the runner signs its verdict (signed_verdict)
    return folder


GOLD_PATCH_FILE = "/tmp/.harness-gym-gold.patch"


def gold_patch_solution(patch: str, root: str = "/testbed") -> tuple[dict[str, Any], ...]:
    """The gold patch as a reference solution (one shell call: ``git apply``, else ``patch -p1``),
    what ``tasks check`` replays and ``tasks audit --mutants`` mutates. Never shown to the agent."""
    if not patch.strip():
        return ()
    encoded = base64.b64encode((patch if patch.endswith("\n") else patch + "\n").encode()).decode()
    command = (
        f"cd {root} && echo {encoded} | base64 -d > {GOLD_PATCH_FILE} && "
        f"(git apply {GOLD_PATCH_FILE} 2>/dev/null || patch -p1 < {GOLD_PATCH_FILE}) && rm -f {GOLD_PATCH_FILE}"
    )  # no `exit`: the agent's shell is persistent
    return ({"tool": "execute_bash", "arguments": {"command": command}},)


def swebench_task(row: dict[str, Any], options: dict[str, str], present: Container[str] = ()) -> Task:
    task_id = str(row.get("instance_id") or "?")
    missing = [f for f in SWEBENCH_FIELDS if f not in row]
    if missing:
        raise TaskError(f"task {task_id}: missing {', '.join(missing)}")
    f2p = _json_list(row["FAIL_TO_PASS"], "FAIL_TO_PASS", task_id)
    p2p = _json_list(row["PASS_TO_PASS"], "PASS_TO_PASS", task_id)
    files = _test_files(row["test_patch"])
    if not files:
        raise TaskError(f"task {task_id}: the test patch touches no file")
    spec = {"kind": "swebench", "fail_to_pass": f2p, "pass_to_pass": p2p, "test_paths": files}
    instruction = str(row["problem_statement"]).strip()
    if "hints" in options and row.get("hints_text"):
        instruction += "\n\nHints:\n" + str(row["hints_text"]).strip()
    image = options.get("image") or swebench_image(task_id, options.get("arch", "x86_64"), present)
    return Task(
        id=task_id,
        instruction=instruction,
        mount_path="/testbed",
        image=image,
        workspace_from_image="/testbed",
        grader_files=(_grader_folder("swebench", task_id, spec, row["test_patch"]),),
        grade_command=GRADE_COMMAND,
        grader_env=RUNNER_ENV,
        grader_timeout_s=1800,
        signed_verdict=True,
        solution=gold_patch_solution(str(row.get("patch") or "")),
        metadata={
            "family": "swe-bench",
            "repo": row.get("repo"),
            "version": row.get("version"),
            "base_commit": row.get("base_commit"),
            "restore_files": files,  # restored from the image before the test patch is applied
            "restore_runner_config": True,
        },
    )


def r2e_task(row: dict[str, Any], options: dict[str, str], present: Container[str] = ()) -> Task:
    task_id = f"{row.get('repo_name', '?')}-{str(row.get('commit_hash', ''))[:12]}"
    missing = [f for f in R2E_FIELDS if not row.get(f)]
    if missing:
        raise TaskError(f"task {task_id}: missing {', '.join(missing)}")
    expected = row["expected_output_json"]
    if isinstance(expected, str):
        try:
            expected = json.loads(expected)
        except json.JSONDecodeError as exc:
            raise TaskError(f"task {task_id}: expected_output_json is not JSON: {exc}") from exc
    if not isinstance(expected, dict) or not expected:
        raise TaskError(f"task {task_id}: expected_output_json must map test names to statuses")
    spec = {"kind": "r2e", "expected": expected, "test_paths": ["/r2e_tests"]}
    reference: dict[str, Any] = {}
    patch = ""
    if not row.get("parsed_commit_content"):
        reference["reference_error"] = "the row has no parsed_commit_content"
    else:
        try:
            gold = gold_patch(row["parsed_commit_content"])
        except ParsedCommitError as exc:  # the task still runs; only the audit lacks its reference
            reference["reference_error"] = f"parsed_commit_content: {exc}"
        else:
            patch = gold.patch
            reference["gold_patch_skipped"] = gold.skipped
            if not patch:
                reference["reference_error"] = "the gold commit changes no non-test Python file"
    return Task(
        id=task_id,
        instruction=str(row["problem_statement"]).strip(),
        mount_path="/testbed",
        image=options.get("image") or str(row["docker_image"]),
        workspace_from_image="/testbed",
        hidden_paths=("/r2e_tests",),
        grader_files=(_grader_folder("r2e", task_id, spec),),
        grade_command=GRADE_COMMAND,
        grader_env=RUNNER_ENV,
        grader_timeout_s=1800,
        signed_verdict=True,
        solution=gold_patch_solution(patch),
        metadata={
            "family": "r2e-gym",
            "repo": row["repo_name"],
            "commit": row["commit_hash"],
            "restore_runner_config": True,
            **reference,
        },
    )


def _rows(path: Path) -> list[tuple[int, Any]]:
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        return list(enumerate(json.loads(text), 1))
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append((number, json.loads(line)))
            except json.JSONDecodeError as exc:
                rows.append((number, TaskError(f"line {number}: not JSON ({exc.msg})")))
    return rows


def _loader(build: Any, name: str) -> Any:
    def load(argument: str) -> Suite:
        path_text, _, option_text = argument.partition("#")
        options = dict(item.partition("=")[::2] for item in option_text.split(",") if item)
        path = Path(path_text).expanduser()
        if not path.is_file():
            raise TaskError(f"{name}: {path_text!r} is not a file (expected JSON lines or a JSON list)")
        suite = Suite([])
        present = LocalImages()
        for number, row in _rows(path):
            try:
                if isinstance(row, Exception):
                    raise row
                if not isinstance(row, dict):
                    raise TaskError(f"line {number}: not a JSON object")
                suite.tasks.append(build(row, options, present))
            except TaskError as exc:
                suite.errors.append(f"{path.name}: {exc}")
        return suite

    return load


register_loader("swebench", _loader(swebench_task, "swebench"))
register_loader("r2e", _loader(r2e_task, "r2e"))
