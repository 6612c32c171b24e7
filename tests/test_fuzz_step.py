"""Any model output, of any shape, gives an observation and never an exception: property-based
fuzzing of ``env.step`` with hypothesis.

The high-volume part drives the real parse, validation, dispatch, observation and context code
against a cheap in-process sandbox stand-in (a real sandbox cannot take 10,000 examples per
format in CI time); the stand-in checks what a real sandbox needs (text that encodes, a finite
timeout within the ceiling). ``HARNESS_GYM_FUZZ_EXAMPLES`` sets the examples per tool-call format
and per preset (default 200; the issue's full run is ``HARNESS_GYM_FUZZ_EXAMPLES=10000``); the
examples for one tool set are drawn once and every environment with those tools (the 31 formats)
checks all of them. The end-to-end part runs a few examples through a real bubblewrap sandbox.
"""

import copy
import functools
import json
import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from conftest import requires_bwrap
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from harness_gym import HarnessEnv
from harness_gym.factors import compile_config
from harness_gym.presets import PRESETS
from harness_gym.sandboxes.base import CommandResult
from harness_gym.tool_calls import FORMATS

EXAMPLES = int(os.environ.get("HARNESS_GYM_FUZZ_EXAMPLES", "200"))
CEILING_S = 5.0
TASK = "workspace-config-update"


class StandInSandbox:
    """Answers instantly; fails the test where a real sandbox would choke."""

    def __init__(self) -> None:
        self.workspace: Path | None = None
        self.commands = 0

    def new_workspace(self) -> Path:
        self.close()
        self.workspace = Path(tempfile.mkdtemp(prefix="harness-gym-fuzz-"))
        return self.workspace

    def start(self, workspace, mount_path, hide=()) -> None:
        pass

    def _check(self, text: str, timeout_s: float | None) -> CommandResult:
        text.encode("utf-8")  # a real sandbox writes it: lone surrogates must not get here
        assert timeout_s is None or (math.isfinite(timeout_s) and 0 < timeout_s <= CEILING_S), timeout_s
        self.commands += 1
        return CommandResult(f"ok {self.commands}", 0, 0.0)

    def run(self, command, timeout_s=None):
        return self._check(command, timeout_s)

    def run_tool(self, script, payload, timeout_s=None):
        return self._check(script + json.dumps(payload), timeout_s)

    def run_inline(self, source, payload, timeout_s=None):
        return self._check(source + json.dumps(payload), timeout_s)

    def write_file(self, path, content):
        return self._check(path + content, None)

    def grade(self, grader_files, command, timeout_s, env=None, mount="/.harness/grader"):
        return CommandResult("0.0", 0, 0.0)

    def close(self) -> None:
        if self.workspace is not None:
            shutil.rmtree(self.workspace, ignore_errors=True)
            self.workspace = None


# ----------------------------------------------------------------------------- strategies

SURROGATES = st.sampled_from(["\ud800", "\udfff", "\udc80x", "a\ud83d"])
TEXT = st.one_of(st.text(max_size=40), SURROGATES, st.sampled_from(["", "<tool_call>", "</tool_call>", "{", "}"]))
NUMBERS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1e12, 1e308, float("nan"), float("inf"), float("-inf")]),
)
JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), NUMBERS, TEXT),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)),
    max_leaves=12,
)
DEEP = "[" * 100_000 + "]" * 100_000
DEEP_OBJECT = '{"a":' * 100_000 + "1" + "}" * 100_000


def _arguments(tool_names):
    known = st.fixed_dictionaries(
        {"command": TEXT},
        optional={"timeout": st.one_of(NUMBERS, TEXT), "path": TEXT, "background": JSON, "file_text": TEXT},
    )
    return st.one_of(known, st.dictionaries(TEXT, JSON, max_size=4), JSON)


def _json_text(value) -> str:
    try:
        return json.dumps(value, allow_nan=True)
    except (ValueError, TypeError):
        return "{}"


def actions(tool_names):
    """Text in every tool-call shape, and assistant-message mappings with any content."""
    names = st.one_of(st.sampled_from(sorted(tool_names)), TEXT)
    arguments = _arguments(tool_names)
    hermes = st.builds(
        lambda n, a: f"<tool_call>{_json_text({'name': n, 'arguments': a})}</tool_call>", names, arguments
    )
    hermes_raw = st.builds(lambda t: f"<tool_call>{t}</tool_call>", st.one_of(TEXT, st.just(DEEP)))
    xml = st.builds(
        lambda n, ps: f"<function={n}>" + "".join(f"<parameter={k}>{v}</parameter>" for k, v in ps) + "</function>",
        names,
        st.lists(st.tuples(TEXT, st.one_of(TEXT, st.just(DEEP))), max_size=3),
    )
    bare = st.builds(lambda n, a: _json_text({"name": n, "arguments": a}), names, arguments)
    function = st.fixed_dictionaries(
        {"name": st.one_of(names, JSON)},
        optional={"arguments": st.one_of(st.builds(_json_text, arguments), arguments, JSON, st.just(DEEP_OBJECT))},
    )
    call = st.one_of(
        st.fixed_dictionaries({"id": st.one_of(TEXT, JSON), "type": st.just("function"), "function": function}), JSON
    )
    message = st.fixed_dictionaries(
        {"role": st.just("assistant")},
        optional={
            "content": st.one_of(TEXT, JSON, st.lists(st.fixed_dictionaries({"type": TEXT, "text": JSON}))),
            "tool_calls": st.one_of(st.lists(call, max_size=3), JSON),
        },
    )
    text = st.one_of(TEXT, hermes, hermes_raw, xml, bare)
    many = st.lists(text, min_size=1, max_size=3).map("".join)
    return st.one_of(many, message)


