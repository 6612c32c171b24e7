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
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from harness_gym.budget import Budget, effective_command_timeout
from harness_gym.factors.context import ContextManager, TurnRecord
from harness_gym.factors.observation import ObservationFormatter
from harness_gym.factors.system_prompt import system_message
from harness_gym.factors.tool_interface import ToolInterface, resample_names
from harness_gym.factors.workflow import Workflow
from harness_gym.harness import Harness
from harness_gym.hooks import CallRecord, EpisodeState, HookRunner
from harness_gym.sandboxes import spare
from harness_gym.sandboxes.base import Sandbox, SandboxBackend, SandboxFactory, choose_backend, create_sandbox
from harness_gym.sandboxes.options import SandboxOptions
from harness_gym.space import BASE_CONFIG, HarnessConfig
from harness_gym.spaces import AssistantActionSpace, chat_observation_space
from harness_gym.spec import spec_hash
from harness_gym.summarizers import Summarizer
from harness_gym.tasks import GradeResult, Task, load_tasks
from harness_gym.tool_calls import ActionError, ParsedAction, ToolCall, coerce_arguments, message_text, parse_action
from harness_gym.tools import LIBRARY_PREFIX, ToolContext, run_tool
from harness_gym.tools.roles import call_effects
from harness_gym.worlds import World, docker_image, task_world

Message = dict[str, Any]


@dataclass(slots=True)
class CallOutcome:
    """What dispatching one tool call gave: the answer the agent sees, and what to record of it
    (not frozen: a frozen dataclass of eleven fields costs 2.5 us to make, one made per call)."""

    answer: str
    source: str = "tool"  # "tool", or "hook" when a before_finish hook turned the call away
    finished: bool = False  # the finishing tool ran
    seconds: float = 0.0  # time the tool took in the sandbox
    executed: bool = False  # a tool ran (its exit code, possibly None, is reported)
    exit_code: int | None = None
    ran_command: bool = False  # it ran a command (its duration is reported)
    tool_error: str | None = None  # the call named no tool of this harness, or its arguments were invalid
    turn_entry: dict[str, Any] | None = None  # for the turn record (context summaries)
    hook_call: CallRecord | None = None  # what tool_call / tool_error hooks see
    blocked_by: tuple[str, ...] = ()  # the before_finish hooks that turned a finishing call away


@dataclass
class _Turn:
    """One step's working state, passed from stage to stage."""

    started: float
    parsed: ParsedAction
    assistant: Message
    record: TurnRecord
    info: dict[str, Any]
    responses: list[Message] = field(default_factory=list)
    hook_messages: list[Message] = field(default_factory=list)
    sandbox_s: float = 0.0
    terminated: bool = False
    truncated: bool = False


