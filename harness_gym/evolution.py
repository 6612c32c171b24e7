"""Evolving the harness with the policy (HarnessAdapt-RL, the paper's method section).

One round: a proposer reads the current policy's trajectories and the current spec and proposes a
candidate spec; the candidate must pass validation (schema, then a sandbox smoke test: every new
tool runs, every hook fires on a synthetic trajectory); the candidate and the current harness are
compared on the same tasks, seeds, policy, skills and budget; the acceptance rule decides; every
proposal is appended to an audit log. :func:`evolve` runs up to ``rounds`` such rounds.
"""

from __future__ import annotations

import copy
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harness_gym.agents import EpisodeResult
from harness_gym.episode import run_suite
from harness_gym.errors import HarnessSpecError
from harness_gym.hooks import EVENTS, PREDICATES, CallRecord, EpisodeState, Hook
from harness_gym.llm_client import ChatClient, LLMError
from harness_gym.metrics import Outcome, RateSummary, paired_bootstrap, pass_rate, trainable_rate
from harness_gym.sandboxes.base import Sandbox, SandboxFactory, choose_backend, create_sandbox
from harness_gym.spec import SpecError, diff_specs, resolve_spec, spec_hash, tool_library, validate_spec
from harness_gym.tasks import Task
from harness_gym.tools import ToolContext, run_tool
from harness_gym.tools.roles import tool_role

# ----------------------------------------------------------------------------- proposals


@dataclass
class Proposal:
    """A candidate spec and the proposer's reasoning."""

    spec: dict[str, Any]
    rationale: str = ""


class Proposer(Protocol):
    def propose(self, spec: Mapping[str, Any], trajectories: Sequence[EpisodeResult]) -> Proposal: ...


class ProposalError(HarnessSpecError):
    """The proposer's output could not be turned into a spec."""


def apply_changes(spec: Mapping[str, Any], changes: Mapping[str, Any]) -> dict[str, Any]:
    """Apply a change set: ``add_tools`` / ``add_hooks`` (library names or full entries),
    ``remove_tools`` / ``remove_hooks`` (names), ``set`` (a spec overlay)."""
    out = copy.deepcopy(dict(spec))
    for section in ("tools", "hooks"):
        removed = set(changes.get(f"remove_{section}", []))
        kept = [item for item in out.get(section, []) if item["name"] not in removed]
        for item in changes.get(f"add_{section}", []):
            entry = {"use": item} if isinstance(item, str) else dict(item)
            kept.append(entry)
        out[section] = kept
    for key, value in (changes.get("set") or {}).items():
        if key in ("tools", "hooks", "version"):
            raise ProposalError(f"'set' may not replace {key!r}; use add_/remove_ changes")
        out[key] = copy.deepcopy(value)
    try:
        resolved = resolve_spec(out)
    except SpecError as exc:
        raise ProposalError(str(exc)) from exc
    # a tool added before the finishing tool keeps the finishing tool last, for readability
    resolved["tools"].sort(key=lambda t: t.get("implementation") == "finish")
    return resolved


class ScriptedProposer:
    """Proposes a fixed sequence of change sets (for tests and ablations)."""

    def __init__(self, change_sets: Sequence[Mapping[str, Any]], rationale: str = "scripted") -> None:
        self.change_sets = list(change_sets)
        self.rationale = rationale
        self.calls = 0

    def propose(self, spec: Mapping[str, Any], trajectories: Sequence[EpisodeResult]) -> Proposal:
        if self.calls >= len(self.change_sets):
            raise ProposalError("the scripted proposer has no proposals left")
        changes = self.change_sets[self.calls]
        self.calls += 1
        return Proposal(apply_changes(spec, changes), f"{self.rationale} #{self.calls}")


