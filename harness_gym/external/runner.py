"""One episode of a real agent CLI: the CLI runs unmodified in the task's bubblewrap sandbox, its
model is a policy behind the recording proxy, and the task's hidden grader scores the workspace.

The sandbox keeps no network: the proxy listens on a unix socket in a host folder shown read-only
inside, and :mod:`.forwarder` (started in the sandbox) gives the CLI a TCP endpoint on its own
loopback. The CLI's own permission system is off (ours is the boundary); HOME is the sandbox's
fresh private one, filled with the CLI's config files; its install tree is shown read-only at the
same absolute path. Budgets on agent turns, completion tokens and wall time are enforced from the
host: a CLI past one is killed with its sandbox's processes, and the episode is an error, never
a pass (as is a crash, a CLI that never called the model, or a missing completion signal).
"""

from __future__ import annotations

import json
import os
import shlex
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from harness_gym.external.catalog import ExternalCli, load_cli
from harness_gym.external.install import require_install
from harness_gym.external.proxy import ModelProxy
from harness_gym.external.proxy.recording import call_results
from harness_gym.external.validity import count_valid_calls
from harness_gym.llm_client import says_context_overflow
from harness_gym.sandboxes.base import SANDBOX_HOME, create_sandbox
from harness_gym.sandboxes.options import SandboxOptions
from harness_gym.tasks.base import Task

SOCKET_DIR = "/run/harness-gym-proxy"  # where the proxy's socket folder is shown in the sandbox
SOCKET_NAME = "proxy.sock"
WORK_DIR = "/tmp/.harness-gym-external"  # the runner's own files inside the sandbox (forwarder, output)
PORT = 41789
FORWARDER_CONNECTIONS = 16  # connections one sandbox may hold open to the shared proxy at once
DEFAULT_MAX_TURNS = 30
SIDE_REQUESTS = 5  # requests a rollout may make beyond its agent turns (titles, token counts)
DEFAULT_WALL_S = 900.0
OUTPUT_TAIL_CHARS = 20_000
_EXIT_MARK = "__HG_EXTERNAL_EXIT="


@dataclass
class ExternalEpisode:
    """An episode's results-file record, the canonical transcript graders read, and the proxy's records."""

    record: dict[str, Any]
    transcript: list[dict[str, Any]]
    proxy_records: list[dict[str, Any]] = field(default_factory=list)


def run_external_episode(
    cli: str | ExternalCli,
    task: Task,
    policy: Any,
    *,
    max_turns: int = DEFAULT_MAX_TURNS,
    max_tokens: int | None = None,
    wall_s: float = DEFAULT_WALL_S,
    proxy: Any | None = None,
    sandbox_options: Mapping[str, Any] | None = None,
    episode_id: str | None = None,
    run: int = 0,
    seed: int = 0,
) -> ExternalEpisode:
    """Run ``cli`` (an id such as ``external:claude-code``) on ``task`` with ``policy`` answering its
    model requests, and grade the workspace. A missing install or an unknown id raises before any
    sandbox starts; everything after that becomes a record (an error is a failed episode)."""
    spec = load_cli(cli)
    install = require_install(spec)
    if max_turns < 1 or wall_s <= 0:
        raise ValueError(f"max_turns must be >= 1 and wall_s > 0, got {max_turns} and {wall_s}")
    started = time.time()
    base = {
        "episode_id": episode_id or f"{spec.id}|{task.id}|{run}",
        "harness": spec.id,
        "class": "external",
        "config": None,
        "task_id": task.id,
        "run": run,
        "seed": seed,
        "role": "model",
        "agent": getattr(policy, "name", type(policy).__name__),
        "spec_hash": spec.digest,
    }
    with _proxy_for(proxy) as (model_proxy, socket_folder):
        # the proxy refuses requests past the turns and a few side requests at once; the watch then kills
        channel = model_proxy.open_rollout(
            policy,
            max_requests=max_turns + SIDE_REQUESTS,
            max_tokens=max_tokens,
            renamed_calls=tuple(spec.data.get("refused_calls_renamed_to") or ()),
        )
        try:
            return _episode(
                spec, install, task, channel, socket_folder, base, started, max_turns, wall_s, sandbox_options
            )
        finally:
            channel.close()


