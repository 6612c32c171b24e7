"""Real CLIs in the benchmark: ``harness-gym bench --configs external:claude-code,...`` runs each
planned episode through :func:`~harness_gym.external.runner.run_external_episode`, as class
``external`` in the report, with the same record format as every other harness.

The bench's agent becomes the policy behind the proxy: ``--agent openai`` routes to the same
endpoint and model (``--max-new-tokens`` caps what each CLI request asks: CLIs ask 32k-64k, which
a server with a small context refuses); ``--agent hf`` starts harness-gym's OpenAI-compatible model
server in this process, once per model, and routes to it the same way; the calibration agents are a scripted policy replaying the task's reference
shell commands through the CLI's own shell tool (``reference``) and one that never acts (``null``).
"""

from __future__ import annotations

import functools
import json
import shlex
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness_gym.external.catalog import ExternalCli, load_cli
from harness_gym.external.policies import DoNothingPolicy, OpenAICompatiblePolicy, ScriptedPolicy
from harness_gym.external.runner import ExternalEpisode, run_external_episode
from harness_gym.model_server import ModelServer
from harness_gym.records import EpisodePlan
from harness_gym.tasks.base import Task

EXTERNAL_CLASS = "external"
SHELL_TOOLS = ("execute_bash", "bash")  # the reference solutions' shell steps


class ExternalAgentError(ValueError):
    """The bench's agent cannot be the policy behind a real CLI; the message names one that can."""


# file_editor steps of reference solutions, as shell commands every CLI's shell tool can run
_EDITOR_SCRIPT = (
    "import json, pathlib, sys\n"
    "a = json.loads(sys.argv[1]); p = pathlib.Path(a['path'])\n"
    "if a['command'] == 'view': print(p.read_text())\n"
    "elif a['command'] == 'create': p.parent.mkdir(parents=True, exist_ok=True); p.write_text(a['file_text'])\n"
    "else:\n"
    "    t = p.read_text(); assert t.count(a['old_str']) == 1, 'old_str must occur once'\n"
    "    p.write_text(t.replace(a['old_str'], a['new_str']))\n"
)


def _shell_step(step: Mapping[str, Any], task: Task) -> str:
    arguments = step.get("arguments") or {}
    if step.get("tool") in SHELL_TOOLS and "command" in arguments:
        return str(arguments["command"])
    if step.get("tool") == "file_editor" and arguments.get("command") in ("view", "create", "str_replace"):
        return f"python3 -c {shlex.quote(_EDITOR_SCRIPT)} {shlex.quote(json.dumps(arguments))}"
    raise ExternalAgentError(
        f"task {task.id}: its reference solution has a {step.get('tool')!r} step that no shell command replays"
    )


def reference_policy(cli: ExternalCli, task: Task) -> ScriptedPolicy:
    """The task's reference solution, each step one call of the CLI's own shell tool in the
    workspace (``file_editor`` steps as a small Python command), then the CLI's submit command
    where it needs one. A step no shell command replays is refused, not skipped."""
    return ScriptedPolicy.cli_shell(
        cli, [f"cd {task.mount_path} && {_shell_step(step, task)}" for step in task.solution]
    )


def bench_policy(agent_factory: Callable[[], Any], role: str, cli: ExternalCli, task: Task) -> Any:
    """The policy for one planned episode (see the module's docstring)."""
    name, options = _agent_name(agent_factory)
    if role != "model":
        name, options = role, {}
    if name == "reference":
        return reference_policy(cli, task)
    if name == "null":
        return DoNothingPolicy()
    if name == "openai":
        return OpenAICompatiblePolicy(
            str(options["base_url"]),
            str(options["model"]),
            options.get("api_key"),
            max_tokens=options.get("max_tokens"),
        )
    if name == "hf":
        server = local_model_server(options.get("model"), options.get("gguf_file"), options.get("max_new_tokens"))
        return OpenAICompatiblePolicy(server.url, server.name, max_tokens=server.default_max_tokens, retries=0)
    agent = agent_factory()
    if callable(getattr(agent, "complete", None)):
        return agent  # already a policy (python:module:function returning one)
    raise ExternalAgentError(
        f"agent {name!r} cannot drive a real CLI yet: use --agent openai (any OpenAI-compatible server), "
        "hf (a local model), reference or null"
    )


_SERVERS: dict[tuple[str | None, str | None, int], ModelServer] = {}
_SERVERS_LOCK = threading.Lock()
HF_MAX_NEW_TOKENS = 256  # the hf agent's default (``--max-new-tokens``)


def local_model_server(model: str | None, gguf_file: str | None, max_new_tokens: int | None) -> ModelServer:
    """harness-gym's OpenAI-compatible server over the local model, started once per process and
    model (the model loads once; the daemon thread ends with the process)."""
    key = (model, gguf_file, int(max_new_tokens or HF_MAX_NEW_TOKENS))
    with _SERVERS_LOCK:
        if key not in _SERVERS:
            _SERVERS[key] = ModelServer(model, gguf_file, max_new_tokens=key[2]).start()
        return _SERVERS[key]


def _agent_name(agent_factory: Callable[[], Any]) -> tuple[str | None, Mapping[str, Any]]:
    if isinstance(agent_factory, functools.partial) and agent_factory.args:
        return str(agent_factory.args[0]), dict(agent_factory.keywords)
    return None, {}


def agent_label(agent_factory: Callable[[], Any]) -> str | None:
    """The agent's name as the engine's agents give it (``openai:MODEL``, ``hf:MODEL``), so a real CLI's
    records and its imitation's name the same agent."""
    name, options = _agent_name(agent_factory)
    if name == "openai" and options.get("model"):
        return f"openai:{options['model']}"
    if name == "hf":
        return f"hf:{options.get('model') or 'SmolLM2-135M-Instruct'}"
    return name


def run_external_plan(
    plan: EpisodePlan,
    agent_factory: Callable[[], Any],
    tasks: Sequence[Task],
    env_options: Mapping[str, Any],
) -> tuple[dict[str, Any], ExternalEpisode | None]:
    """One planned bench episode of a real CLI: its results-file record (an error is a record) and
    the episode (transcript and proxy records, for the trajectory file), None when it did not run."""
    started = time.perf_counter()
    base = {
        "episode_id": plan.key,
        "harness": plan.harness.env_id,
        "class": EXTERNAL_CLASS,
        "config": None,
        "task_id": plan.task_id,
        "run": plan.run,
        "seed": plan.seed,
        "role": plan.role,
    }
    try:
        cli = load_cli(plan.harness.env_id)
        task = next(t for t in tasks if t.id == plan.task_id)
        policy = bench_policy(agent_factory, plan.role, cli, task)
        max_turns = int(env_options.get("max_steps") or 30)
        episode = run_external_episode(
            cli,
            task,
            policy,
            max_turns=max_turns,
            episode_id=plan.key,
            run=plan.run,
            seed=plan.seed,
            world=env_options.get("world"),  # --world, as for the 243 configurations
            sandbox=env_options.get("sandbox"),  # --sandbox docker
            sandbox_options=env_options.get("sandbox_options"),
        )
    except Exception as exc:  # an unknown task, an agent that cannot drive a CLI, a missing install
        failed = {
            **base,
            "reward": 0.0,
            "passed": False,
            "outcome": "error",
            "error": f"{type(exc).__name__}: {exc}",
            "error_kind": "env",
            "durations": {"episode_s": time.perf_counter() - started},
        }
        return failed, None
    agent = plan.role if plan.role != "model" else (agent_label(agent_factory) or episode.record["agent"])
    return {**episode.record, **base, "agent": agent}, episode
