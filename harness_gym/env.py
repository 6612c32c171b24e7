"""The engine: one Gymnasium environment that runs any harness spec over any task.

Per step: parse the assistant's action into tool calls (``tool_calls``), apply the workflow gate
(W), resolve and validate each call against the tool interface (T), run it in the sandbox, format
its output (O), add workflow prompts (W), then let context management (C) decide what the policy
sees next. When the agent calls the finishing tool, or the step budget runs out, the task's hidden
grader gives the reward.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from harness_gym.factors import compile_config
from harness_gym.factors.context import ContextManager, TurnRecord
from harness_gym.factors.observation import ObservationFormatter
from harness_gym.factors.system_prompt import system_message
from harness_gym.factors.tool_interface import ToolInterface, resample_names
from harness_gym.factors.workflow import Workflow
from harness_gym.hooks import CallRecord, EpisodeState, HookRunner, classify
from harness_gym.sandboxes.base import Sandbox, SandboxError, SandboxFactory, choose_backend, create_sandbox
from harness_gym.sandboxes.options import SandboxOptions
from harness_gym.space import BASE_CONFIG, HarnessConfig
from harness_gym.spaces import AssistantActionSpace, chat_observation_space
from harness_gym.spec import BUDGET_DEFAULTS, load_spec, resolve_spec, spec_hash, validate_spec
from harness_gym.summarizers import Summarizer
from harness_gym.tasks import GradeResult, Task, load_tasks
from harness_gym.tool_calls import ActionError, ParsedAction, ToolCall, coerce_arguments, message_text, parse_action
from harness_gym.tools import LIBRARY_PREFIX, ToolContext, run_tool
from harness_gym.worlds import HOST, World, docker_image, load_world

Message = dict[str, Any]


class HarnessEnv(gym.Env[dict[str, Any], Any]):
    """A task-solving episode under one harness.

    Args:
        config: a configuration of the 3^5 space (``"S1T2O0C1W2"``); ignored when ``spec`` is given.
        spec: a harness spec (mapping, or path to a YAML/JSON file).
        tasks: a suite name (``"builtin"``, ``"builtin:train"``) or a sequence of :class:`Task`.
        sandbox: a backend name (``"bubblewrap"``) or a factory returning a :class:`Sandbox`.
        sandbox_options: the backend's options (a mapping or a :class:`SandboxOptions`; validated here,
            unknown keys and bad values refused); ``command_timeout_s`` caps every command.
        tool_call_format: override the spec's format (``auto`` or a format of :mod:`harness_gym.tool_formats`).
        max_steps: override the spec's step budget.
        summarizer: the context summariser (default: deterministic, no model).
        resample_names: re-draw tool aliases / opaque identifiers every episode.
        include_skills: show the spec's skills (training); evaluation turns them off.
        world: the root filesystem every task runs on (``"python"``, ``"clawgym"``, a world YAML file;
            see :mod:`harness_gym.worlds`); default: each task's suite's world, else the host's folders.
    """

    # "ansi": render() returns the episode's transcript as text; "human": each reset and step prints
    # the messages it added. A text environment has no frame rate; 4 is a nominal playback rate.
    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 4}

    def __init__(
        self,
        config: HarnessConfig | str | None = None,
        *,
        spec: Mapping[str, Any] | str | Path | None = None,
        tasks: str | Sequence[Task] | None = None,
        sandbox: str | SandboxFactory | None = None,
        sandbox_options: Mapping[str, Any] | None = None,
        tool_call_format: str | None = None,
        max_steps: int | None = None,
        summarizer: Summarizer | None = None,
        resample_names: bool = False,
        include_skills: bool = True,
        render_mode: str | None = None,
        world: str | None = None,
    ) -> None:
        if spec is None:
            self.harness_spec: dict[str, Any] = compile_config(config if config is not None else BASE_CONFIG)
        elif isinstance(spec, (str, Path)):
            self.harness_spec = load_spec(spec)
        else:
            self.harness_spec = resolve_spec(spec)
            validate_spec(self.harness_spec)
        if tool_call_format is not None:
            self.harness_spec["tool_call_format"] = tool_call_format
        if max_steps is not None:
            self.harness_spec["budget"]["max_steps"] = int(max_steps)
        validate_spec(self.harness_spec)
        self.spec_hash = spec_hash(self.harness_spec)
        self.config: str | None = self.harness_spec.get("config")
        self.tasks = load_tasks(tasks)
        self._tasks_by_id = {t.id: t for t in self.tasks}
        budget = self.harness_spec["budget"]
        spec_defaults = {k: budget[k] for k in ("command_timeout_s", "output_limit_chars") if k in budget}
        self._sandbox_request = sandbox
        # validated here, so a bad option fails at construction and not at the first reset
        self._sandbox_options = SandboxOptions.from_mapping(sandbox_options, **spec_defaults)
        self._worlds: dict[str, World] = {}
        for task in self.tasks:  # fail at construction, not mid-run, when a task cannot be placed
            self._worlds[task.id] = self._world_for(task, choose_backend(sandbox, task.image), world)
        self._sandboxes: dict[tuple[str, str | None], Sandbox] = {}
        self.summarizer = summarizer
        self.resample_names = resample_names
        self.include_skills = include_skills
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.render_mode = render_mode
        self.observation_space = chat_observation_space()
        self.action_space = AssistantActionSpace()
        self._static_interface = ToolInterface(self.harness_spec)

        self.task: Task | None = None
        self.sandbox: Sandbox | None = None
        self.workspace: Path | None = None
        self.tool_interface = self._static_interface
        self._tool_schemas = self.tool_interface.schemas()
        self._message_copies: dict[int, tuple[Message, Message]] = {}
        self._observed: tuple[list[Message] | None, list[Message]] = (None, [])
        self._chars_cache: tuple[list[Message] | None, int] = (None, 0)
        self.messages: list[Message] = []  # what the policy sees next
        self.transcript: list[Message] = []  # everything, never compressed
        self.records: list[TurnRecord] = []
        self.steps = 0
        self.done = True
        self.last_step_timing: dict[str, float] = {}
        self.last_grade: GradeResult | None = None  # the last episode's grading, log included
        self._rendered = 0  # transcript messages already printed in "human" render mode
        self._episode_spec_hash = self.spec_hash

    # ------------------------------------------------------------------ gym API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        self._end_episode()
        self.task = self._choose_task(options.get("task_id"))
        episode_rng = np.random.default_rng(int(self.np_random.integers(2**63)))
        if self.resample_names and self.harness_spec.get("tool_naming"):
            episode_spec = resample_names(self.harness_spec, episode_rng)
            self.tool_interface = ToolInterface(episode_spec)
            self._episode_spec_hash = spec_hash(episode_spec)
        else:
            self.tool_interface = self._static_interface
            self._episode_spec_hash = self.spec_hash
        # one copy per episode, shared by its observations (the engine copies nothing per step; the
        # interface keeps its own schemas, so a consumer that edits this list changes only its episode)
        self._tool_schemas = self.tool_interface.schemas()
        self._message_copies = {}
        self.formatter = ObservationFormatter(self.harness_spec, episode_rng)
        self.workflow = Workflow(self.harness_spec)

        self.sandbox = self._sandbox_for(self.task)
        layered = getattr(self.sandbox, "new_layered_workspace", None)  # copy-on-write where the backend can
        self.workspace = layered(self.task.workspace_sources(), self.task.materialize) if layered else None
        if self.workspace is None:
            self.workspace = self.sandbox.new_workspace()
            self.task.materialize(self.workspace)
        self.sandbox.start(self.workspace, self.task.mount_path, self.task.hidden_paths)
        self.context = ContextManager(self.harness_spec, self.summarizer, self.sandbox.write_file, self.task.mount_path)

        if any(_is_library(t.implementation) for t in self.tool_interface.tools.values()):
            self.sandbox.run_tool("library.py", {"op": "snapshot", "args": {}, "root": self.task.mount_path})
        budget = self.harness_spec["budget"]
        self.hooks = HookRunner(self.harness_spec.get("hooks", []))
        self.hook_state = EpisodeState(
            max_steps=budget["max_steps"], context_limit_chars=budget.get("context_limit_chars", 0)
        )
        self.messages = [
            system_message(self.harness_spec),
            {"role": "user", "content": self.task.instruction, "source": "task"},
            *self.workflow.initial_messages(),
            *self._skill_messages(),
        ]
        self.messages += [f.as_message() for f in self.hooks.run("episode_start", self.hook_state)]
        self.transcript = [dict(m) for m in self.messages]
        self.records = []
        self.steps = 0
        self.done = False
        self._episode_started = time.monotonic()
        info = self._base_info()
        info["tool_names"] = {t.canonical: t.name for t in self.tool_interface.tools.values()}
        limits = getattr(self.sandbox, "limits", None)  # which limits hold on this host, and which do not
        info["sandbox_limits"] = limits.as_dict() if hasattr(limits, "as_dict") else None
        self._rendered = 0
        if self.render_mode == "human":
            self.render()
        info["new_messages"] = [_copy_message(m) for m in self.messages]  # the turn API: all of it is new
        return self._observation(), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        if self.done or self.task is None or self.sandbox is None:
            raise RuntimeError("the episode is over (or was never started); call reset() before step()")
        started = time.perf_counter()
        parsed = _parse_safely(action, self.harness_spec.get("tool_call_format", "auto"), f"call_{self.steps}")
        self.steps += 1
        assistant = _assistant_message(action, parsed.calls)
        responses: list[Message] = []
        record = TurnRecord(self.steps, parsed.text)
        info = self._base_info()
        info.update(
            parsed_calls=[c.as_dict() for c in parsed.calls],
            parse_errors=parsed.errors,
            tool_errors=[],
            exit_codes=[],
            durations=[],
            workflow_feedback=[],
            hooks_fired=[],
        )
        sandbox_s = 0.0
        terminated = False
        hook_messages: list[Message] = []

        blocked = self.workflow.gate(parsed.text, bool(parsed.calls))
        if blocked is not None:
            info["workflow_feedback"].append(blocked)
            record.feedback.append(blocked)
            responses += [_tool_message(c, blocked, "workflow") for c in parsed.calls]
        elif not parsed.calls and self.tool_interface.stop_when_no_tool_call:
            terminated = True  # chat-style harnesses: a reply without a tool call ends the session
        elif not parsed.calls:
            note = self._no_call_feedback()
            info["workflow_feedback"].append(note)
            record.feedback.append(note)
            responses.append({"role": "user", "content": note, "source": "workflow"})
        else:
            budget = self.harness_spec["budget"]
            max_calls = int(budget.get("max_tool_calls_per_step", BUDGET_DEFAULTS["max_tool_calls_per_step"]))
            step_limit_s = float(budget.get("step_time_limit_s", BUDGET_DEFAULTS["step_time_limit_s"]))
            step_deadline = time.monotonic() + step_limit_s
            for index, call in enumerate(parsed.calls):
                if terminated:
                    responses.append(
                        _tool_message(
                            call, f"Not executed: the session ended with {self.tool_interface.finish_name}.", "tool"
                        )
                    )
                    continue
                if call.error:
                    responses.append(_tool_message(call, f"Error: {call.error}", "tool"))
                    continue
                remaining_s = step_deadline - time.monotonic()
                skipped = (
                    f"Not executed: at most {max_calls} tool calls run per message."
                    if index >= max_calls
                    else f"Not executed: this message's time budget of {step_limit_s:g} s is used up."
                    if remaining_s <= 0
                    else None
                )
                if skipped is not None:
                    info["tool_errors"].append(skipped)
                    responses.append(_tool_message(call, skipped, "tool"))
                    continue
                ceiling_s = min(self._sandbox_options.command_timeout_s, remaining_s)
                answer, source, finished, seconds = self._run_call(call, record, info, hook_messages, ceiling_s)
                sandbox_s += seconds
                terminated = terminated or finished
                responses.append(_tool_message(call, answer, source))
        responses += hook_messages  # after every tool message, so the chat protocol stays valid

        truncated = False
        if not terminated:
            responses += self.workflow.after_step(self.steps)
            self.hook_state.step = self.steps
            self.hook_state.context_chars = self._context_chars() + sum(
                len(m["content"]) for m in (assistant, *responses)
            )
            for firing in self.hooks.run("step", self.hook_state) + self.hooks.run("budget", self.hook_state):
                responses.append(firing.as_message())
                info["hooks_fired"].append(firing.hook)
                if firing.stop_episode and not truncated:
                    truncated = True
                    info["truncation_reason"] = f"stopped by hook {firing.hook}"
            limit = self.task.time_limit_s
            if not truncated and limit is not None and time.monotonic() - self._episode_started > limit:
                truncated = True
                info["truncation_reason"] = f"time limit of {limit:g} s exceeded"
            if not truncated and self.steps >= self.harness_spec["budget"]["max_steps"]:
                truncated = True
                info["truncation_reason"] = f"step budget of {self.harness_spec['budget']['max_steps']} steps exhausted"
        added = sum(len(m["content"]) for m in (assistant, *responses))
        previous, previous_chars = self.messages, self._context_chars()
        self.messages = [*self.messages, assistant, *responses]
        self._chars_cache = (self.messages, previous_chars + added)
        if self._observed[0] is previous:  # extend the observed copies instead of redoing them
            self._observed = (self.messages, self._observed[1] + [self._copy_once(m) for m in (assistant, *responses)])
        self.transcript += self._transcript_entries(assistant, parsed.calls, responses)
        self.records.append(record)

        reward = 0.0
        info["context_reset"] = False
        if terminated or truncated:
            if terminated:
                info["terminated_reason"] = "finish tool called" if parsed.calls else "replied without a tool call"
            else:
                info["terminated_reason"] = "truncated"
            grading_started = time.perf_counter()
            reward = self._grade(info)
            sandbox_s += time.perf_counter() - grading_started
        else:
            context_started = time.perf_counter()
            self.messages, info["context_reset"] = self.context.manage(self.messages, self.records)
            if info["context_reset"] and self.context.summary_path is not None:
                # writing the summary file runs a command in the sandbox: not harness overhead
                sandbox_s += time.perf_counter() - context_started
        info["reward_breakdown"] = info.get("reward_breakdown", {})
        # the turn API: what the environment answered this step, and the whole context when it was rewritten
        info["new_messages"] = [_copy_message(m) for m in responses]
        if info["context_reset"]:
            info["context"] = [_copy_message(m) for m in self.messages]
        total = time.perf_counter() - started
        self.last_step_timing = {"step_s": total, "sandbox_s": sandbox_s, "overhead_s": total - sandbox_s}
        if self.render_mode == "human":
            self.render()
        return self._observation(), float(reward), terminated, truncated, info

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``reset`` in a worker thread, for async frameworks: sandbox work never blocks the event loop."""
        return await asyncio.to_thread(self.reset, seed=seed, options=options)

    async def astep(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """``step`` in a worker thread (one call at a time per environment, like ``step``)."""
        return await asyncio.to_thread(self.step, action)

    def truncate(self, reason: str) -> tuple[float, dict[str, Any]]:
        """End the running episode from outside (a trainer's token budget, a wall clock) and grade
        the workspace as it stands. Returns the reward and an info like a truncating step's."""
        if self.done or self.task is None or self.sandbox is None:
            raise RuntimeError("no episode is running; truncate() ends one that reset() started")
        info = self._base_info()
        info.update(terminated_reason="truncated", truncation_reason=reason, context_reset=False, new_messages=[])
        reward = self._grade(info)
        return reward, info

    def _grade(self, info: dict[str, Any]) -> float:
        """Grade the episode's workspace, end the episode, and put the breakdown into ``info``."""
        assert self.task is not None and self.sandbox is not None
        result = self.task.grade(self.sandbox, self.transcript)
        # the grader's log stays out of info: it holds timings, and info must be reproducible
        self.last_grade = result
        info.update(reward_breakdown=result.breakdown, grader_error=result.error)
        self.done = True
        return float(result.reward)

    def render(self) -> str | None:
        """``ansi``: the episode's whole transcript (nothing compressed) as text. ``human``: print
        the transcript's messages not printed yet (called by every reset and step)."""
        if self.render_mode == "ansi":
            return "\n".join(_render_message(m) for m in self.transcript)
        if self.render_mode == "human":
            new = self.transcript[self._rendered :]
            self._rendered = len(self.transcript)
            if new:
                print("\n".join(_render_message(m) for m in new), flush=True)
        return None

    def close(self) -> None:
        self._end_episode()
        for sandbox in self._sandboxes.values():
            sandbox.close()
        self._sandboxes.clear()
        self.sandbox = None

    # ------------------------------------------------------------------ internals

    def _sandbox_for(self, task: Task) -> Sandbox:
        """The sandbox for this task's backend, image and world, created on first use and then reused."""
        backend = choose_backend(self._sandbox_request, task.image)
        world = self._worlds[task.id]
        image = task.image or self._sandbox_options.image  # the task's own image wins
        system_root = None
        if backend == "docker" and task.image is None and not world.is_host:
            image = docker_image(world, self._sandbox_options.docker_host)  # the same files as under bubblewrap
        elif backend == "bubblewrap":
            root = world.root()
            system_root = str(root) if root is not None else None
        name = backend if isinstance(backend, str) else "custom"
        key = (name, image if backend == "docker" else None, world.digest if backend == "bubblewrap" else None)
        if key not in self._sandboxes:
            options = dataclasses.replace(self._sandbox_options, image=None, system_root=system_root)
            self._sandboxes[key] = create_sandbox(backend, key[1], **options.explicit())
        return self._sandboxes[key]

    @staticmethod
    def _world_for(task: Task, backend: str | SandboxFactory, requested: str | None) -> World:
        """The world a task runs on: the environment's ``world``, else the task's (its suite's
        default), else the host's folders. A world that is not built is an error now, naming the
        command that builds it; a task's own container image is its world."""
        world = load_world(requested or task.world or HOST)
        if world.is_host or (backend == "docker" and task.image is not None):
            return world
        if backend not in ("bubblewrap", "docker"):
            name = backend if isinstance(backend, str) else "a custom sandbox factory"
            raise SandboxError(
                f"task {task.id} runs on world {world.name!r}, which the {name} backend cannot provide; "
                "use sandbox='bubblewrap' or 'docker', or world='host'"
            )
        world.root()  # raises WorldError with the build command when it is missing
        return world

    def _choose_task(self, task_id: str | None) -> Task:
        if task_id is not None:
            try:
                return self._tasks_by_id[task_id]
            except KeyError:
                raise ValueError(
                    f"unknown task_id {task_id!r}; this environment has {sorted(self._tasks_by_id)}"
                ) from None
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    def _run_call(
        self, call: ToolCall, record: TurnRecord, info: dict[str, Any], hook_messages: list[Message], ceiling_s: float
    ) -> tuple[str, str, bool, float]:
        """Resolve, validate and run one call (no command longer than ``ceiling_s``); let hooks react.
        Returns answer, source, finished, seconds."""
        assert self.sandbox is not None and self.task is not None
        tool = self.tool_interface.tools.get(call.name)
        arguments = call.arguments
        if tool is not None and call.format == "xml":
            with contextlib.suppress(RecursionError):  # a parameter nested too deep to decode stays text
                arguments = coerce_arguments(call.arguments, tool.parameters)
            if _argument_problem(call.name, arguments) is not None:
                arguments = call.arguments
        tool, error = self.tool_interface.resolve(call.name, arguments)
        if tool is None:
            info["tool_errors"].append(error)
            record.calls.append({"name": call.name, "arguments": arguments, "exit_code": None, "output": error})
            self._after_call(
                CallRecord(self.steps, call.name, call.name, arguments, None, True, False, False), info, hook_messages
            )
            return error or "", "tool", False, 0.0
        if tool.implementation == "finish":
            self.hook_state.step = self.steps
            blocking = [f for f in self.hooks.run("before_finish", self.hook_state) if f.block_finish]
            if blocking:
                info["hooks_fired"] += [f.hook for f in blocking]
                return "\n".join(f.message for f in blocking), "hook", False, 0.0
        context = ToolContext(self.sandbox, self.task.mount_path, ceiling_s, tool.name)
        result = run_tool(tool.implementation, arguments, context)
        info["exit_codes"].append(result.exit_code)
        if result.ran_command:
            info["durations"].append(result.duration_s)
        record.calls.append(
            {
                "name": tool.name,
                "canonical": tool.canonical,
                "arguments": arguments,
                "exit_code": result.exit_code,
                "output": result.output,
            }
        )
        is_edit, is_check = classify(tool.implementation, tool.canonical, tool.tags, arguments)
        failed = result.exit_code not in (0, None) or (result.exit_code is None and result.ran_command)
        self._after_call(
            CallRecord(
                self.steps, tool.name, tool.canonical, dict(arguments), result.exit_code, failed, is_edit, is_check
            ),
            info,
            hook_messages,
        )
        answer = self.formatter.format(
            result.output,
            tool=tool.name,
            exit_code=result.exit_code,
            pid=result.pid,
            duration_ms=result.duration_s * 1000,
            step=self.steps,
        )
        return answer, "tool", result.finished, result.duration_s

    def _after_call(self, call: CallRecord, info: dict[str, Any], hook_messages: list[Message]) -> None:
        self.hook_state.step = self.steps
        self.hook_state.calls.append(call)
        firings = self.hooks.run("tool_call", self.hook_state, call)
        if call.error:
            firings += self.hooks.run("tool_error", self.hook_state, call)
        info["hooks_fired"] += [f.hook for f in firings]
        hook_messages += [f.as_message() for f in firings]

    def _transcript_entries(self, assistant: Message, calls: list[ToolCall], responses: list[Message]) -> list[Message]:
        """The step as graders see it: each call with its id, the harness's name and the canonical
        name (``execute_bash``, ``file_editor``, ...), so a grader that inspects tool use scores
        the same behaviour equally under every tool interface."""
        canonical = {name: tool.canonical for name, tool in self.tool_interface.tools.items()}
        # A name this harness has no tool for ran nothing: it must not reach a grader under a canonical
        # name (under T1/T2 a call written as `execute_bash` is unknown there, and was reported as an
        # `execute_bash` call, indistinguishable from one that ran).
        entry = copy.deepcopy(assistant)
        entry["calls"] = [
            {"id": c.id, "name": c.name, "canonical": canonical.get(c.name, UNKNOWN_TOOL), "arguments": c.arguments}
            for c in calls
        ]
        results = [dict(m) for m in responses]
        for message in results:
            if message["role"] == "tool":
                message["canonical_name"] = canonical.get(message["name"], UNKNOWN_TOOL)
        return [entry, *results]

    def _skill_messages(self) -> list[Message]:
        skills = self.harness_spec.get("skills") or []
        if not skills or not self.include_skills:
            return []
        text = "Skills from earlier practice; apply one when its situation arises:\n" + "\n".join(
            f"- {k}" for k in skills
        )
        return [{"role": "user", "content": text, "source": "skill"}]

    def _no_call_feedback(self) -> str:
        names = ", ".join(sorted(self.tool_interface.tools))
        return (
            f"No tool call was found in your message, so nothing was executed. To act, call one of the "
            f"available tools ({names}). When the task is complete, call {self.tool_interface.finish_name}."
        )

    def _base_info(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "spec_name": self.harness_spec["name"],
            "spec_hash": self._episode_spec_hash,
            "task_id": self.task.id if self.task else None,
            "step": self.steps,
        }

    def _observation(self) -> dict[str, Any]:
        # each message is copied once, when first observed, not at every step (the engine never
        # changes a message it has shown; a consumer that edits one changes only its own view)
        source, observed = self._observed
        if source is not self.messages:
            observed = [self._copy_once(m) for m in self.messages]
            self._observed = (self.messages, observed)
        return {"messages": list(observed), "tools": list(self._tool_schemas)}

    def _copy_once(self, message: Message) -> Message:
        known = self._message_copies.get(id(message))
        if known is None or known[0] is not message:
            known = self._message_copies[id(message)] = (message, _copy_message(message))
        return known[1]

    def _context_chars(self) -> int:
        """Characters in the context, remembered per message list (so not recounted at every step)."""
        cached_list, chars = self._chars_cache
        if cached_list is not self.messages:
            chars = sum(len(m["content"]) for m in self.messages)
            self._chars_cache = (self.messages, chars)
        return chars

    def _end_episode(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()  # also removes the workspace
        self.workspace = None
        self.done = True


def _is_library(implementation: Any) -> bool:
    return isinstance(implementation, str) and implementation.startswith(LIBRARY_PREFIX)


def _render_message(message: Message) -> str:
    head = f"[{message['source']}/{message['role']}]"
    if message.get("name"):
        head += f" {message['name']}"
    calls = "".join(
        f"\n-> {c['function']['name']}({c['function'].get('arguments', '')})" for c in message.get("tool_calls") or []
    )
    return f"{head} {message['content']}{calls}"


def _copy_message(message: Message) -> Message:
    out = dict(message)
    if "tool_calls" in out:
        out["tool_calls"] = copy.deepcopy(out["tool_calls"])
    return out


MAX_ARGUMENT_DEPTH = 64
MAX_ARGUMENT_CHARS = 1_000_000


def _parse_safely(action: Any, fmt: str, id_prefix: str) -> ParsedAction:
    """Parse a model's action; whatever its shape, the result is calls or errors, never an exception
    (only an action that is neither text nor a message mapping is the caller's error)."""
    if not isinstance(action, (str, Mapping)):
        raise ActionError(f"an action must be a string or an assistant message mapping, got {type(action).__name__}")
    if isinstance(action, str):
        action = valid_text(action)
    try:
        parsed = parse_action(action, fmt, id_prefix=id_prefix)
    except Exception as exc:  # e.g. RecursionError on JSON nested 100k deep
        error = f"the message could not be read ({type(exc).__name__}); nothing was executed"
        return ParsedAction(_content_text(action), [ToolCall(f"{id_prefix}_0", "", {}, fmt, "", error)])
    parsed.text = valid_text(parsed.text)
    for call in parsed.calls:
        call.id, call.raw = valid_text(str(call.id)), valid_text(str(call.raw))
        if not call.error:
            call.error = _argument_problem(call.name, call.arguments)
        if call.error:
            call.arguments = {}
        if not isinstance(call.name, str) or not _encodable(call.name):
            call.name = ""
    return parsed


def _argument_problem(name: Any, arguments: Any) -> str | None:
    """Why a call's name or arguments cannot be run (not JSON-shaped, too deep, too big, not valid
    Unicode), checked without recursion so that any depth is safe."""
    if not isinstance(name, str) or not _encodable(name):
        return "the tool name must be valid text"
    if not isinstance(arguments, dict):
        return "the arguments must be a JSON object"
    stack: list[tuple[Any, int]] = [(arguments, 0)]
    chars = 0
    while stack:
        value, depth = stack.pop()
        if depth > MAX_ARGUMENT_DEPTH:
            return f"the arguments are nested deeper than {MAX_ARGUMENT_DEPTH} levels"
        if isinstance(value, str):
            chars += len(value)
            if not _encodable(value):
                return "the arguments contain text that is not valid Unicode (a lone surrogate)"
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str) or not _encodable(key):
                    return "the arguments' keys must be valid text"
                chars += len(key)
                stack.append((item, depth + 1))
        elif isinstance(value, (list, tuple)):
            stack += [(item, depth + 1) for item in value]
        elif value is not None and not isinstance(value, (bool, int, float)):
            return f"the arguments must be JSON values, not {type(value).__name__}"
        if chars > MAX_ARGUMENT_CHARS:
            return f"the arguments are longer than {MAX_ARGUMENT_CHARS} characters"
    return None


def valid_text(text: str) -> str:
    """``text`` with lone surrogates (which no tokenizer emits, and UTF-8 cannot encode) replaced by U+FFFD."""
    if _encodable(text):
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _content_text(action: Any) -> str:
    """The text of an action's content, whatever type the content has."""
    return valid_text(message_text(action.get("content") if isinstance(action, Mapping) else action))


UNKNOWN_TOOL = "unknown_tool"  # canonical name, for graders, of a call to a tool the harness does not have


def _assistant_message(action: Any, calls: list[ToolCall]) -> Message:
    if isinstance(action, str):
        return {"role": "assistant", "content": valid_text(action), "source": "policy"}
    if isinstance(action, Mapping):
        content = _content_text(action)
        message: Message = {"role": "assistant", "content": content, "source": "policy"}
        if calls and action.get("tool_calls") is not None:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": _arguments_text(c)}}
                for c in calls
            ]
        return message
    raise ActionError(f"an action must be a string or an assistant message mapping, got {type(action).__name__}")


def _arguments_text(call: ToolCall) -> str:
    return json.dumps(call.arguments, ensure_ascii=False) if not call.error else call.raw


def _tool_message(call: ToolCall, content: str, source: str) -> Message:
    return {"role": "tool", "content": content, "source": source, "tool_call_id": call.id, "name": call.name}


def make_spec_env(spec: Mapping[str, Any] | str | Path | None = None, **kwargs: Any) -> HarnessEnv:
    """Entry point of ``gym.make("HarnessAdapt", spec=...)``: any spec file or mapping as an environment."""
    if spec is None:
        raise ValueError(
            'HarnessAdapt needs a harness spec: gym.make("HarnessAdapt", spec="path/to/spec.yaml") '
            "or a spec mapping; presets are registered as HarnessAdapt-H0/H1/H2"
        )
    return HarnessEnv(spec=spec, **kwargs)
