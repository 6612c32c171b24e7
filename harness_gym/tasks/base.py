"""The task model: what the agent must do, the files it starts from, and a hidden grader.

A :class:`Task` is data. Its workspace files are copied into a fresh folder at every reset; its
grader files are shown to nobody until the agent has stopped, and then only to a fresh sandbox
that runs the grade command (with the files at ``grader_mount``, by default a private folder).
Suites are loaded by name (``"builtin"``, ``"clawgym:/path"``, ``"pinchbench:/path"``, ...)
through loaders registered with :func:`register_loader`. A loader reports broken tasks instead
of failing: :func:`validate_suite` lists them, :func:`load_tasks` warns and goes on.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import secrets
import shlex
import shutil
import tempfile
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_gym.budget import OUTPUT_LIMIT_CHARS
from harness_gym.errors import TaskError
from harness_gym.paths import cache_dir
from harness_gym.sandboxes import isolation
from harness_gym.sandboxes.base import GRADER_DIR, GRADER_KEY_DIR, Sandbox, SandboxError, check_mount_path
from harness_gym.sandboxes.docker_support import extract_image_path
from harness_gym.tasks.graders.runner_config import copy_originals
from harness_gym.tasks.judge import apply_judge
from harness_gym.tool_calls import parse_action

DEFAULT_GRADE_COMMAND = "python3 {grader}/grade.py"
PAYLOAD_FILE = "payload.json"
VERDICT_KEY_FILE = ".verdict-key"  # per-grading HMAC key of a signing grader (see parse_grader_output)
# The harness's signer for graders that cannot sign (sign_output) and the verdict module it uses,
# copied into the grader's folder under names no task's file has
SIGNER = Path(__file__).resolve().parent / "graders" / "signed_output.py"
VERDICT_MODULE = Path(__file__).resolve().parent / "builtin" / "_shared" / "verdict.py"
SIGNER_NAME, VERDICT_MODULE_NAME = ".harness_gym_signer.py", ".harness_gym_verdict.py"
OUTPUT_SIGNATURE_KEY = "harness_gym_output_signature"  # the signer's last line (graders/signed_output.py)


@dataclass(frozen=True)
class Task:
    """One task. ``solution`` lists canonical tool calls (``{"tool", "arguments"}``) that solve it.

    ``grader_payload``: give the grader the episode as JSON (task, final message, transcript in
    OpenClaw's event shape) at ``<grader folder>/payload.json``, named by ``OPENCLAW_REWARD_PAYLOAD``.
    ``judge``: ``None``, or the grading type (``llm_judge`` / ``hybrid``) and rubric for an LLM judge.
    ``signed_verdict``: the grader reads a fresh key from ``<grader folder>/.harness-gym-key/.verdict-key`` (and deletes
    it before any workspace code runs) and signs its verdict; any other line is not a verdict.
    ``sign_output``: for a grader that cannot sign (ClawGym's ``reward.sh``): the harness's signer
    (graders/signed_output.py) runs the grade command, refuses a grading that leaves a process
    alive, and signs the command's output; only the text it signed is read.
    """

    id: str
    instruction: str
    mount_path: str = "/workspace"
    workspace_dir: Path | None = None
    grader_files: tuple[Path, ...] = ()
    grade_command: str = DEFAULT_GRADE_COMMAND
    grader_timeout_s: float = 120.0
    solution: tuple[Mapping[str, Any], ...] = ()
    split: str = "train"
    metadata: Mapping[str, Any] = field(default_factory=dict)
    image: str | None = None  # a container image the task must run in (Docker backend)
    grader_mount: str = GRADER_DIR
    grader_payload: bool = False
    grader_env: Mapping[str, str] = field(default_factory=dict)
    judge: Mapping[str, Any] | None = None
    time_limit_s: float | None = None  # wall-clock limit of an episode (truncated, and graded, beyond it)
    workspace_from_image: str | None = None  # the workspace is this folder of ``image`` (e.g. /testbed)
    hidden_paths: tuple[str, ...] = ()  # paths of ``image`` the agent must not see (hidden tests)
    world: str | None = None  # the world its sandbox runs on (harness_gym.worlds); None: the host's folders
    signed_verdict: bool = False  # accept only a verdict line signed with the key written for this grading
    sign_output: bool = False  # the harness's signer runs the grade command and signs its output
    # files of the grader folder the grader reads and removes before graded code runs (a hidden test's
    # expectations): shown in its one writable subfolder, GRADER_KEY_DIR, as the key is, since the rest
    # of the folder is read-only in the grading sandbox
    grader_secrets: tuple[str, ...] = ("hidden_tests*.json",)

    def __post_init__(self) -> None:
        """Refuse NaN, infinite, zero and negative durations, and a workspace that would be HOME or
        cover a system folder, whichever loader made the task."""
        for name in ("grader_timeout_s", "time_limit_s"):
            value = getattr(self, name)
            if value is None and name == "time_limit_s":
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise TaskError(f"task {self.id}: {name} must be a positive finite number of seconds, got {value!r}")
        try:
            check_mount_path(self.mount_path)
        except SandboxError as exc:
            raise TaskError(f"task {self.id}: {exc}") from None

    def materialize(self, destination: Path) -> None:
        """Copy the starting workspace into ``destination`` (an empty folder)."""
        if self.workspace_from_image is not None and self.image is not None:
            shutil.copytree(
                image_folder(self.image, self.workspace_from_image), destination, dirs_exist_ok=True, symlinks=True
            )
        if self.workspace_dir is not None:
            shutil.copytree(self.workspace_dir, destination, dirs_exist_ok=True, symlinks=True)

    def workspace_sources(self) -> tuple[Path, ...]:
        """The folders :meth:`materialize` copies from (what a shared copy-on-write layer is named by)."""
        sources: list[Path] = []
        if self.workspace_from_image is not None and self.image is not None:
            sources.append(image_folder(self.image, self.workspace_from_image))
        if self.workspace_dir is not None:
            sources.append(Path(self.workspace_dir))
        return tuple(sources)

    def grade(self, sandbox: Sandbox, transcript: Sequence[Mapping[str, Any]] | None = None) -> GradeResult:
        """Stop the agent and grade the workspace in a fresh sandbox."""
        mount = self.grader_mount.replace("{workspace}", self.mount_path)
        env = dict(self.grader_env)
        with isolation.registered_folder("harness-gym-payload-") as extra:  # a kill -9 leaves no key
            files = _secrets_apart(self.grader_files, self.grader_secrets, Path(extra))
            restore = self.metadata.get("restore_files") or ()
            original = self.original_workspace() if restore or self.metadata.get("restore_runner_config") else None
            if original is not None:
                files.append(
                    _pristine(Path(extra), original, restore, bool(self.metadata.get("restore_runner_config")))
                )
            if self.grader_payload:
                path = Path(extra) / PAYLOAD_FILE
                path.write_text(json.dumps(self.payload(transcript or []), ensure_ascii=False), encoding="utf-8")
                files.append(path)
                env["OPENCLAW_REWARD_PAYLOAD"] = f"{mount}/{PAYLOAD_FILE}"
            key, command = None, self.grade_command
            if self.signed_verdict or self.sign_output:
                key = secrets.token_hex(32).encode()
                keys = Path(extra) / "key"  # a folder contributes its contents: GRADER_KEY_DIR/.verdict-key
                (keys / GRADER_KEY_DIR).mkdir(parents=True)
                (keys / GRADER_KEY_DIR / VERDICT_KEY_FILE).write_bytes(key)
                files.append(keys)
            if self.sign_output:
                for source, name in ((SIGNER, SIGNER_NAME), (VERDICT_MODULE, VERDICT_MODULE_NAME)):
                    shutil.copyfile(source, Path(extra) / name)
                    files.append(Path(extra) / name)
                # the signer's output fits the sandbox's cap, so the host never cuts what it signed
                limit = int(getattr(sandbox, "output_limit_chars", OUTPUT_LIMIT_CHARS))
                command = f'python3 -I {{grader}}/{SIGNER_NAME} {{grader}} "$0" {limit} {shlex.quote(command)}'
            result = sandbox.grade(files, command, self.grader_timeout_s, env, mount)
        stderr = str(result.extra.get("stderr", ""))
        if result.timed_out:
            graded = GradeResult(0.0, {}, "", f"task {self.id}: the grader timed out after {self.grader_timeout_s:g} s")
        elif self.sign_output and key is not None:
            graded = parse_signed_output(self.id, result.output, result.exit_code, key)
        else:
            graded = parse_grader_output(self.id, result.output, result.exit_code, key)
        graded.log = result.output + (f"\n--- grader stderr ---\n{stderr}" if stderr else "")
        if self.judge is not None:
            graded = apply_judge(self, graded, transcript or [])
        return graded

    def original_workspace(self) -> Path | None:
        """The folder the workspace starts as (an image's folder, or the task's own files)."""
        if self.workspace_from_image is not None and self.image is not None:
            return image_folder(self.image, self.workspace_from_image)
        return self.workspace_dir

    def payload(self, transcript: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """What a chat-style grader reads: the task, the agent's final message and the transcript."""
        return {
            "task_id": self.id,
            "user_query": self.instruction,
            "metadata": dict(self.metadata),
            "final_message": final_message(transcript),
            "transcript": openclaw_transcript(transcript),
        }


def _secrets_apart(grader_files: Sequence[Path], patterns: Sequence[str], extra: Path) -> list[Path]:
    """The grader files with the top-level files of a folder that match ``patterns`` moved into
    GRADER_KEY_DIR (copies in ``extra``; a folder contributes its contents, as in staging)."""
    files: list[Path] = []
    for index, source in enumerate(grader_files):
        secret = sorted(p for pattern in patterns for p in Path(source).glob(pattern)) if Path(source).is_dir() else []
        if not secret:
            files.append(Path(source))
            continue
        copy, keys = extra / f"grader-{index}", extra / f"secrets-{index}" / GRADER_KEY_DIR
        shutil.copytree(source, copy)
        keys.mkdir(parents=True)
        for path in secret:
            (copy / path.name).replace(keys / path.name)
        files += [copy, keys.parent]
    return files


def _pristine(folder: Path, original: Path, paths: Sequence[str], runner_config: bool = False) -> Path:
    """The original versions of ``paths`` under ``folder/pristine/`` and, with ``runner_config``, of the
    test runner's configuration files under ``folder/config/`` (what the grader restores)."""
    root = folder / "restore"
    if runner_config:
        copy_originals(str(original), str(root / "config"))
    for relative in paths:
        source = original / relative
        if source.is_file():
            target = root / "pristine" / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    (root / "pristine").mkdir(parents=True, exist_ok=True)
    return root


def reference_output_solution(folder: Path | None, mount_path: str) -> tuple[dict[str, Any], ...]:
    """A reference solution that leaves the files of ``folder`` (what a correct run leaves in the
    workspace, by relative path) in the workspace: one shell call per file. For suites that ship a
    reference output but no solution (``tasks check`` replays it; ``tasks audit --mutants`` perturbs it)."""
    if folder is None or not folder.is_dir():
        return ()
    import base64
    import shlex

    steps = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink()):
        relative = path.relative_to(folder).as_posix()
        target = shlex.quote(f"{mount_path.rstrip('/')}/{relative}")
        encoded = base64.b64encode(path.read_bytes()).decode()
        command = f'mkdir -p "$(dirname {target})" && echo {encoded} | base64 -d > {target}'
        steps.append({"tool": "execute_bash", "arguments": {"command": command}})
    return tuple(steps)


def image_folder(image: str, path: str) -> Path:
    """A folder of a container image, extracted once into the cache and reused."""
    root = cache_dir() / "images"
    root.mkdir(parents=True, exist_ok=True)
    name = hashlib.sha256(f"{image}:{path}".encode()).hexdigest()[:20]
    target, done = root / name, root / f"{name}.complete"
    if not done.exists():
        staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=root))
        extract_image_path(image, path, staging)
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
        done.touch()
    return target