HARNESS_TEACHER_PROMPT = """You improve the harness of a software agent: the tools and runtime hooks around a fixed policy.
You are given the current harness and trajectories of the policy using it (successes and failures).
Diagnose what the harness fails to support, design a change, and implement it as a change set.

Rules:
- Tools run inside the agent's sandbox. Prefer library tools by name: {tools}.
  A new tool may instead be {{"name", "description", "parameters" (JSON schema), "implementation":
  {{"command": "shell template with {{argument}} placeholders"}} or {{"python": "script reading json from sys.argv[1]"}},
  "example": {{arguments for a smoke test}}}}.
- Hooks inject a message when an event fires. Prefer library hooks by name: {hooks}. A new hook is
  {{"name", "event" (one of {events}), "when" (conditions from {conditions}), "message"}}.
- Change little at a time; the change is kept only if neither pass rate nor trainable rate drops.

Answer with one JSON object and nothing else:
{{"diagnosis": "...", "design": "...", "changes": {{"add_tools": [], "remove_tools": [], "add_hooks": [], "remove_hooks": []}}}}"""


def extract_json(text: str) -> dict[str, Any]:
    """The first JSON object in a model's reply (bare or in a fenced block)."""
    match = re.search(r"\{.*\}", text, re.DOTALL)
    if not match:
        raise ProposalError(f"the reply holds no JSON object: {text[:200]!r}")
    try:
        value = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        raise ProposalError(f"the reply's JSON is invalid ({exc.msg}): {match.group(0)[:200]!r}") from exc
    if not isinstance(value, dict):
        raise ProposalError("the reply's JSON is not an object")
    return value


class TeacherProposer:
    """A harness teacher over any OpenAI-compatible endpoint (diagnosis, design, implementation in one call)."""

    def __init__(self, client: ChatClient, max_trajectories: int = 8, temperature: float = 0.7) -> None:
        self.client = client
        self.max_trajectories = max_trajectories
        self.temperature = temperature

    def prompt(self, spec: Mapping[str, Any], trajectories: Sequence[EpisodeResult]) -> list[dict[str, str]]:
        library = tool_library()
        system = HARNESS_TEACHER_PROMPT.format(
            tools=", ".join(sorted(library["tools"])),
            hooks=", ".join(sorted(library["hooks"])),
            events=", ".join(EVENTS),
            conditions=", ".join(sorted(PREDICATES)),
        )
        current = {
            "tools": [t["name"] for t in spec["tools"]],
            "hooks": [h["name"] for h in spec.get("hooks", [])],
            "budget": spec["budget"],
        }
        chosen = sorted(trajectories, key=lambda r: r.reward)[: self.max_trajectories]
        body = (
            "Current harness:\n"
            + json.dumps(current, indent=1)
            + "\n\nTrajectories:\n\n"
            + "\n\n".join(t.render() for t in chosen)
        )
        return [{"role": "system", "content": system}, {"role": "user", "content": body}]

    def propose(self, spec: Mapping[str, Any], trajectories: Sequence[EpisodeResult]) -> Proposal:
        try:
            reply = self.client.complete(self.prompt(spec, trajectories), temperature=self.temperature)
        except LLMError as exc:
            raise ProposalError(f"the harness teacher failed: {exc}") from exc
        answer = extract_json(reply)
        changes = answer.get("changes")
        if not isinstance(changes, dict):
            raise ProposalError("the teacher's answer has no 'changes' object")
        rationale = f"diagnosis: {answer.get('diagnosis', '')}\ndesign: {answer.get('design', '')}"
        return Proposal(apply_changes(spec, changes), rationale)


# ----------------------------------------------------------------------------- validation


@dataclass
class ValidationReport:
    ok: bool
    problems: list[str] = field(default_factory=list)
    checked_tools: list[str] = field(default_factory=list)
    checked_hooks: list[str] = field(default_factory=list)