class HarnessEnv(gym.Env[dict[str, Any], Any]):
    """A task-solving episode under one harness.

    Args:
        config: the harness: any reference :meth:`Harness.resolve` takes (a configuration ``"S1T2O0C1W2"``,
            an environment id, a preset, a spec file, a mapping, a :class:`Harness`); ignored when
            ``spec`` is given.
        spec: a harness spec (mapping, or path to a YAML/JSON file), or any other harness reference.
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
    metadata: dict[str, Any] = {"render_modes": ["ansi", "human"], "render_fps": 4}  # noqa: RUF012 (Gymnasium's own)

    def __init__(
        self,
        config: HarnessConfig | Harness | str | None = None,
        *,
        spec: Mapping[str, Any] | str | Path | Harness | None = None,
        tasks: str | Sequence[Task] | None = None,
        sandbox: str | SandboxFactory | None = None,
        sandbox_options: Mapping[str, Any] | SandboxOptions | None = None,
        tool_call_format: str | None = None,
        max_steps: int | None = None,
        summarizer: Summarizer | None = None,
        resample_names: bool = False,
        include_skills: bool = True,
        render_mode: str | None = None,
        world: str | None = None,
    ) -> None:
        reference = spec if spec is not None else config if config is not None else BASE_CONFIG
        self.harness = Harness.resolve(reference).with_changes(tool_call_format=tool_call_format, max_steps=max_steps)
        self.harness_spec: dict[str, Any] = self.harness.spec  # the env's own copy, as data
        self.budget: Budget = self.harness.budget
        self.spec_hash = self.harness.spec_hash
        self.config: str | None = self.harness.config
        self.tasks = load_tasks(tasks)
        self._tasks_by_id = {t.id: t for t in self.tasks}
        self._sandbox_request = sandbox
        # validated here, so a bad option fails at construction and not at the first reset; the spec's
        # budget gives the defaults, explicit options win (the one ceiling every command runs under)
        self._sandbox_options = SandboxOptions.from_mapping(sandbox_options, **self.budget.sandbox_defaults())
        self._worlds: dict[str, World] = {}
        for task in self.tasks:  # fail at construction, not mid-run, when a task cannot be placed
            self._worlds[task.id] = self._world_for(task, choose_backend(sandbox, task.image), world)
        self._sandboxes: dict[tuple[str, str | None, str | None], Sandbox] = {}  # (backend, image, world digest)
        self._spare: spare.WarmSpare[Sandbox] = spare.WarmSpare()  # the next episode's sandbox, warm
        self._last_task: Task | None = None  # a spare is made for a task reset to twice in a row
        self._next_spare: tuple[Hashable, Callable[[], Sandbox]] | None = None  # asked for by this reset
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
        self._canonical_cache: tuple[ToolInterface, dict[str, str]] | None = None
        self.messages: list[Message] = []  # what the policy sees next
        self.transcript: list[Message] = []  # everything, never compressed
        self.records: list[TurnRecord] = []
        self.steps = 0
        self.done = True
        self.last_step_timing: dict[str, float] = {}
        self.last_grade: GradeResult | None = None  # the last episode's grading, log included
        self._rendered = 0  # transcript messages already printed in "human" render mode
        self._episode_spec_hash = self.spec_hash

    @property
    def sandbox_options(self) -> SandboxOptions:
        """The validated sandbox options every sandbox of this environment gets (the spec's budget
        filled in where ``sandbox_options`` did not say)."""
        return self._sandbox_options

    # ------------------------------------------------------------------ gym API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        super().reset(seed=seed)
        # a reset mid-episode is Gymnasium's right, and it leaves that episode ungraded: say so (a
        # TimeLimit stacked outside gym.make's wrappers ends episodes this way, unseen by the harness)
        abandoned = not self.done and self.task is not None
        finished = self._end_episode(background=True)
        try:
            return self._new_episode(options or {}, abandoned)
        finally:
            # after the observation is made: the background worker this wakes (the next spare, then
            # the finished sandbox's close) no longer takes the GIL from this reset (64 at once)
            next_spare, self._next_spare = self._next_spare, None
            if next_spare is not None:
                self._spare.prepare(*next_spare, then_close=finished, warm=self._warm_spare)
            elif finished is not None:
                self._spare.retire(finished)

    def _new_episode(self, options: dict[str, Any], abandoned: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        """The body of :meth:`reset` once the finished episode is put aside."""
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

        self.sandbox, self.workspace = self._episode_sandbox(self.task)
        # a fold's summary file is written without waiting where the sandbox can (its reply is read
        # before the next sandbox operation: the model's next reply overlaps the second round trip)
        write = getattr(self.sandbox, "write_file_soon", None) or self.sandbox.write_file
        self.context = ContextManager(self.harness_spec, self.summarizer, write, self.task.mount_path)
        self.hooks = HookRunner(self.harness_spec.get("hooks", []))
        self.hook_state = EpisodeState(
            max_steps=self.budget.max_steps, context_limit_chars=self.budget.context_limit_chars
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
        info["sandbox_limits"] = limits.as_dict() if limits is not None and hasattr(limits, "as_dict") else None
        if abandoned:
            info["previous_episode_ungraded"] = True
        self._rendered = 0
        if self.render_mode == "human":
            self.render()
        info["new_messages"] = [_copy_message(m) for m in self.messages]  # the turn API: all of it is new
        return self._observation(), info

    def step(self, action: Any) -> tuple[dict[str, Any], float, bool, bool, dict[str, Any]]:
        """One action, in named stages: parse -> gate -> dispatch (validate, run and observe each
        call) -> after-step hooks and budget (termination) -> context -> grade or manage context."""
        if self.done or self.task is None or self.sandbox is None:
            raise RuntimeError("the episode is over (or was never started); call reset() before step()")
        turn = self._parse_stage(action)
        if self._gate_stage(turn):
            self._dispatch_stage(turn)
        turn.responses += turn.hook_messages  # after every tool message, so the chat protocol stays valid
        if not turn.terminated:
            self._after_step_stage(turn)
        self._context_stage(turn)
        reward = self._outcome_stage(turn)
        info = turn.info
        # the turn API: what the environment answered this step, and the whole context when it was rewritten
        info["new_messages"] = [_copy_message(m) for m in turn.responses]
        if info["context_reset"]:
            info["context"] = [_copy_message(m) for m in self.messages]
        total = time.perf_counter() - turn.started
        self.last_step_timing = {"step_s": total, "sandbox_s": turn.sandbox_s, "overhead_s": total - turn.sandbox_s}
        if self.render_mode == "human":
            self.render()
        return self._observation(), float(reward), turn.terminated, turn.truncated, info

    # ------------------------------------------------------------------ step stages

    def _parse_stage(self, action: Any) -> _Turn:
        """Parse the action into calls (never raising on its content) and open the step's record."""
        started = time.perf_counter()
        parsed = _parse_safely(action, self.harness_spec.get("tool_call_format", "auto"), f"call_{self.steps}")
        self.steps += 1
        info = self._base_info()
        info.update(
            parsed_calls=[c.as_dict() for c in parsed.calls],
            parse_errors=parsed.errors,
            tool_errors=[],
            exit_codes=[],
            durations=[],
            call_roles=[],
            workflow_feedback=[],
            hooks_fired=[],
        )
        return _Turn(
            started, parsed, _assistant_message(action, parsed.calls), TurnRecord(self.steps, parsed.text), info
        )

    def _gate_stage(self, turn: _Turn) -> bool:
        """The workflow gate (W) and the no-call rule; True when the calls are to be dispatched."""
        parsed = turn.parsed
        blocked = self.workflow.gate(parsed.text, bool(parsed.calls))
        if blocked is not None:
            turn.info["workflow_feedback"].append(blocked)
            turn.record.feedback.append(blocked)
            turn.responses += [_tool_message(c, blocked, "workflow") for c in parsed.calls]
        elif not parsed.calls and self.tool_interface.stop_when_no_tool_call:
            turn.terminated = True  # chat-style harnesses: a reply without a tool call ends the session
        elif not parsed.calls:
            note = self._no_call_feedback()
            turn.info["workflow_feedback"].append(note)
            turn.record.feedback.append(note)
            turn.responses.append({"role": "user", "content": note, "source": "workflow"})
        else:
            return True
        return False

    def _dispatch_stage(self, turn: _Turn) -> None:
        """Each call in turn: validate it against the action's budget, run it, observe the result."""
        step_deadline = time.monotonic() + self.budget.step_time_limit_s
        for index, call in enumerate(turn.parsed.calls):
            remaining_s = step_deadline - time.monotonic()
            refusal = self._validate_call(turn, call, index, remaining_s)
            if refusal is not None:
                turn.responses.append(_tool_message(call, refusal, "tool"))
                continue
            ceiling_s, _ = effective_command_timeout(self._sandbox_options.command_timeout_s, remaining_s)
            outcome = self._run_call(call, ceiling_s or remaining_s)
            self._observe_call(turn, outcome)
            turn.sandbox_s += outcome.seconds
            turn.terminated = turn.terminated or outcome.finished
            turn.responses.append(_tool_message(call, outcome.answer, outcome.source))

    def _validate_call(self, turn: _Turn, call: ToolCall, index: int, remaining_s: float) -> str | None:
        """Why this call is not run (the session ended, it is malformed, the action's call count or
        time budget is spent), or None to run it."""
        if turn.terminated:
            return f"Not executed: the session ended with {self.tool_interface.finish_name}."
        if call.error:
            return f"Error: {call.error}"
        if index >= self.budget.max_tool_calls_per_step:
            skipped = f"Not executed: at most {self.budget.max_tool_calls_per_step} tool calls run per message."
        elif remaining_s <= 0:
            skipped = f"Not executed: this message's time budget of {self.budget.step_time_limit_s:g} s is used up."
        else:
            return None
        turn.info["tool_errors"].append(skipped)
        return skipped

    def _observe_call(self, turn: _Turn, outcome: CallOutcome) -> None:
        """Record a call's outcome in the step's info and turn record, and let hooks react to it."""
        info = turn.info
        if outcome.tool_error is not None:
            info["tool_errors"].append(outcome.tool_error)
        if outcome.exit_code is not None or outcome.executed:
            info["exit_codes"].append(outcome.exit_code)
            info["call_roles"].append(outcome.hook_call.role if outcome.hook_call else "other")
        if outcome.ran_command:
            info["durations"].append(outcome.seconds)
        if outcome.turn_entry is not None:
            turn.record.calls.append(outcome.turn_entry)
        info["hooks_fired"] += list(outcome.blocked_by)
        if outcome.hook_call is not None:
            self.hook_state.step = self.steps
            self.hook_state.calls.append(outcome.hook_call)
            firings = self.hooks.run("tool_call", self.hook_state, outcome.hook_call)
            if outcome.hook_call.error:
                firings += self.hooks.run("tool_error", self.hook_state, outcome.hook_call)
            info["hooks_fired"] += [f.hook for f in firings]
            turn.hook_messages += [f.as_message() for f in firings]

    def _after_step_stage(self, turn: _Turn) -> None:
        """Workflow prompts, step and budget hooks, then the episode's limits (time, steps)."""
        assert self.task is not None
        info = turn.info
        turn.responses += self.workflow.after_step(self.steps)
        self.hook_state.step = self.steps
        self.hook_state.context_chars = self._context_chars() + sum(
            len(m["content"]) for m in (turn.assistant, *turn.responses)
        )
        for firing in self.hooks.run("step", self.hook_state) + self.hooks.run("budget", self.hook_state):
            turn.responses.append(firing.as_message())
            info["hooks_fired"].append(firing.hook)
            if firing.stop_episode and not turn.truncated:
                turn.truncated = True
                info["truncation_reason"] = f"stopped by hook {firing.hook}"
        limit = self.task.time_limit_s
        if not turn.truncated and limit is not None and time.monotonic() - self._episode_started > limit:
            turn.truncated = True
            info["truncation_reason"] = f"time limit of {limit:g} s exceeded"
        if not turn.truncated and self.steps >= self.budget.max_steps:
            turn.truncated = True
            info["truncation_reason"] = f"step budget of {self.budget.max_steps} steps exhausted"

    def _context_stage(self, turn: _Turn) -> None:
        """Append the step's messages to the context and the transcript (copies extended, not redone)."""
        new = (turn.assistant, *turn.responses)
        added = sum(len(m["content"]) for m in new)
        previous, previous_chars = self.messages, self._context_chars()
        self.messages = [*self.messages, *new]
        self._chars_cache = (self.messages, previous_chars + added)
        if self._observed[0] is previous:  # extend the observed copies instead of redoing them
            self._observed = (self.messages, self._observed[1] + [self._copy_once(m) for m in new])
        self.transcript += self._transcript_entries(turn.assistant, turn.parsed.calls, turn.responses)
        self.records.append(turn.record)

    def _outcome_stage(self, turn: _Turn) -> float:
        """Grade an ended episode, else let context management (C) decide what the policy sees next."""
        info = turn.info
        reward = 0.0
        info["context_reset"] = False
        if turn.terminated or turn.truncated:
            if turn.terminated:
                info["terminated_reason"] = "finish tool called" if turn.parsed.calls else "replied without a tool call"
            else:
                info["terminated_reason"] = "truncated"
            grading_started = time.perf_counter()
            reward = self._grade(info)
            turn.sandbox_s += time.perf_counter() - grading_started
        else:
            info["graded"] = False  # a wrapper that ends the episode here leaves it ungraded
            context_started = time.perf_counter()
            self.messages, info["context_reset"] = self.context.manage(self.messages, self.records)
            if info["context_reset"] and self.context.summary_path is not None:
                # writing the summary file runs a command in the sandbox: not harness overhead
                turn.sandbox_s += time.perf_counter() - context_started
        info["reward_breakdown"] = info.get("reward_breakdown", {})
        return reward

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
        info.update(reward_breakdown=result.breakdown, grader_error=result.error, graded=True)
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
        self._spare.close()
        for sandbox in self._sandboxes.values():
            sandbox.close()
        self._sandboxes.clear()
        self.sandbox = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle the environment as made (before ``reset`` or after ``close``): a live sandbox is a
        process tree on this host, which no pickle can carry, so that case is refused by name."""
        if self.sandbox is not None or self._sandboxes:
            raise TypeError(
                "a HarnessEnv with live sandboxes cannot be pickled (they are processes on this host): "
                "pickle it before reset() or after close()"
            )
        return {k: v for k, v in self.__dict__.items() if k != "_spare"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._spare = spare.WarmSpare()

    # ------------------------------------------------------------------ internals

    def _episode_sandbox(self, task: Task) -> tuple[Sandbox, Path]:
        """This episode's sandbox, started on a fresh workspace: the warm spare when it was made for
        this task (see :mod:`.sandboxes.spare`), else the environment's own. Then the next spare."""
        key = self._sandbox_key(task)
        sandbox = self._spare.take((key, id(task)))
        if sandbox is not None:
            self._sandboxes[key] = sandbox
        else:
            sandbox = self._sandbox_for(task)
            self._start_episode_sandbox(sandbox, task)
        repeated, self._last_task = self._last_task is task, task
        if repeated and self._spares_for(task):  # made by reset() once this episode is ready
            self._next_spare = ((key, id(task)), lambda: self._start_episode_sandbox(self._new_sandbox(task), task))
        workspace = getattr(sandbox, "workspace", None)
        assert isinstance(workspace, Path)
        return sandbox, workspace

    def _spares_for(self, task: Task | None) -> bool:
        """Whether this task's sandboxes are made and closed in the background (bubblewrap's)."""
        return task is not None and spare.enabled() and self._sandbox_key(task)[0] == "bubblewrap"

    def _start_episode_sandbox(self, sandbox: Sandbox, task: Task) -> Sandbox:
        """Give ``sandbox`` a fresh workspace of ``task`` (copy-on-write where the backend can) and start it."""
        layered = getattr(sandbox, "new_layered_workspace", None)
        workspace = layered(task.workspace_sources(), task.materialize) if layered else None
        if workspace is None:
            workspace = sandbox.new_workspace()
            task.materialize(workspace)
        try:
            sandbox.start(workspace, task.mount_path, task.hidden_paths)
            if any(_is_library(t.implementation) for t in self._static_interface.tools.values()):
                sandbox.run_tool("library.py", {"op": "snapshot", "args": {}, "root": task.mount_path})
            elif self._uses_tool_server():
                prime = getattr(sandbox, "prime_tool_server", None)
                if prime is not None:
                    prime()
        except BaseException:
            sandbox.close()
            raise
        return sandbox

    def _warm_spare(self, sandbox: Sandbox) -> None:
        """In the spare's worker, after the finished sandbox's close: wait for the tool server the
        start primed to say it is up, so the episode's first tool call or fold never waits for an
        interpreter (on a loaded machine it took longer than a 0.3 s first reply: up to 0.5 s)."""
        prime = getattr(sandbox, "prime_tool_server", None)
        if prime is not None and self._uses_tool_server():
            prime(wait_s=PRIME_WAIT_S)

    def _uses_tool_server(self) -> bool:
        """Whether episodes call the in-sandbox tool server: a tool other than a shell command, finish
        or unavailable, or a context summary written to a file."""
        shell_only = ("bash", "bash_ms", "finish", "unavailable")
        for tool in self._static_interface.tools.values():
            implementation = tool.implementation
            if isinstance(implementation, Mapping) and "command" in implementation:
                continue
            if implementation not in shell_only:
                return True
        context = self.harness_spec["context"]
        return context.get("strategy") == "summary" and context.get("summary_location") == "file"

    def _sandbox_for(self, task: Task) -> Sandbox:
        """The sandbox for this task's backend, image and world, created on first use and then reused."""
        key = self._sandbox_key(task)
        if key not in self._sandboxes:
            self._sandboxes[key] = self._new_sandbox(task)
        return self._sandboxes[key]

    def _sandbox_key(self, task: Task) -> tuple[str, str | None, str | None]:
        return self._sandbox_plan(task)[0]

    def _new_sandbox(self, task: Task) -> Sandbox:
        key, backend, system_root = self._sandbox_plan(task)
        options = dataclasses.replace(self._sandbox_options, image=None, system_root=system_root)
        return create_sandbox(backend, key[1], **options.explicit())

    def _sandbox_plan(self, task: Task) -> tuple[tuple[str, str | None, str | None], str | SandboxFactory, str | None]:
        """The sandbox key (backend, image, world) of a task, its backend and its system root."""
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
        return key, backend, system_root

    @staticmethod
    def _world_for(task: Task, backend: str | SandboxFactory, requested: str | None) -> World:
        return task_world(task, backend, requested)

    def _choose_task(self, task_id: str | None) -> Task:
        if task_id is not None:
            try:
                return self._tasks_by_id[task_id]
            except KeyError:
                raise ValueError(
                    f"unknown task_id {task_id!r}; this environment has {sorted(self._tasks_by_id)}"
                ) from None
        return self.tasks[int(self.np_random.integers(len(self.tasks)))]

    def _run_call(self, call: ToolCall, ceiling_s: float) -> CallOutcome:
        """Resolve, validate and run one call (no command longer than ``ceiling_s``). Changes nothing
        of the step: the returned outcome says what happened, :meth:`_observe_call` records it."""
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
            return CallOutcome(
                error or "",
                tool_error=error,
                turn_entry={"name": call.name, "arguments": arguments, "exit_code": None, "output": error},
                hook_call=CallRecord(self.steps, call.name, call.name, arguments, None, True, False, False),
            )
        if tool.role == "finish":
            self.hook_state.step = self.steps
            blocking = [f for f in self.hooks.run("before_finish", self.hook_state) if f.block_finish]
            if blocking:
                return CallOutcome(
                    "\n".join(f.message for f in blocking), source="hook", blocked_by=tuple(f.hook for f in blocking)
                )
        context = ToolContext(self.sandbox, self.task.mount_path, ceiling_s, tool.name)
        result = run_tool(tool.implementation, arguments, context)
        is_edit, is_check = call_effects(tool.role, arguments)
        failed = result.exit_code not in (0, None) or (result.exit_code is None and result.ran_command)
        answer = self.formatter.format(
            result.output,
            tool=tool.name,
            exit_code=result.exit_code,
            pid=result.pid,
            duration_ms=result.duration_s * 1000,
            step=self.steps,
        )
        return CallOutcome(
            answer,
            finished=result.finished,
            seconds=result.duration_s,
            executed=True,
            exit_code=result.exit_code,
            ran_command=result.ran_command,
            turn_entry={
                "name": tool.name,
                "canonical": tool.canonical,
                "role": tool.role,
                "arguments": arguments,
                "exit_code": result.exit_code,
                "output": result.output,
            },
            hook_call=CallRecord(
                self.steps,
                tool.name,
                tool.canonical,
                dict(arguments),
                result.exit_code,
                failed,
                is_edit,
                is_check,
                tool.role,
            ),
        )

    def _transcript_entries(self, assistant: Message, calls: list[ToolCall], responses: list[Message]) -> list[Message]:
        """The step as graders see it: each call with its id, the harness's name and the canonical
        name (``execute_bash``, ``file_editor``, ...), so a grader that inspects tool use scores
        the same behaviour equally under every tool interface."""
        canonical = self._canonical_names()
        # A name this harness has no tool for ran nothing: it must not reach a grader under a canonical
        # name (under T1/T2 a call written as `execute_bash` is unknown there, and was reported as an
        # `execute_bash` call, indistinguishable from one that ran). Nor a decoy (T1/T2's `web_search`
        # answers "unavailable"): it was reported as a `web_search` call, which a PinchBench grader
        # paid for, while under T0 (no such tool) the same intent could not earn it.
        entry = _copy_message(assistant)
        entry["calls"] = [
            {"id": c.id, "name": c.name, "canonical": canonical.get(c.name, UNKNOWN_TOOL), "arguments": c.arguments}
            for c in calls
        ]
        results = [dict(m) for m in responses]
        for message in results:
            if message["role"] == "tool":
                message["canonical_name"] = canonical.get(message["name"], UNKNOWN_TOOL)
        return [entry, *results]

    def _canonical_names(self) -> dict[str, str]:
        """Each presented tool name's canonical name for graders (decoys: ``unavailable_tool``),
        made once per tool interface (an episode's), not at every step."""
        interface = self.tool_interface
        cached = self._canonical_cache
        if cached is None or cached[0] is not interface:
            names = {
                name: UNAVAILABLE_TOOL if tool.role == "unavailable" else tool.canonical
                for name, tool in interface.tools.items()
            }
            cached = self._canonical_cache = (interface, names)
        return cached[1]

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

    def _end_episode(self, background: bool = False) -> Sandbox | None:
        """Close the episode's sandbox (which removes its workspace); ``background``: where spares are
        on, return it instead, to be closed in the background (the next episode has a new one)."""
        finished = None
        if self.sandbox is not None:
            if background and self._spares_for(self.task):
                self._sandboxes = {k: v for k, v in self._sandboxes.items() if v is not self.sandbox}
                finished, self.sandbox = self.sandbox, None
                if isinstance(finished, SandboxBackend):  # its processes die now, the rest later
                    finished.stop_agent()
            else:
                self.sandbox.close()
        self.workspace = None
        self.done = True
        return finished


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


