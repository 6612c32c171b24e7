"""The front door: Harness.resolve from every kind of reference, the budget's defaults in one home,
one effective command timeout, tool roles from the spec, step stages, one episode loop and seed."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest
from conftest import requires_bwrap

import harness_gym
from harness_gym import HarnessEnv, HarnessGymError, HarnessSpecError
from harness_gym.budget import BUDGET_DEFAULTS, Budget, effective_command_timeout
from harness_gym.env import CallOutcome, make_env
from harness_gym.factors import compile_config
from harness_gym.harness import Harness
from harness_gym.metrics import tool_calls_by_role
from harness_gym.presets import PRESETS, load_preset, preset_path
from harness_gym.records import episode_seed, plan_episodes, resolve_harnesses
from harness_gym.sandboxes.options import SandboxOptions, SandboxOptionsError
from harness_gym.sandboxes.shell import ShellSandbox
from harness_gym.space import all_configs
from harness_gym.spec import save_spec, spec_schema, tool_library
from harness_gym.tasks import load_tasks
from harness_gym.tool_calls import ToolCall
from harness_gym.tools.roles import ROLES, tool_role

ROOT = Path(__file__).resolve().parent.parent

# ---------------------------------------------------------------------------- Harness.resolve


def test_every_kind_of_reference_resolves_to_the_same_harness(tmp_path):
    config = Harness.resolve("S1T2O0C1W2")
    for ref in ("Harness-S1T2O0C1W2", "harness_gym/Harness-S1T2O0C1W2-v0", "12012", " S1T2O0C1W2 "):
        assert Harness.resolve(ref) == config, ref
    assert Harness.resolve(harness_gym.HarnessConfig.parse("S1T2O0C1W2")) == config
    assert config.spec == compile_config("S1T2O0C1W2") and config.spec_hash == harness_gym.spec_hash(config.spec)
    assert (config.config, config.name, config.factors) == (
        "S1T2O0C1W2",
        "Harness-S1T2O0C1W2",
        {"S": 1, "T": 2, "O": 0, "C": 1, "W": 2},
    )
    assert Harness.resolve(config) is config  # a Harness is returned as it is

    preset = Harness.resolve("Harness-ClaudeCodeStyle")
    assert Harness.resolve("harness_gym/Harness-ClaudeCodeStyle-v0").spec_hash == preset.spec_hash
    assert Harness.resolve(str(preset_path("Harness-ClaudeCodeStyle"))).spec_hash == preset.spec_hash
    assert preset.spec == load_preset("Harness-ClaudeCodeStyle") and preset.config is None and preset.factors is None

    as_json = tmp_path / "h.json"
    save_spec(preset.spec, as_json)
    assert Harness.resolve(as_json).spec_hash == Harness.resolve(str(as_json)).spec_hash == preset.spec_hash

    # a mapping, with the spec language's `extends` and library `use`
    inline = {"extends": "claude_code_style", "name": "Inline", "tools": [{"use": "cc_bash"}, {"use": "cc_write"}]}
    resolved = Harness.resolve(inline)
    assert resolved.name == "Inline" and [t.name for t in resolved.tools] == ["Bash", "Write"]
    assert resolved.source == "inline spec"


def test_harness_is_frozen_and_its_spec_a_copy():
    harness = Harness.resolve("S0T0O0C0W0")
    with pytest.raises(dataclasses.FrozenInstanceError):
        harness.name = "other"  # type: ignore[misc]
    spec = harness.spec
    spec["budget"]["max_steps"] = 1
    assert harness.budget.max_steps == 30 and harness.spec["budget"]["max_steps"] == 30
    changed = harness.with_changes(max_steps=5, tool_call_format="xml")
    assert changed.budget.max_steps == 5 and changed.spec["tool_call_format"] == "xml"
    assert changed.spec_hash != harness.spec_hash and harness.budget.max_steps == 30


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        ("nope", "unknown harness 'nope'"),
        ("S9T0O0C0W0", "malformed harness configuration id"),
        ("missing.yaml", "harness spec file missing.yaml does not exist"),
        ("", "empty"),
        (3, "cannot be a int"),
        ({"name": "x"}, "invalid harness spec"),
    ],
)
def test_a_bad_reference_is_a_harness_spec_error_listing_what_is_accepted(ref, message):
    with pytest.raises(HarnessSpecError, match=re.escape(message)) as caught:
        Harness.resolve(ref)
    assert isinstance(caught.value, HarnessGymError) and isinstance(caught.value, ValueError)
    if isinstance(ref, int) or ref in ("nope", ""):
        for accepted in ("configuration id", "environment id", "a preset", "HarnessAdapt-H1", "spec file"):
            assert accepted in str(caught.value)


def test_every_front_door_takes_the_same_references(tmp_path):
    """env, make_env, rollout requests and bench selection all go through Harness.resolve."""
    from harness_gym.rollout_requests import RolloutError, resolve_harness

    reference = "harness_gym/HarnessAdapt-H1-v0"
    expected = Harness.resolve(reference).spec_hash
    assert HarnessEnv(reference).spec_hash == expected
    assert HarnessEnv(spec=Harness.resolve(reference)).spec_hash == expected
    assert make_env(reference, tasks="builtin").spec_hash == expected
    assert resolve_harness(reference).spec_hash == expected
    assert [c.env_id for c in resolve_harnesses(f"{reference},harness_gym/Harness-S0T0O0C0W2-v0")] == [
        "HarnessAdapt-H1",
        "Harness-S0T0O0C0W2",
    ]
    with pytest.raises(RolloutError, match="unknown harness"):
        resolve_harness("S9T9O9C9W9")
    with pytest.raises(HarnessSpecError, match="does not exist"):
        resolve_harnesses(str(tmp_path / "none.yaml"))


# ---------------------------------------------------------------------------- budget and options


def test_the_budget_defaults_have_one_home():
    schema = spec_schema()["properties"]["budget"]["properties"]
    defaults = {name: field["default"] for name, field in schema.items() if "default" in field}
    assert defaults == BUDGET_DEFAULTS and {"command_timeout_s", "output_limit_chars"} <= set(defaults)
    budget = Budget(max_steps=1)
    options = SandboxOptions()
    shell = {k: v.default for k, v in inspect.signature(ShellSandbox.__init__).parameters.items()}
    assert (
        budget.command_timeout_s
        == options.command_timeout_s
        == shell["command_timeout_s"]
        == defaults["command_timeout_s"]
    )
    assert budget.output_limit_chars == options.output_limit_chars == shell["output_limit_chars"]
    assert budget.output_limit_chars == defaults["output_limit_chars"]
    # no Python module writes the numbers again as a default of its own
    pattern = re.compile(r"(command_timeout_s|output_limit_chars)\s*:\s*(float|int)\s*=\s*[0-9]")
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "harness_gym").rglob("*.py")
        if "tasks/builtin" not in str(path) and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_budget_is_typed_and_refuses_unknown_fields():
    budget = Harness.resolve("Harness-ClaudeCodeStyle").budget
    assert budget == Budget(60, 120.0, 30000, 600.0, 32, 200000)
    assert isinstance(budget.command_timeout_s, float)
    with pytest.raises(HarnessSpecError, match="unknown budget fields \\['bogus'\\]; valid fields: max_steps"):
        Budget.from_spec({"max_steps": 3, "bogus": 1})
    with pytest.raises(SandboxOptionsError, match="unknown sandbox_options \\['timeout'\\]; valid options"):
        HarnessEnv(sandbox_options={"timeout": 3})


def test_the_effective_command_timeout_is_the_least_of_its_limits():
    assert effective_command_timeout(60.0) == (60.0, "")
    assert effective_command_timeout(60.0, 12.5) == (12.5, "")
    assert effective_command_timeout(10.0, 100.0, requested=5) == (5.0, "")
    assert effective_command_timeout(10.0, 100.0, requested=30) == (
        10.0,
        "[timeout capped at 10 s, the limit per command]",
    )
    assert effective_command_timeout(10.0, 4.0, requested=30_000, unit_s=0.001) == (
        4.0,
        "[timeout capped at 4 s, the limit per command]",
    )
    assert effective_command_timeout(10.0, None, requested="nan")[0] is None
    assert effective_command_timeout(10.0, None, requested=-1)[0] is None
    # the sandbox ceiling: explicit sandbox_options win over the spec's budget, which wins over the default
    preset = "harness_gym/presets/claude_code_style.yaml"
    assert HarnessEnv(spec=preset).sandbox_options.command_timeout_s == 120.0
    assert HarnessEnv(spec=preset, sandbox_options={"command_timeout_s": 7}).sandbox_options.command_timeout_s == 7
    assert HarnessEnv("S0T0O0C0W0").sandbox_options.command_timeout_s == BUDGET_DEFAULTS["command_timeout_s"]


# ---------------------------------------------------------------------------- tool roles


def test_every_packaged_tool_declares_its_role():
    library = tool_library()["tools"]
    assert all(entry.get("role") in ROLES for entry in library.values()), "a library tool without a role"
    specs = [load_preset(name) for name in PRESETS] + [compile_config(c) for c in list(all_configs())[::40]]
    roles = {tool["role"] for spec in specs for tool in spec["tools"]}
    assert {"shell", "edit", "finish", "unavailable", "read", "test", "search"} <= roles
    claude = {t.name: t.role for t in Harness.resolve("Harness-ClaudeCodeStyle").tools}
    assert claude["Bash"] == "shell" and claude["Edit"] == claude["Write"] == "edit" and claude["Grep"] == "search"


def test_a_role_is_data_checked_with_the_choices_listed():
    assert tool_role({"name": "t", "implementation": "bash_ms"}) == "shell"  # from the implementation
    assert tool_role({"name": "t", "implementation": {"command": "make"}}) == "shell"
    assert tool_role({"name": "t", "implementation": "library:x", "tags": ["check"]}) == "test"  # from a tag
    assert tool_role({"name": "t", "implementation": "library:x", "role": "view"}) == "view"
    with pytest.raises(HarnessSpecError, match="unknown role 'poke'; roles: shell"):
        tool_role({"name": "t", "implementation": "bash", "role": "poke"})
    with pytest.raises(HarnessSpecError, match="role 'finish'"):
        tool_role({"name": "t", "implementation": "bash", "role": "finish"})
    spec = load_preset("HarnessAdapt-H0")
    spec["tools"][0]["role"] = "poke"
    with pytest.raises(HarnessSpecError, match="poke"):
        Harness.resolve(spec)


@requires_bwrap
def test_hooks_see_edits_and_test_runs_made_through_claude_code_style_tools():
    spec = load_preset("Harness-ClaudeCodeStyle")
    spec["hooks"] = [
        {"name": "unverified", "event": "tool_call", "when": {"edited_since_check": True}, "message": "untested"},
        {"name": "shell_used", "event": "tool_call", "when": {"role_in": ["shell"]}, "message": "shell"},
    ]
    env = HarnessEnv(spec=spec, tasks="builtin")
    env.reset(seed=0)
    root = env.task.mount_path

    env_infos: list[dict] = []

    def act(name: str, **arguments: object) -> dict:
        env_infos.append(env.step(f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>")[4])
        return env_infos[-1]

    try:
        info = act("Write", file_path=f"{root}/note.py", content="x = 1\n")
        assert info["exit_codes"] == [0] and info["hooks_fired"] == ["unverified"]
        info = act("Edit", file_path=f"{root}/note.py", old_string="x = 1", new_string="x = 2")
        assert info["exit_codes"] == [0] and info["hooks_fired"] == ["unverified"]
        info = act("Bash", command="python3 -m unittest -q 2>&1 | tail -1")
        assert info["hooks_fired"] == ["shell_used"]  # the test run cleared the unverified edit
        last = env.hook_state.calls[-1]
        assert (last.role, last.is_check, last.is_edit) == ("shell", True, False)
        info = act("Bash", command="echo 3 > note.txt")
        assert info["hooks_fired"] == ["unverified", "shell_used"]  # an edit through the shell
        assert [c.role for c in env.hook_state.calls] == ["edit", "edit", "shell", "shell"]
        assert tool_calls_by_role(env_infos) == {"edit": 2, "shell": 2}
    finally:
        env.close()


# ---------------------------------------------------------------------------- step stages


@requires_bwrap
def test_run_call_returns_an_outcome_and_changes_nothing_of_the_step():
    env = HarnessEnv("S0T0O0C0W0", tasks="builtin")
    env.reset(seed=0)
    try:
        arguments = {"command": "echo hi"}
        outcome = env._run_call(ToolCall("c1", "execute_bash", arguments, "hermes"), ceiling_s=5.0)
        assert isinstance(outcome, CallOutcome) and outcome.executed and outcome.exit_code == 0
        assert "hi" in outcome.answer and outcome.hook_call is not None and outcome.hook_call.role == "shell"
        assert arguments == {"command": "echo hi"} and env.records == [] and env.hook_state.calls == []
        unknown = env._run_call(ToolCall("c2", "nope", {}, "hermes"), ceiling_s=5.0)
        assert unknown.tool_error and not unknown.executed and unknown.hook_call.error
        # the step's stages: a second call past the action's call budget is refused, the first one ran
        env.budget = dataclasses.replace(env.budget, max_tool_calls_per_step=1)
        two = "".join(
            f"<tool_call>{json.dumps({'name': 'execute_bash', 'arguments': {'command': f'echo {i}'}})}</tool_call>"
            for i in range(2)
        )
        _, _, _, _, info = env.step(two)
        assert info["exit_codes"] == [0] and info["tool_errors"] == [
            "Not executed: at most 1 tool calls run per message."
        ]
        assert env.records[-1].calls[0]["role"] == "shell"
    finally:
        env.close()


# ---------------------------------------------------------------------------- one loop, one seed


def test_bench_evolution_and_check_share_one_seed_convention():
    from harness_gym.episode import suite_plan

    tasks = load_tasks("builtin")[:4]
    harnesses = resolve_harnesses("S0T0O0C0W0,Harness-ClaudeCodeStyle")
    bench = plan_episodes(harnesses, tasks, runs=2, seed=7)
    suite = suite_plan(tasks, runs=2, seed=7)
    for harness in harnesses:
        planned = [(p.task_id, p.run, p.seed) for p in bench if p.harness == harness]
        assert planned == [(t.id, r, s) for t, r, s in suite]
    assert [s for _, _, s in suite] == [episode_seed(7, i, r) for i in range(4) for r in range(2)]
    assert len({s for _, _, s in suite}) == 8  # distinct per (task, run)


@requires_bwrap
def test_run_suite_and_check_run_the_planned_seeds(tmp_path, monkeypatch):
    from harness_gym.agents import ReferenceAgent
    from harness_gym.cli import main
    from harness_gym.episode import run_suite, suite_plan

    tasks = [t for t in load_tasks("builtin") if t.solution][:2]
    seen: list[int] = []
    episodes = run_suite("S0T0O0C0W0", ReferenceAgent, tasks, runs=1, seed=3, on_episode=lambda e: seen.append(e.seed))
    assert [e.seed for e in episodes] == seen == [s for _, _, s in suite_plan(tasks, 1, 3)] == [3, 4]
    assert [e.result.reward for e in episodes] == [1.0, 1.0] and {e.harness for e in episodes} == {"Harness-S0T0O0C0W0"}
    # `harness-gym check` goes through the same loop (on these two tasks): it records the same seeds
    monkeypatch.setattr("harness_gym.cli.load_tasks", lambda selection: tasks)
    out = tmp_path / "check.jsonl"
    assert main(["check", "--configs", "S0T0O0C0W0", "--tasks", "builtin", "--seed", "3", "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(line["task"], line["seed"], line["reward"]) for line in lines] == [
        (t.id, s, 1.0) for t, _, s in suite_plan(tasks, 1, 3)
    ]