def synthetic_state(hook_spec: Mapping[str, Any], max_steps: int = 60) -> tuple[EpisodeState, CallRecord | None]:
    """An episode state built to satisfy every condition of a hook (for its smoke test)."""
    when = hook_spec.get("when", {})
    state = EpisodeState(step=10, max_steps=max_steps, context_limit_chars=100_000)
    name = (when.get("tool_in") or ["bash"])[0]
    role = (when.get("role_in") or ["shell"])[0]

    def call(i: int, error: bool = False, edit: bool = False, args: Any = None) -> CallRecord:
        arguments = {"a": args if args is not None else 0}
        return CallRecord(i, name, name, arguments, 1 if error else 0, error, edit, False, role)

    calls: list[CallRecord] = [call(0)]
    if "ping_pong_at_least" in when:
        calls = [call(i, args=i % 2) for i in range(max(when["ping_pong_at_least"], 4))]
    if "repeated_call_at_least" in when:
        calls = [call(i) for i in range(when["repeated_call_at_least"])]
    if when.get("edited_since_check"):
        calls.append(call(len(calls), edit=True, args="edit"))
    if "consecutive_errors_at_least" in when or when.get("exit_code_nonzero"):
        count = when.get("consecutive_errors_at_least", 1)
        calls += [call(len(calls) + i, error=True, args=f"e{i}") for i in range(count)]
    state.calls = calls
    if "steps_remaining_at_most" in when:
        state.step = max_steps - when["steps_remaining_at_most"]
    if "every_n_steps" in when:
        state.step = when["every_n_steps"]
    state.context_chars = max(when.get("context_chars_at_least", 0), when.get("context_percent_at_least", 0) * 1000)
    return state, calls[-1]


def validate_candidate(
    candidate: Mapping[str, Any],
    current: Mapping[str, Any] | None = None,
    *,
    sandbox: str | SandboxFactory | None = None,
    sandbox_options: Mapping[str, Any] | None = None,
) -> ValidationReport:
    """Schema first; then every new tool runs in a real sandbox and every new hook fires on a
    synthetic trajectory. A tool passes if it returns an exit status (a crash or timeout fails)."""
    try:
        validate_spec(candidate)
    except SpecError as exc:
        return ValidationReport(False, [str(exc)])
    problems: list[str] = []
    old_tools = {t["name"]: t for t in (current or {}).get("tools", [])}
    new_tools = [
        t for t in candidate["tools"] if old_tools.get(t["name"]) != t and tool_role(t) not in ("finish", "unavailable")
    ]
    old_hooks = {h["name"]: h for h in (current or {}).get("hooks", [])}
    new_hooks = [h for h in candidate.get("hooks", []) if old_hooks.get(h["name"]) != h]
    report = ValidationReport(True, problems, [t["name"] for t in new_tools], [h["name"] for h in new_hooks])
    if new_tools:
        box: Sandbox = create_sandbox(choose_backend(sandbox, None), None, **dict(sandbox_options or {}))
        try:
            workspace = box.new_workspace()
            (workspace / "README.md").write_text("smoke test\n")
            (workspace / "module.py").write_text("def answer():\n    return 42\n")
            (workspace / "test_module.py").write_text(
                "import unittest\nfrom module import answer\n\n\nclass T(unittest.TestCase):\n    def test(self):\n        self.assertEqual(answer(), 42)\n"
            )
            box.start(workspace, "/workspace")
            box.run_tool("library.py", {"op": "snapshot", "args": {}, "root": "/workspace"})
            for tool in new_tools:
                required = tool["parameters"].get("required", [])
                example = tool.get("example")
                if example is None and required:
                    problems.append(
                        f"tool {tool['name']}: has required parameters but no 'example' to smoke-test it with"
                    )
                    continue
                result = run_tool(
                    tool["implementation"], example or {}, ToolContext(box, "/workspace", 30.0, tool["name"])
                )
                if result.exit_code is None:
                    problems.append(f"tool {tool['name']}: did not finish in the smoke test: {result.output[-300:]}")
                elif "Traceback (most recent call last)" in result.output:
                    problems.append(f"tool {tool['name']}: crashed in the smoke test: {result.output[-300:]}")
        finally:
            box.close()
    for hook_spec in new_hooks:
        try:
            hook = Hook(hook_spec)
        except ValueError as exc:
            problems.append(str(exc))
            continue
        state, call = synthetic_state(hook_spec, candidate["budget"]["max_steps"])
        try:
            fired = hook.fire(state, call)
        except Exception as exc:  # a trusted plugin may raise anything
            problems.append(f"hook {hook.name}: raised {type(exc).__name__}: {exc}")
            continue
        if fired is None:
            problems.append(f"hook {hook.name}: did not fire on a synthetic trajectory meeting its conditions")
    report.ok = not problems
    return report