# how long a spare's worker waits for the spare's tool server to say it is up (then hands it out anyway)
PRIME_WAIT_S = 10.0
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
    if text.isascii():  # the usual case, without encoding a copy
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _content_text(action: Any) -> str:
    """The text of an action's content, whatever type the content has."""
    return valid_text(message_text(action.get("content") if isinstance(action, Mapping) else action))


UNKNOWN_TOOL = "unknown_tool"  # canonical name, for graders, of a call to a tool the harness does not have
UNAVAILABLE_TOOL = "unavailable_tool"  # canonical name, for graders, of a call to a decoy (it ran nothing)


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


def make_env(harness: Any, tasks: str | Sequence[Task] | None = None, **options: Any) -> HarnessEnv:
    """The one way to build an environment from (harness, tasks, options): ``harness`` is any
    reference :meth:`Harness.resolve` takes, ``options`` are ``HarnessEnv``'s (``sandbox``,
    ``sandbox_options``, ``max_steps``, ``world``, ...). Bench, evolution, the checks and the
    RL-library adapters all build theirs here."""
    return HarnessEnv(Harness.resolve(harness), tasks=tasks, **options)


def make_spec_env(spec: Mapping[str, Any] | str | Path | None = None, **kwargs: Any) -> HarnessEnv:
    """Entry point of ``gym.make("HarnessAdapt", spec=...)``: any spec file or mapping as an environment."""
    if spec is None:
        raise ValueError(
            'HarnessAdapt needs a harness spec: gym.make("HarnessAdapt", spec="path/to/spec.yaml") '
            "or a spec mapping; presets are registered as HarnessAdapt-H0/H1/H2"
        )
    return HarnessEnv(spec=spec, **kwargs)
