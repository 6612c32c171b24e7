"""Bounded steps: validated sandbox_options, command_timeout_s as the ceiling of every command,
per-action time and call budgets, and no NaN / infinite / negative durations in specs or tasks."""

import json
import time

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.factors import compile_config
from harness_gym.sandboxes import create_sandbox
from harness_gym.sandboxes.options import DEFAULTS, SandboxOptions, SandboxOptionsError
from harness_gym.spec import SpecError, load_spec, validate_spec
from harness_gym.tasks import Task
from harness_gym.tasks.base import TaskError

TASK = "workspace-config-update"


def test_unknown_option_is_refused_with_the_valid_ones():
    with pytest.raises(SandboxOptionsError, match=r"unknown sandbox_options \['memory_gb'\].*memory_mb"):
        HarnessEnv("S0T0O0C0W0", sandbox_options={"memory_gb": 4})


@pytest.mark.parametrize(
    "options",
    [
        {"command_timeout_s": float("nan")},
        {"command_timeout_s": float("inf")},
        {"command_timeout_s": -1},
        {"command_timeout_s": "2"},
        {"memory_mb": True},
        {"memory_mb": 1.5},
        {"max_processes": 0},
        {"cpus": float("nan")},
        {"strict_limits": "yes"},
        {"extra_ro_binds": {"/x": 3}},
    ],
)
def test_bad_values_are_refused(options):
    with pytest.raises(SandboxOptionsError, match=next(iter(options))):
        SandboxOptions.from_mapping(options)


def test_an_option_the_backend_would_ignore_is_refused():
    with pytest.raises(SandboxOptionsError, match=r"\['memory_mb'\] do not apply to the 'unsafe-host' backend"):
        create_sandbox("unsafe-host", memory_mb=256, allow_unsandboxed=True)


def test_defaults_have_one_home():
    from harness_gym.sandboxes import BubblewrapSandbox

    box = BubblewrapSandbox()
    assert (box.memory_mb, box.max_processes, box.command_timeout_s) == (
        DEFAULTS.memory_mb,
        DEFAULTS.max_processes,
        DEFAULTS.command_timeout_s,
    )


def _bash(env, arguments, name="execute_bash"):
    obs, _, _, _, info = env.step(f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>")
    return [m["content"] for m in obs["messages"] if m["role"] == "tool"][-len(info["parsed_calls"]) :], info


@requires_bwrap
def test_command_timeout_is_the_ceiling_of_agent_chosen_timeouts():
    env = HarnessEnv("S0T0O0C0W0", sandbox_options={"command_timeout_s": 1})
    env.reset(seed=0, options={"task_id": TASK})
    started = time.monotonic()
    (out,), info = _bash(env, {"command": "sleep 5; echo late", "timeout": 600})
    assert time.monotonic() - started < 4
    assert "timed out after 1 s" in out and "capped at 1 s" in out and "late" not in out
    for bad in ("nan", "inf", -3, "soon"):
        (out,), _ = _bash(env, {"command": "echo ran", "timeout": bad})
        assert out.startswith("Error: timeout must be") or "ran" not in out
    (out,), _ = _bash(env, {"command": "echo next"})
    assert "next" in out  # observations still belong to their own commands
    env.close()


@requires_bwrap
def test_claude_code_bash_timeout_in_ms_is_clamped():
    env = HarnessEnv(spec="harness_gym/presets/claude_code_style.yaml", sandbox_options={"command_timeout_s": 1})
    env.reset(seed=0, options={"task_id": TASK})
    started = time.monotonic()
    (out,), _ = _bash(env, {"command": "sleep 4", "timeout": 1e12}, name="Bash")
    assert time.monotonic() - started < 3.5 and "capped at 1 s" in out
    env.close()


@requires_bwrap
def test_per_action_call_and_time_budgets():
    spec = compile_config("S0T0O0C0W0")
    spec["budget"].update(max_tool_calls_per_step=2, step_time_limit_s=1.5)
    env = HarnessEnv(spec=spec)
    env.reset(seed=0, options={"task_id": TASK})
    call = '<tool_call>{"name": "execute_bash", "arguments": {"command": "echo %s"}}</tool_call>'
    obs, _, _, _, info = env.step("".join(call % i for i in range(4)))
    outputs = [m["content"] for m in obs["messages"] if m["role"] == "tool"][-4:]
    assert "0" in outputs[0] and "1" in outputs[1]
    assert all(o.startswith("Not executed: at most 2 tool calls") for o in outputs[2:])
    # each call would sleep 30 s; the step's 1.5 s budget cuts the first and leaves the second nothing.
    # The bound is generous (a loaded machine adds seconds, never the 30 s a call would take unbounded)
    started = time.monotonic()
    sleep = '<tool_call>{"name": "execute_bash", "arguments": {"command": "sleep 30; echo done"}}</tool_call>'
    obs, _, _, _, info = env.step(sleep * 2)
    assert time.monotonic() - started < 25
    first, second = [m["content"] for m in obs["messages"] if m["role"] == "tool"][-2:]
    assert "done" not in first and "done" not in second
    assert all("timed out" in o or "time budget" in o for o in (first, second))
    env.close()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_specs_refuse_bad_durations(value, tmp_path):
    spec = compile_config("S0T0O0C0W0")
    spec["budget"]["command_timeout_s"] = value
    with pytest.raises(SpecError, match="command_timeout_s"):
        validate_spec(spec)


def test_yaml_nan_in_a_spec_file_is_refused(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("extends: harnessadapt_h0\nname: nan\nbudget: {max_steps: 5, step_time_limit_s: .nan}\n")
    with pytest.raises(SpecError, match="step_time_limit_s"):
        load_spec(path)


@pytest.mark.parametrize("field", ["grader_timeout_s", "time_limit_s"])
@pytest.mark.parametrize("value", [float("nan"), float("inf"), -5.0, 0])
def test_tasks_refuse_bad_durations(field, value):
    with pytest.raises(TaskError, match=field):
        Task(id="t", instruction="x", **{field: value})