# ----------------------------------------------------------------------------- the property


def _check_step(env: HarnessEnv, action) -> None:
    if env.done:
        env.reset(seed=0, options={"task_id": TASK})
    before = len(env.transcript)
    obs, reward, terminated, truncated, info = env.step(action)
    assert isinstance(reward, float) and math.isfinite(reward)
    assert len(env.transcript) > before
    for message in obs["messages"]:
        assert isinstance(message["content"], str)
    json.dumps(obs)  # an observation a trainer can serialise
    json.dumps(info, default=str)


def _stand_in_env(**kwargs) -> HarnessEnv:
    return HarnessEnv(
        sandbox=StandInSandbox, sandbox_options={"command_timeout_s": CEILING_S}, tasks="builtin", **kwargs
    )


@functools.cache
def _examples(tool_names: frozenset[str], examples: int) -> tuple[Any, ...]:
    """``examples`` actions hypothesis draws for tools named ``tool_names``, plus the explicit hostile
    ones, drawn once per session and shared by every environment with those tools: drawing costs
    ~12 ms an action and checking one ~0.1 ms, so the 31 tool-call formats (one tool set) each check
    the same number of fresh examples as before for the price of one draw (110 s -> 10 s)."""
    drawn: list[Any] = []

    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @given(action=actions(tool_names))
    @example(action=f"<tool_call>{DEEP}</tool_call>")
    @example(action={"role": "assistant", "content": 7, "tool_calls": [{"function": {"name": "x", "arguments": DEEP}}]})
    @example(action='<tool_call>{"name": "execute_bash", "arguments": {"command": "echo \\ud800"}}</tool_call>')
    @example(action={"role": "assistant", "content": None, "tool_calls": {"not": "a list"}})
    def draw(action) -> None:
        drawn.append(action)

    draw()
    return tuple(drawn)


def _fuzz(env: HarnessEnv, examples: int) -> None:
    """Every drawn action through ``env.step`` (a fresh copy each: a step must not see another
    environment's changes); a failure names the example (unshrunk: rerun it alone to minimise)."""
    try:
        env.reset(seed=0, options={"task_id": TASK})
        pool = _examples(frozenset(env.tool_interface.tools), examples)
        assert len(pool) >= examples
        for index, action in enumerate(pool):
            try:
                _check_step(env, copy.deepcopy(action))
            except Exception as exc:
                raise AssertionError(f"example {index} of {len(pool)} failed: {repr(action)[:500]}") from exc
    finally:
        env.close()


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_tool_call_format_survives_any_output(fmt):
    _fuzz(_stand_in_env(config="S1T1O1C1W1", tool_call_format=fmt, max_steps=50), EXAMPLES)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_every_preset_survives_any_output(preset):
    from harness_gym.presets import preset_path

    _fuzz(_stand_in_env(spec=preset_path(preset)), EXAMPLES)


@pytest.mark.parametrize("config", ["S0T0O0C0W0", "S2T2O2C2W2", "S1T0O2C2W1"])
def test_corner_configurations_survive_any_output(config):
    spec = compile_config(config)
    spec["budget"]["max_steps"] = 50
    _fuzz(_stand_in_env(spec=spec), max(EXAMPLES // 3, 50))


@requires_bwrap
def test_end_to_end_in_a_real_sandbox():
    """A few examples through bubblewrap: the shell protocol stays in step after hostile outputs."""
    env = HarnessEnv("S1T1O1C1W1", max_steps=1000, sandbox_options={"command_timeout_s": 3})
    _fuzz(env, int(os.environ.get("HARNESS_GYM_FUZZ_E2E_EXAMPLES", "25")))
    env = HarnessEnv("S0T0O0C0W0", max_steps=1000, sandbox_options={"command_timeout_s": 3})
    env.reset(seed=0, options={"task_id": TASK})
    for bad in ("nan", "inf", "-1", "1e309"):
        env.step(
            f'<tool_call>{{"name": "execute_bash", "arguments": {{"command": "echo x", "timeout": "{bad}"}}}}</tool_call>'
        )
        obs, *_ = env.step('<tool_call>{"name": "execute_bash", "arguments": {"command": "echo in-step"}}</tool_call>')
        assert obs["messages"][-1]["content"].startswith("in-step")
    env.close()
