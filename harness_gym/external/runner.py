"""One episode of a real agent CLI: the CLI runs unmodified in the task's sandbox (bubblewrap or
Docker) on the task's world, its model is a policy behind the recording proxy, and the task's
hidden grader scores the workspace.

The world is chosen as :class:`~harness_gym.env.HarnessEnv` chooses it (the caller's ``world``,
else the task suite's, else the host's folders); the CLI's install tree carries its own runtime
(Node, or a copied Python with its standard library) and is checked against the world's libraries
before any sandbox starts (:mod:`.runtime`).

The sandbox keeps no network: :mod:`.forwarder` opens the CLI's ``127.0.0.1:PORT`` inside the
sandbox's network namespace, served by the proxy in this process (nothing of it runs in the
sandbox, and the proxy's socket is not shown there). The CLI's own permission system is off (ours is the boundary); HOME is the sandbox's
fresh private one, filled with the CLI's config files; its install tree is shown read-only at the
same absolute path. Budgets on agent turns, completion tokens and wall time are enforced from the
host: a CLI past one is killed with its sandbox's processes, and the episode is an error, never
a pass (as is a crash, a CLI that never called the model, or a missing completion signal).
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from harness_gym.external import forwarder
from harness_gym.external.catalog import ExternalCli, load_cli
from harness_gym.external.install import require_install
from harness_gym.external.proxy import ModelProxy
from harness_gym.external.proxy.masking import ToolOutputMasking
from harness_gym.external.proxy.recording import call_results, turns_of
from harness_gym.external.runtime import check_tree
from harness_gym.external.validity import count_valid_calls
from harness_gym.llm_client import says_context_overflow
from harness_gym.sandboxes.base import SANDBOX_HOME, choose_backend, create_sandbox
from harness_gym.sandboxes.options import SandboxOptions
from harness_gym.tasks.base import Task
from harness_gym.worlds import World, docker_image, task_world

WORK_DIR = "/tmp/.harness-gym-external"  # the runner's own files inside the sandbox (the CLI's output)
PORT = 41789  # the CLI's model endpoint, 127.0.0.1:PORT inside the sandbox
FORWARDER_CONNECTIONS = 16  # connections one sandbox may hold open to the shared proxy at once
DEFAULT_MAX_TURNS = 30
SIDE_REQUESTS = 5  # requests a rollout may make beyond its agent turns (titles, token counts)
DEFAULT_WALL_S = 900.0
OUTPUT_TAIL_CHARS = 20_000
BACKENDS = ("bubblewrap", "docker")  # the sandboxes a CLI runs in (both give it no network)


class ProxyRecords(Sequence[dict[str, Any]]):
    """An episode's proxy records as JSON, each built when read and not kept: built all at once, the
    parsed requests of a flood within the recorded-bytes budget would take ~20-40x its bytes."""

    def __init__(self, records: Sequence[Any] = ()) -> None:
        self._records = list(records)

    def __len__(self) -> int:
        return len(self._records)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [r.to_json() for r in self._records[index]]
        return dict(self._records[index].to_json())

    def write(self, path: Path) -> None:
        """The records as one JSON list, written one record at a time."""
        with path.open("w", encoding="utf-8") as out:
            out.write("[")
            for number, record in enumerate(self._records):
                out.write(("," if number else "") + json.dumps(record.to_json(), default=str))
            out.write("]")


@dataclass
class ExternalEpisode:
    """An episode's results-file record, the canonical transcript graders read, and the proxy's records."""

    record: dict[str, Any]
    transcript: list[dict[str, Any]]
    proxy_records: ProxyRecords = field(default_factory=ProxyRecords)


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
    world: str | Path | World | None = None,
    sandbox: str | None = None,
) -> ExternalEpisode:
    """Run ``cli`` (an id such as ``external:claude-code``) on ``task`` with ``policy`` answering its
    model requests, and grade the workspace. ``world`` (a world name or YAML file; default: the
    task suite's, else the host's folders) and ``sandbox`` (``bubblewrap``, the default, or
    ``docker``) say where the CLI runs. A missing install, an unknown id, a world that is not built
    or lacks a library the tree needs raise before any sandbox starts; everything after that
    becomes a record (an error is a failed episode)."""
    spec = load_cli(cli)
    install = require_install(spec)
    if max_turns < 1 or wall_s <= 0:
        raise ValueError(f"max_turns must be >= 1 and wall_s > 0, got {max_turns} and {wall_s}")
    placement = place_cli(spec, install, task, world, sandbox, sandbox_options)
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
        "world": placement.world.name,
        "sandbox": placement.backend,
    }
    with _proxy_for(proxy) as model_proxy:
        # the proxy refuses requests past the turns and a few side requests at once; the watch then kills
        channel = model_proxy.open_rollout(
            policy,
            max_requests=max_turns + SIDE_REQUESTS,
            max_tokens=max_tokens,
            renamed_calls=tuple(spec.data.get("refused_calls_renamed_to") or ()),
            masking=ToolOutputMasking.from_data(spec.data.get("masked_results")),
        )
        try:
            return _episode(spec, install, task, channel, model_proxy, base, started, max_turns, wall_s, placement)
        finally:
            channel.close()


class _proxy_for:
    """The caller's proxy (it serves the sandbox's port too), else a private one for this episode,
    listening nowhere but on the sandbox's port."""

    def __init__(self, proxy: Any | None) -> None:
        self.given = proxy
        self.owned: ModelProxy | None = None

    def __enter__(self) -> Any:
        if self.given is not None:
            if not callable(getattr(self.given, "serve_sandbox", None)):
                raise ValueError("the proxy must be a ModelProxy (it serves the sandbox's port in this process)")
            return self.given
        self.owned = ModelProxy()
        self.owned.start()
        return self.owned

    def __exit__(self, *exc: object) -> None:
        if self.owned is not None:
            self.owned.close()