class _proxy_for:
    """The caller's proxy (its socket's folder is shown to the sandbox), else a private one for this episode."""

    def __init__(self, proxy: Any | None) -> None:
        self.given = proxy
        self.owned: Any | None = None
        self.folder: tempfile.TemporaryDirectory[str] | None = None

    def __enter__(self) -> tuple[Any, Path]:
        if self.given is not None:
            path = getattr(self.given, "socket_path", None)
            if path is None:
                raise ValueError(
                    "the proxy must listen on a unix socket (ModelProxy(socket_path)): the sandbox has no network"
                )
            return self.given, Path(path).parent
        self.folder = tempfile.TemporaryDirectory(prefix="hg-proxy-")
        folder = Path(self.folder.name)
        folder.chmod(0o711)  # the sandbox runs as another uid: it may pass through, not list
        self.owned = ModelProxy(folder / SOCKET_NAME)
        self.owned.start()
        return self.owned, folder

    def __exit__(self, *exc: object) -> None:
        if self.owned is not None:
            self.owned.close()
        if self.folder is not None:
            self.folder.cleanup()


def _episode(
    spec: ExternalCli,
    install: Path,
    task: Task,
    channel: Any,
    socket_folder: Path,
    base: dict[str, Any],
    started: float,
    max_turns: int,
    wall_s: float,
    sandbox_options: Mapping[str, Any] | None,
) -> ExternalEpisode:
    options = cli_sandbox_options(spec, sandbox_options, install, socket_folder)
    sandbox = create_sandbox("bubblewrap", None, **options.explicit())
    watch = _Watch(channel, sandbox, max_turns)
    error: tuple[str, str] | None = None
    exit_code: int | None = None
    completed = False
    output = ""
    cli_s = 0.0
    launched = time.time()
    try:
        workspace = sandbox.new_workspace()
        task.materialize(workspace)
        sandbox.start(workspace, task.mount_path, task.hidden_paths)
        rendered = spec.render(_values(spec, install, task, channel.secret, max_turns))
        _write(sandbox, f"{WORK_DIR}/forwarder.py", _forwarder_source())
        for relative, content in rendered["files"].items():
            _write(sandbox, f"{SANDBOX_HOME}/{relative}", content)
        launched = time.time()
        watch.start()
        result = sandbox.run(_command(spec, install, task, rendered), timeout_s=wall_s)
        cli_s = time.time() - launched
        watch.stop()
        exit_code = _exit_code(result.output)
        error = _stopped(spec, channel, watch)
        if error is None and result.timed_out:
            error = (
                "budget",
                f"{spec.id} ran past its wall-time budget of {wall_s:g} s; it was killed with its sandbox",
            )
        elif error is None and "HG-FORWARDER-FAILED" in result.output:
            error = ("env", "the in-sandbox forwarder to the model proxy did not start")
        elif error is None:
            output = _tail(sandbox, f"{WORK_DIR}/stdout")
            completed = _completed(spec, sandbox, output)
            if channel.agent_turns == 0:
                error = (
                    "cli",
                    f"{spec.id} never called the model (exit {exit_code}): {_tail(sandbox, f'{WORK_DIR}/stderr')[-500:]}",
                )
            elif exit_code not in spec.data["completion"]["exit_codes"]:
                error = (
                    "cli",
                    f"{spec.id} exited with status {exit_code}: {_tail(sandbox, f'{WORK_DIR}/stderr')[-500:]}",
                )
            elif not completed:
                error = ("cli", f"{spec.id} exited without its completion signal")
        transcript = canonical_transcript(spec, channel.records)
        graded = None if error else task.grade(sandbox, transcript)
        grade_s = time.time() - launched - cli_s
    except Exception as exc:  # the sandbox, the task or the proxy failed: a record, not a crash
        watch.stop()
        transcript = canonical_transcript(spec, channel.records)
        # a run the watch stopped may end in an exception: the watch's reason is the cause
        error = _stopped(spec, channel, watch) or ("env", f"{type(exc).__name__}: {exc}")
        graded, grade_s = None, 0.0
    finally:
        watch.stop()
        sandbox.close()
    if error is None and graded is not None and graded.error:
        error = ("grader", f"grader: {graded.error}")
    record = _record(
        spec,
        base,
        channel,
        transcript,
        graded,
        error,
        (started, launched),
        cli_s,
        grade_s,
        exit_code,
        completed,
        output,
    )
    return ExternalEpisode(record, transcript, [r.to_json() for r in channel.records])