def final_message(transcript: Sequence[Mapping[str, Any]]) -> str:
    """The text of the agent's last message, tool-call markup removed."""
    for message in reversed(transcript):
        if message.get("role") == "assistant":
            return parse_action(message.get("content") or "").text
    return ""


def openclaw_transcript(transcript: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The transcript as OpenClaw session events: ``{"type": "message", "message": {"role",
    "content": [parts]}}`` with ``text`` and ``toolCall`` parts, and ``toolResult`` messages.

    Tool names are the canonical ones (``execute_bash``, ``file_editor``, ...) whatever the harness
    called them, with the harness's own name beside them (``harnessName`` / ``harnessToolName``),
    and every result carries the id of its call: the same behaviour grades the same under T0-T2.
    """
    events: list[dict[str, Any]] = []
    for message in transcript:
        role, text = message.get("role"), message.get("content") or ""
        if role == "assistant":
            calls = message.get("calls")
            parsed = parse_action(
                {"role": "assistant", "content": text, "tool_calls": message.get("tool_calls")}
                if message.get("tool_calls")
                else text
            )
            if calls is None:  # a transcript not recorded by HarnessEnv: names as written
                calls = [
                    {"id": c.id, "name": c.name, "canonical": c.name, "arguments": c.arguments} for c in parsed.calls
                ]
            parts: list[dict[str, Any]] = [{"type": "text", "text": parsed.text}] if parsed.text else []
            parts += [
                {
                    "type": "toolCall",
                    "id": c["id"],
                    "name": c["canonical"],
                    "harnessName": c["name"],
                    "arguments": c["arguments"],
                }
                for c in calls
            ]
            events.append({"type": "message", "message": {"role": "assistant", "content": parts}})
        elif role == "tool":
            name = message.get("name")
            events.append(
                {
                    "type": "message",
                    "message": {
                        "role": "toolResult",
                        "toolCallId": message.get("tool_call_id"),
                        "toolName": message.get("canonical_name", name),
                        "harnessToolName": name,
                        "content": [{"type": "text", "text": text}],
                    },
                }
            )
        elif role == "user":
            events.append({"type": "message", "message": {"role": "user", "content": [{"type": "text", "text": text}]}})
    return events


@dataclass
class GradeResult:
    """Reward in [0, 1], its breakdown, the grader's log, and an error if grading failed."""

    reward: float
    breakdown: dict[str, Any]
    log: str = ""
    error: str | None = None


def verdict_signature(key: bytes, reward: Any, breakdown: Any) -> str:
    """HMAC-SHA256 of the canonical verdict, as a signing grader computes it (the in-sandbox twin is
    ``sign`` in tasks/builtin/_shared/verdict.py, standard library only; keep the two identical)."""
    body = json.dumps({"reward": reward, "breakdown": breakdown}, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def _signed_verdict(task_id: str, output: str, key: bytes) -> GradeResult:
    """The one stdout line that carries a valid signature; every other line is ignored."""
    for line in reversed(output.splitlines()):
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(value, dict) or not isinstance(value.get("signature"), str):
            continue
        expected = verdict_signature(key, value.get("reward"), value.get("breakdown"))
        if hmac.compare_digest(expected, value["signature"]):
            verified = {"reward": value.get("reward"), "breakdown": value.get("breakdown")}
            return parse_grader_output(task_id, json.dumps(verified), 0)
    return GradeResult(0.0, {}, output, f"task {task_id}: the grader printed no verdict signed with this grading's key")


def parse_signed_output(task_id: str, output: str, exit_code: int | None, key: bytes) -> GradeResult:
    """The verdict of a grader run by the harness's signer: only the text its signature line covers
    is read (a line anything else wrote, before or after, breaks the signature or is ignored)."""
    if exit_code != 0:
        return parse_grader_output(task_id, output, exit_code)
    start = len(output)
    while (start := output.rfind(OUTPUT_SIGNATURE_KEY, 0, start)) >= 0:
        line_start = output.rfind("\n", 0, start) + 1
        line = output[line_start:].split("\n", 1)[0]
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(value, dict) or not isinstance(value.get(OUTPUT_SIGNATURE_KEY), str):
            continue
        text, status = output[:line_start], value.get("status")
        body = f"{status}\n{text}".encode()
        if isinstance(status, int) and hmac.compare_digest(
            hmac.new(key, body, hashlib.sha256).hexdigest(), value[OUTPUT_SIGNATURE_KEY]
        ):
            return parse_grader_output(task_id, text, status)
    return GradeResult(
        0.0, {}, output, f"task {task_id}: the grader's output carries no signature of this grading's key"
    )


def parse_grader_output(task_id: str, output: str, exit_code: int | None, key: bytes | None = None) -> GradeResult:
    """The verdict, from the grader's stdout only. A grader that exited non-zero or was killed is a
    grader error (reward 0, ``error`` set), whatever it printed. With ``key`` (a signing grader) only
    the line signed with it counts. Otherwise the last non-empty line is a float in [0, 1] or
    ``{"reward": float, "breakdown": {...}}``; with a bare float, an earlier line holding a JSON object
    of sub-scores becomes the breakdown."""
    if exit_code != 0:
        how = "was killed" if exit_code is None or exit_code < 0 else f"exited with status {exit_code}"
        if exit_code is not None and exit_code > 128:
            how += f" (signal {exit_code - 128}?)"
        return GradeResult(0.0, {}, output, f"task {task_id}: the grader {how}; a failed grader scores 0")
    if key is not None:
        return _signed_verdict(task_id, output, key)
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    if not lines:
        return GradeResult(0.0, {}, output, f"task {task_id}: the grader printed nothing on stdout")
    last = lines[-1]
    breakdown: dict[str, Any] = {}
    try:
        value = json.loads(last)
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict) and "reward" in value:
        breakdown = value.get("breakdown") or {}
        value = value["reward"]
    elif isinstance(value, (int, float)):
        for line in reversed(lines[:-1]):
            try:
                candidate = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(candidate, dict):
                breakdown = candidate
                break
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return GradeResult(0.0, {}, output, f"task {task_id}: the grader's last line is not a reward: {last[:200]!r}")
    if not 0.0 <= value <= 1.0:
        return GradeResult(0.0, breakdown, output, f"task {task_id}: the grader's reward {value} is outside [0, 1]")
    return GradeResult(float(value), breakdown, output)


# ---------------------------------------------------------------------------- suites


@dataclass
class Suite:
    """A loaded suite: its good tasks, and one message per broken task."""

    tasks: list[Task]
    errors: list[str] = field(default_factory=list)


Loader = Callable[[str], "Suite | list[Task]"]
_LOADERS: dict[str, Loader] = {}


def register_loader(scheme: str, loader: Loader) -> None:
    """Make ``tasks="<scheme>:<argument>"`` load a suite (a loader returns a Suite or a task list)."""
    _LOADERS[scheme] = loader


def validate_suite(name: str) -> Suite:
    """Load a suite by name, keeping the list of broken tasks."""
    scheme, _, argument = name.partition(":")
    try:
        loader = _LOADERS[scheme]
    except KeyError:
        raise TaskError(
            f"unknown task suite {name!r}; known suites: {sorted(_LOADERS)} (e.g. 'builtin:train')"
        ) from None
    loaded = loader(argument)
    return loaded if isinstance(loaded, Suite) else Suite(list(loaded))


def load_tasks(tasks: str | Sequence[Task] | None = None) -> list[Task]:
    """Resolve an environment's ``tasks`` argument: a suite name like ``builtin:train``, or tasks.
    Broken tasks of a suite are skipped with a warning naming each."""
    if tasks is None:
        tasks = "builtin"
    if not isinstance(tasks, str):
        loaded = list(tasks)
        if not loaded or not all(isinstance(t, Task) for t in loaded):
            raise TaskError("tasks must be a suite name such as 'builtin' or a non-empty sequence of Task objects")
        return loaded
    suite = validate_suite(tasks)
    for error in suite.errors:
        warnings.warn(f"skipping a broken task: {error}", stacklevel=2)
    if not suite.tasks:
        raise TaskError(
            f"task suite {tasks!r} has no usable task" + (f" ({len(suite.errors)} broken)" if suite.errors else "")
        )
    return suite.tasks