def _episode(
    spec: ExternalCli,
    install: Path,
    task: Task,
    channel: Any,
    model_proxy: Any,
    base: dict[str, Any],
    started: float,
    max_turns: int,
    wall_s: float,
    placement: Placement,
) -> ExternalEpisode:
    options = cli_sandbox_options(spec, placement.options, install, placement.backend)
    sandbox = create_sandbox(placement.backend, placement.image, **options.explicit())
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
        for relative, content in rendered["files"].items():
            _write(sandbox, f"{SANDBOX_HOME}/{relative}", content)
        launched = time.time()
        watch.start()
        # the CLI's port is open (and held by this process) before the CLI starts
        listener = forwarder.listen_in_sandbox(sandbox, PORT)
        port = model_proxy.serve_sandbox(listener, FORWARDER_CONNECTIONS, rollout=channel)  # its own rollout only
        try:
            result = sandbox.run(_command(spec, install, task, rendered), timeout_s=wall_s)
        finally:
            port.close()
        cli_s = time.time() - launched
        watch.stop()
        exit_code = result.exit_code
        error = _stopped(spec, channel, watch)
        if error is None and result.timed_out:
            error = (
                "budget",
                f"{spec.id} ran past its wall-time budget of {wall_s:g} s; it was killed with its sandbox",
            )
        elif error is None:
            output = _tail(sandbox, f"{WORK_DIR}/stdout")
            signalled = _completed(spec, sandbox, output)  # written in the sandbox: the agent can forge it
            final = final_reply(spec, channel.records)  # the proxy's record: the agent cannot
            completed = signalled and final
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
            elif not signalled:
                error = ("cli", f"{spec.id} exited without its completion signal")
            elif not final:
                error = (
                    (
                        "budget",
                        f"{spec.id} stopped at its turn limit of {max_turns}: the model's last reply called tools",
                    )
                    if channel.agent_turns >= max_turns
                    else ("cli", f"{spec.id} gave a completion signal, but the model's last reply called tools")
                )
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
    return ExternalEpisode(record, transcript, ProxyRecords(channel.records))


@dataclass(frozen=True)
class Placement:
    """Where an episode's CLI runs: the sandbox backend, the world, the Docker image (the world's
    own, or the task's or caller's), and the caller's sandbox options with the world's root."""

    backend: str
    world: World
    image: str | None
    options: SandboxOptions


def place_cli(
    spec: ExternalCli,
    install: Path,
    task: Task,
    world: str | Path | World | None,
    sandbox: str | None,
    sandbox_options: Mapping[str, Any] | None,
) -> Placement:
    """The backend and world of one episode, chosen as the environments choose them, and the
    install tree checked against the world (its interpreter, libraries and glibc versions): a
    problem is a clear error here, before any sandbox starts. Under Docker with a task's or the
    caller's own image, the image's files cannot be inspected beforehand and are not checked."""
    backend = choose_backend(sandbox, task.image)  # a task with its own image: Docker
    if backend not in BACKENDS:
        raise ValueError(f"external CLIs run in the {' or '.join(BACKENDS)} sandbox, not {backend!r}")
    options = SandboxOptions.from_mapping(sandbox_options)
    chosen = task_world(task, backend, world)
    root = chosen.root()
    image = (task.image or options.image) if backend == "docker" else None
    if backend == "docker" and image is None and root is None:
        raise ValueError(
            f"{spec.id} under Docker needs a world (world='clawgym', see `harness-gym worlds list`) or an "
            "image (sandbox_options={'image': ...}): the host's folders are not an image"
        )
    if backend == "bubblewrap" or image is None:
        check_tree(
            spec.id, install / spec.data["entry"], install, root, chosen.name, tree_bins(install), _libs(install)
        )
    if backend == "docker" and image is None:
        image = docker_image(chosen, options.docker_host)  # the same files as under bubblewrap
    if backend == "bubblewrap" and root is not None:
        options = SandboxOptions.from_mapping({**options.explicit(), "system_root": str(root)})
    return Placement(str(backend), chosen, image, options)