def cli_sandbox_options(
    spec: ExternalCli, sandbox_options: Mapping[str, Any] | None, install: Path, socket_folder: Path
) -> SandboxOptions:
    """The CLI's sandbox: its memory cap (cgroup) and its address-space limit (Node CLIs reserve
    tens of GiB they never touch) from its file, under the caller's options; the install tree and
    the proxy's socket folder shown read-only."""
    defaults = {"memory_mb": int(spec.data.get("memory_mb", 4096))}
    if "address_space_mb" in spec.data:
        defaults["address_space_mb"] = int(spec.data["address_space_mb"])
    options = SandboxOptions.from_mapping(sandbox_options, **defaults)
    binds = {**(options.extra_ro_binds or {}), str(install): str(install), str(socket_folder): SOCKET_DIR}
    return SandboxOptions.from_mapping({**options.explicit(), "extra_ro_binds": binds})


def _stopped(spec: ExternalCli, channel: Any, watch: _Watch) -> tuple[str, str] | None:
    """The episode's error when the policy failed or a budget was exceeded, else None."""
    if getattr(channel, "tampered", None):  # before all else: a forged history may break the CLI too
        return ("tampering", f"{channel.tampered}; the episode is an error")
    failed = channel.failed
    exceeded = watch.reason or channel.exceeded  # the CLI may exit on a 429 before the watch looks
    if failed is not None and says_context_overflow(failed):  # an outcome, as for every harness
        return ("context_overflow", f"the prompt outgrew the model's context; {spec.id} was stopped: {failed}")
    if failed is not None:  # Claude Code retries a 500 silently: its exit says nothing
        return ("policy", f"{failed}; {spec.id} was stopped and the episode is an error")
    if exceeded is not None:
        killed = "; it was killed with its sandbox" if watch.reason is not None else ""
        return ("budget", f"{spec.id} exceeded its budget: {exceeded}{killed}")
    return None


class _Watch:
    """A host thread that kills the sandbox's processes when a budget the proxy counts is exceeded."""

    def __init__(self, channel: Any, sandbox: Any, max_turns: int) -> None:
        self.channel, self.sandbox, self.max_turns = channel, sandbox, max_turns
        self.reason: str | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hg-external-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._done.wait(0.05):
            reason = self.channel.exceeded or self.channel.failed
            if reason is None and self.channel.agent_turns > self.max_turns:
                reason = f"more than {self.max_turns} agent turns"
            if reason is not None:
                self.reason = reason
                self.sandbox.interrupt()
                return


def _values(spec: ExternalCli, install: Path, task: Task, secret: str, max_turns: int) -> dict[str, str]:
    return {
        "task": task.instruction,
        "model": spec.model,
        "max_turns": str(max_turns),
        "origin": f"http://127.0.0.1:{PORT}",
        "api_key": secret,
        "home": SANDBOX_HOME,
        "workspace": task.mount_path,
        "install": str(install),
        "entry": str(install / spec.data["entry"]),
    }