# ----------------------------------------------------------------------------- comparison and acceptance


Policy = Callable[[], Any]  # builds a fresh agent (act(observation), optional reset(env))


@dataclass
class ComparisonSide:
    spec_hash: str
    results: list[EpisodeResult]

    @property
    def outcomes(self) -> list[Outcome]:
        return [Outcome(r.task_id, r.reward, r.truncated) for r in self.results]


def rollout(
    spec: Mapping[str, Any],
    policy: Policy,
    tasks: Sequence[Task],
    rollouts_per_task: int,
    *,
    seed: int = 0,
    env_options: Mapping[str, Any] | None = None,
) -> ComparisonSide:
    """Run ``rollouts_per_task`` episodes of every task under ``spec`` (the one episode loop and seed
    convention: seeds depend only on task and run, so both sides of a comparison are paired)."""
    episodes = run_suite(spec, policy, tasks, runs=rollouts_per_task, seed=seed, env_options=env_options)
    return ComparisonSide(spec_hash(spec), [e.result for e in episodes])


def compare(
    current: Mapping[str, Any],
    candidate: Mapping[str, Any],
    policy: Policy,
    tasks: Sequence[Task],
    rollouts_per_task: int = 4,
    *,
    seed: int = 0,
    env_options: Mapping[str, Any] | None = None,
) -> tuple[ComparisonSide, ComparisonSide]:
    """The paired comparison: same tasks, seeds, policy, skills and budget on both sides."""
    return (
        rollout(current, policy, tasks, rollouts_per_task, seed=seed, env_options=env_options),
        rollout(candidate, policy, tasks, rollouts_per_task, seed=seed, env_options=env_options),
    )


@dataclass
class Decision:
    accepted: bool
    reason: str
    current: dict[str, Any]
    candidate: dict[str, Any]
    intervals: dict[str, list[float]] = field(default_factory=dict)


def accept(
    current: Sequence[Outcome],
    candidate: Sequence[Outcome],
    *,
    mode: str = "paper",
    confidence: float = 0.95,
    margin: float = 0.0,
    resamples: int = 2000,
    seed: int = 0,
) -> Decision:
    """The acceptance rule.

    ``paper``: accept only if neither pass rate nor trainable rate drops and at least one strictly
    rises (one rate may not buy the other). ``bootstrap``: the same with evidence: for both rates the
    paired-bootstrap lower bound of (candidate − current) must be at least ``-margin``, and for at
    least one rate it must be above zero.
    """
    cur, cand = RateSummary.of(current), RateSummary.of(candidate)
    d_pass = cand.pass_rate - cur.pass_rate
    d_train = cand.trainable_rate - cur.trainable_rate
    base: dict[str, Any] = {"current": cur.as_dict(), "candidate": cand.as_dict()}
    if mode == "paper":
        if d_pass < 0 or d_train < 0:
            dropped = "pass rate" if d_pass < 0 else "trainable rate"
            return Decision(False, f"{dropped} dropped (pass {d_pass:+.3f}, trainable {d_train:+.3f})", **base)
        if d_pass == 0 and d_train == 0:
            return Decision(False, "neither rate rose", **base)
        return Decision(
            True, f"no rate dropped and at least one rose (pass {d_pass:+.3f}, trainable {d_train:+.3f})", **base
        )
    if mode != "bootstrap":
        raise ValueError(f"unknown acceptance mode {mode!r}; use 'paper' or 'bootstrap'")
    p = paired_bootstrap(current, candidate, pass_rate, resamples=resamples, confidence=confidence, seed=seed)
    t = paired_bootstrap(current, candidate, trainable_rate, resamples=resamples, confidence=confidence, seed=seed)
    intervals = {"pass_rate": [p.estimate, p.low, p.high], "trainable_rate": [t.estimate, t.low, t.high]}
    if p.low < -margin or t.low < -margin:
        return Decision(
            False,
            f"a drop cannot be ruled out at {confidence:.0%} (pass ≥ {p.low:+.3f}, trainable ≥ {t.low:+.3f})",
            intervals=intervals,
            **base,
        )
    if p.low <= 0 and t.low <= 0:
        return Decision(
            False,
            f"no rise is established at {confidence:.0%} (pass ≥ {p.low:+.3f}, trainable ≥ {t.low:+.3f})",
            intervals=intervals,
            **base,
        )
    return Decision(
        True,
        f"a rise is established at {confidence:.0%} and no drop (pass ≥ {p.low:+.3f}, trainable ≥ {t.low:+.3f})",
        intervals=intervals,
        **base,
    )