def cli_sandbox_options(
    spec: ExternalCli,
    sandbox_options: Mapping[str, Any] | SandboxOptions | None,
    install: Path,
    backend: str = "bubblewrap",
) -> SandboxOptions:
    """The CLI's sandbox: its memory cap (cgroup) and, under bubblewrap, its address-space limit
    (Node CLIs reserve tens of GiB they never touch) from its file, under the caller's options; the
    install tree (at its own path) shown read-only (the proxy is reached through the sandbox's own
    port: no folder of it is shown)."""
    defaults = {"memory_mb": int(spec.data.get("memory_mb", 4096))}
    if "address_space_mb" in spec.data and backend == "bubblewrap":  # Docker has no RLIMIT_AS option
        defaults["address_space_mb"] = int(spec.data["address_space_mb"])
    options = SandboxOptions.from_mapping(sandbox_options, **defaults)
    binds = {**(options.extra_ro_binds or {}), str(install): str(install)}
    return SandboxOptions.from_mapping({**options.explicit(), "extra_ro_binds": binds, "image": None})


def tree_bins(install: Path) -> list[str]:
    """The tree's own program folders, first on the CLI's PATH: its Node, its packages' links, its venv."""
    bins = [install / "node/node_modules/.bin", install / "node_modules/.bin", install / "venv/bin"]
    return [str(b) for b in bins if b.is_dir()]


def _libs(install: Path) -> list[str]:
    """The tree's own library folder (a copied interpreter's libpython), on LD_LIBRARY_PATH."""
    return [str(install / "python/lib")] if (install / "python/lib").is_dir() else []


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
    """The shell command that starts the CLI with its environment, in the workspace (its model port
    is already open: the host-side forwarder)."""
    env = dict(rendered["env"])
    env["PATH"] = ":".join([*tree_bins(install), "/usr/local/bin:/usr/bin:/bin"])
    if _libs(install):  # a copied interpreter finds its libpython here
        env["LD_LIBRARY_PATH"] = ":".join(_libs(install))
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    argv = " ".join(shlex.quote(a) for a in rendered["argv"])
    stdin = "</dev/null" if spec.data.get("stdin_null", True) else ""
    # the command's status is the CLI's: the sandbox reports it on a channel only its shell writes (an
    # exit line printed on the output could come from any process holding that output)
    return (
        f"mkdir -p {WORK_DIR}; (cd {shlex.quote(task.mount_path)} || exit 97; export {exports}; exec {argv}) "
        f"{stdin} >{WORK_DIR}/stdout 2>{WORK_DIR}/stderr"
    )


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


def final_reply(spec: ExternalCli, records: Sequence[Any]) -> bool:
    """Whether the model ended the episode, by the proxy's record of its last agent turn (what the
    agent cannot write, unlike the CLI's stdout and HOME): a reply without tool calls, or with only
    calls of a ``finish`` tool or of the CLI's ``submit_command`` (mini-swe-agent ends on it)."""
    turns = turns_of(records)
    if not turns:
        return False
    submit = spec.data.get("submit_command")

    def ends(call: Mapping[str, Any]) -> bool:
        role = spec.role(str(call.get("name")))
        if role == "finish":
            return True
        if not submit or role != "shell":
            return False
        arguments = _arguments(call.get("arguments"))
        command = arguments.get(spec.shell_tool[1]) if isinstance(arguments, dict) else None
        return isinstance(command, str) and str(submit) in command

    return all(ends(call) for call in turns[-1].policy_reply.tool_calls)


def _write(sandbox: Any, path: str, content: str) -> None:
    result = sandbox.write_file(path, content)
    if result.exit_code != 0:
        raise RuntimeError(f"could not write {path} in the sandbox: {result.output[-300:]}")


def _tail(sandbox: Any, path: str, limit: int = OUTPUT_TAIL_CHARS) -> str:
    result = sandbox.run(f"tail -c {limit} {shlex.quote(path)} 2>/dev/null", timeout_s=30)
    return result.output if result.exit_code == 0 else ""


def canonical_transcript(spec: ExternalCli, records: Sequence[Any]) -> list[dict[str, Any]]:
    """The conversation as graders read it, built from the proxy's own records: the first agent
    request's system and user messages, then each turn's recorded policy reply (each call with the
    CLI's tool name, its canonical name and role) and the tool results the next request carries for
    those calls, matched by call id. The history a CLI sends passes through the sandbox, where the
    agent can rewrite it; a call no reply made never enters this transcript (``RolloutChannel.verify``
    flags it), so a transcript-reading grader scores only what the policy did."""
    turns = turns_of(records)
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
            "requests": len(records) + int(getattr(channel, "refused_unrecorded", 0)),
            "unrecorded_refusals": int(getattr(channel, "refused_unrecorded", 0)),  # past the budget, counted only
            "side_requests": sum(1 for r in records if r.side),
            "invalid_calls": validity["invalid_calls"],
            # results the CLI itself masked in later requests (accepted as exact; the transcript keeps the full one)
            "masked_results": [m.to_json() for m in getattr(channel, "masked", {}).values()],
            "stdout_tail": output[-2000:],
        },
    }