def _command(spec: ExternalCli, install: Path, task: Task, rendered: Mapping[str, Any]) -> str:
    """The shell command that starts the forwarder, then the CLI with its environment, in the workspace."""
    env = dict(rendered["env"])
    bins = [str(install / "node/node_modules/.bin"), str(install / "node_modules/.bin"), str(install / "venv/bin")]
    env["PATH"] = ":".join([*(b for b in bins if os.path.isdir(b)), "/usr/local/bin:/usr/bin:/bin"])
    if (install / "python/lib").is_dir():  # a copied interpreter finds its libpython here
        env["LD_LIBRARY_PATH"] = str(install / "python/lib")
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    argv = " ".join(shlex.quote(a) for a in rendered["argv"])
    stdin = "</dev/null" if spec.data.get("stdin_null", True) else ""
    socket = f"{SOCKET_DIR}/{SOCKET_NAME}"
    return (
        f"cd {shlex.quote(task.mount_path)} || exit 97\n"
        f"rm -f {WORK_DIR}/ready; python3 {WORK_DIR}/forwarder.py 127.0.0.1 {PORT} {socket} {WORK_DIR}/ready "
        f"{FORWARDER_CONNECTIONS} >{WORK_DIR}/forwarder.log 2>&1 &\n"
        "__hg_fwd=$!\n"
        f"for __hg_i in $(seq 200); do [ -e {WORK_DIR}/ready ] && break; sleep 0.05; done\n"
        f"if [ ! -e {WORK_DIR}/ready ]; then echo HG-FORWARDER-FAILED; cat {WORK_DIR}/forwarder.log; "
        "kill $__hg_fwd 2>/dev/null; else\n"
        f"(export {exports}; exec {argv}) {stdin} >{WORK_DIR}/stdout 2>{WORK_DIR}/stderr\n"
        f'echo "{_EXIT_MARK}$?"; kill $__hg_fwd 2>/dev/null; fi'
    )


def _exit_code(output: str) -> int | None:
    for line in reversed(output.splitlines()):
        if line.startswith(_EXIT_MARK):
            try:
                return int(line[len(_EXIT_MARK) :])
            except ValueError:
                return None
    return None


def _completed(spec: ExternalCli, sandbox: Any, output: str) -> bool:
    """Whether the CLI gave its completion signal (a result line on stdout, a result file)."""
    completion = spec.data["completion"]
    if "result_line" in completion:
        wanted = completion["result_line"]
        for line in reversed(output.splitlines()):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and all(event.get(k) == v for k, v in wanted.items()):
                return True
        try:  # a single pretty-printed JSON document (OpenClaw's envelope)
            document = json.loads(output)
            return isinstance(document, dict) and all(document.get(k) == v for k, v in wanted.items())
        except ValueError:
            return False
    if "result_file" in completion:
        rule = completion["result_file"]
        try:
            value: Any = json.loads(_tail(sandbox, f"{SANDBOX_HOME}/{rule['path']}", limit=10_000_000))
            for key in str(rule["key"]).split("."):
                value = value[key]
        except (ValueError, KeyError, TypeError):
            return False
        return bool(value == rule["equals"])
    return True


def _write(sandbox: Any, path: str, content: str) -> None:
    result = sandbox.write_file(path, content)
    if result.exit_code != 0:
        raise RuntimeError(f"could not write {path} in the sandbox: {result.output[-300:]}")


def _tail(sandbox: Any, path: str, limit: int = OUTPUT_TAIL_CHARS) -> str:
    result = sandbox.run(f"tail -c {limit} {shlex.quote(path)} 2>/dev/null", timeout_s=30)
    return result.output if result.exit_code == 0 else ""


def _forwarder_source() -> str:
    return resources.files("harness_gym").joinpath("external/forwarder.py").read_text(encoding="utf-8")