# ----------------------------------------------------------------------------- audit log and the loop


class AuditLog:
    """Append-only JSON lines: one entry per proposal, whatever became of it."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def append(self, entry: Mapping[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"time": time.time(), **entry}, ensure_ascii=False) + "\n")
            handle.flush()

    def entries(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]


@dataclass
class EvolutionResult:
    spec: dict[str, Any]
    accepted_rounds: list[int]
    entries: list[dict[str, Any]]


def evolve(
    spec: Mapping[str, Any],
    proposer: Proposer,
    policy: Policy,
    tasks: Sequence[Task],
    *,
    rounds: int = 5,
    rollouts_per_task: int = 4,
    prep_rollouts_per_task: int = 4,
    mode: str = "paper",
    audit_log: AuditLog | None = None,
    seed: int = 0,
    env_options: Mapping[str, Any] | None = None,
    on_round: Callable[[int, Decision | None], None] | None = None,
    prep: Sequence[EpisodeResult] | None = None,
) -> EvolutionResult:
    """Up to ``rounds`` rounds of propose → validate → compare → accept, starting from ``spec``.

    ``prep``: trajectories of the current policy on ``spec`` already rolled out (the trainer's prep
    rollouts, which the skill teacher also reads); without it they are rolled out here."""
    current = resolve_spec(spec)
    validate_spec(current)
    accepted: list[int] = []
    entries: list[dict[str, Any]] = []
    if prep is None:
        prep = rollout(current, policy, tasks, prep_rollouts_per_task, seed=seed + 7, env_options=env_options).results
    prep = list(prep)
    for round_index in range(1, rounds + 1):
        entry: dict[str, Any] = {"round": round_index, "current_hash": spec_hash(current)}
        decision: Decision | None = None
        try:
            proposal = proposer.propose(current, prep)
        except ProposalError as exc:
            entry.update(decision="rejected", reason=f"proposal failed: {exc}")
        else:
            entry.update(
                candidate_hash=spec_hash(proposal.spec),
                rationale=proposal.rationale,
                diff=diff_specs(current, proposal.spec),
            )
            report = validate_candidate(proposal.spec, current, sandbox=(env_options or {}).get("sandbox"))
            entry["validation"] = {
                "ok": report.ok,
                "problems": report.problems,
                "tools": report.checked_tools,
                "hooks": report.checked_hooks,
            }
            if not report.ok:
                entry.update(decision="rejected", reason="validation failed: " + "; ".join(report.problems))
            else:
                before, after = compare(
                    current, proposal.spec, policy, tasks, rollouts_per_task, seed=seed, env_options=env_options
                )
                decision = accept(before.outcomes, after.outcomes, mode=mode, seed=seed)
                entry.update(
                    decision="accepted" if decision.accepted else "rejected",
                    reason=decision.reason,
                    rates={"current": decision.current, "candidate": decision.candidate},
                    intervals=decision.intervals,
                )
                if decision.accepted:
                    current = proposal.spec
                    accepted.append(round_index)
                    prep = after.results
        entries.append(entry)
        if audit_log is not None:
            audit_log.append(entry)
        if on_round is not None:
            on_round(round_index, decision)
    return EvolutionResult(current, accepted, entries)