def canonical_transcript(spec: ExternalCli, records: Sequence[Any]) -> list[dict[str, Any]]:
    """The conversation as graders read it, built from the proxy's own records: the first agent
    request's system and user messages, then each turn's recorded policy reply (each call with the
    CLI's tool name, its canonical name and role) and the tool results the next request carries for
    those calls, matched by call id. The history a CLI sends passes through the sandbox, where the
    agent can rewrite it; a call no reply made never enters this transcript (``RolloutChannel.verify``
    flags it), so a transcript-reading grader scores only what the policy did."""
    turns = [r for r in records if not r.side and r.policy_request is not None and r.policy_reply is not None]
    if not turns:
        return []
    transcript: list[dict[str, Any]] = []
    for message in turns[0].policy_request.messages:
        if message.get("role") not in ("system", "user"):
            break
        transcript.append({"role": message.get("role"), "content": message.get("content") or ""})
    results = call_results(records)
    for record in turns:
        reply = record.policy_reply
        calls = [
            {
                "id": c["id"],
                "name": c["name"],
                "canonical": spec.canonical(c["name"]),
                "role": spec.role(c["name"]),
                "arguments": _arguments(c["arguments"]),
            }
            for c in reply.tool_calls
        ]
        transcript.append({"role": "assistant", "content": reply.content or "", "calls": calls})
        for call in reply.tool_calls:
            if call["id"] in results:
                transcript.append(
                    {
                        "role": "tool",
                        "content": results[call["id"]],
                        "name": call["name"],
                        "canonical_name": spec.canonical(call["name"]),
                        "tool_call_id": call["id"],
                    }
                )
    return transcript


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except ValueError:
            return raw
    return raw


def _record(
    spec: ExternalCli,
    base: Mapping[str, Any],
    channel: Any,
    transcript: Sequence[Mapping[str, Any]],
    graded: Any,
    error: tuple[str, str] | None,
    times: tuple[float, float],
    cli_s: float,
    grade_s: float,
    exit_code: int | None,
    completed: bool,
    output: str,
) -> dict[str, Any]:
    """The results-file line, in the bench episode format (``class: external``)."""
    records = list(channel.records)
    agent = [r for r in records if not r.side]
    validity = count_valid_calls(spec, records)
    calls = [c for m in transcript if m.get("role") == "assistant" for c in m.get("calls", [])]
    by_role: dict[str, int] = {}
    for call in calls:
        by_role[call["role"]] = by_role.get(call["role"], 0) + 1
    started, launched = times
    first = min((r.started for r in records), default=None)
    reward = 0.0 if error or graded is None else float(graded.reward)
    overflow = error[1] if error and error[0] == "context_overflow" else None
    if overflow:  # not an error: the episode's outcome, a failure (as the bench records it for every harness)
        error = None
    prompt = sum(r.policy_reply.prompt_tokens for r in records if r.policy_reply is not None)
    completion = sum(r.policy_reply.completion_tokens for r in records if r.policy_reply is not None)
    outcome = "error" if error else "context_overflow" if overflow else ("passed" if reward >= 1.0 else "failed")
    return {
        **base,
        "reward": reward,
        "passed": outcome == "passed",
        "outcome": outcome,
        "breakdown": dict(graded.breakdown) if graded is not None else {},
        "grader_error": graded.error if graded is not None else None,
        "steps": len(agent),
        "terminated": error is None and not overflow,
        "truncated": bool(overflow or (error and error[0] == "budget")),
        "truncation_reason": overflow or (error[1] if error and error[0] == "budget" else None),
        "tool_calls": validity["tool_calls"],  # counted, not assumed: see harness_gym.external.validity
        "valid_tool_calls": validity["valid_tool_calls"],
        "parse_errors": validity["parse_errors"],
        "tool_errors": validity["tool_errors"],
        "no_call_steps": sum(1 for r in agent if r.policy_reply is not None and not r.policy_reply.tool_calls),
        "tool_calls_by_format": {},
        "tool_calls_by_role": by_role,
        "tokens": {"prompt": prompt, "completion": completion},
        "durations": {
            "episode_s": time.time() - started,
            "agent_s": sum(max(r.ended - r.started, 0.0) for r in agent),
            "cli_s": cli_s,
            "startup_s": (first - launched) if first is not None else None,  # start to first request
            "grade_s": grade_s,
        },
        "error": error[1] if error else None,
        "error_kind": error[0] if error else None,
        "external": {
            "cli": spec.id,
            "package": spec.package["name"],
            "version": spec.version,
            "model": spec.model,
            "wire_api": spec.wire_api,
            "install_key": spec.install_key,
            "exit_code": exit_code,
            "completed": completed,
            "requests": len(records),
            "side_requests": sum(1 for r in records if r.side),
            "invalid_calls": validity["invalid_calls"],
            "stdout_tail": output[-2000:],
        },
    }
