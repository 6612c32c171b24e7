"""Every tool-call format: round trips, auto-detection without false calls, malformed calls
reported with the expected form, reasoning skipped, and parsing that never raises."""

from __future__ import annotations

import json
import time

import pytest
from conftest import requires_bwrap
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness_gym.tool_calls import coerce_arguments, parse_action
from harness_gym.tool_formats import FORMATS, format_names, get_format, parse_text, render_calls

ALL = sorted(FORMATS)
#: formats whose values are text (their readers give strings; coerce_arguments decodes by schema)
TEXT_VALUED = {"qwen3_xml", "seed_oss", "minimax_m2", "glm45"}
#: what auto reports for a format that shares its syntax with another
AUTO_NAME = {"hunyuan_a13b": "jamba", "xlam": "json", "mistral_legacy": "mistral", "llama4_pythonic": "pythonic"}
CALLS = [
    ("execute_bash", {"command": "ls -la 'dir with space'\necho \"ü 漢字 🙂\"", "timeout": 30}),
    ("file_editor", {"path": "a/b.py", "view_range": [1, 5], "options": {"strict": True, "depth": None}}),
    ("finish", {}),
]
SCHEMAS = {
    "timeout": {"type": "integer"},
    "view_range": {"type": "array"},
    "options": {"type": "object"},
}


def _calls(parsed):
    return [(c.name, c.arguments) for c in parsed.calls]


def test_at_least_twelve_formats_under_vllm_names():
    vllm_names = set(FORMATS) - {"json", "mistral_legacy"}
    assert len(vllm_names) >= 12
    assert {"hermes", "qwen3_xml", "llama3_json", "llama4_pythonic", "pythonic", "mistral", "deepseek_v3"} <= vllm_names
    assert {"deepseek_v31", "openai", "kimi_k2", "glm45", "granite", "internlm", "jamba", "xlam"} <= vllm_names
    assert {"qwen3_coder", "xml", "llama4_json", "glm47", "qwen3_json"} <= set(format_names())
    assert get_format("qwen3_coder") is get_format("qwen3_xml") is get_format("xml")


@pytest.mark.parametrize("fmt", ALL)
def test_round_trip_with_prose_and_several_calls(fmt):
    calls = CALLS[:1] if fmt == "internlm" else CALLS
    text = render_calls(calls, fmt)
    whole_message = fmt in ("pythonic", "llama4_pythonic", "xlam", "json")
    parsed = parse_text(text if whole_message else "I will look first.\n" + text, fmt, id_prefix="s1")
    assert not parsed.errors
    got = [(n, coerce_arguments(a, {"properties": SCHEMAS})) for n, a in _calls(parsed)]
    assert got == calls
    assert [c.id for c in parsed.calls] == [f"s1_{i}" for i in range(len(calls))]
    assert parsed.text == ("" if whole_message else "I will look first.")
    if fmt in TEXT_VALUED:
        assert parsed.calls[0].arguments["timeout"] == "30"


@pytest.mark.parametrize("fmt", ALL)
def test_auto_detects_every_format(fmt):
    parsed = parse_action(render_calls(CALLS[:1], fmt))
    assert parsed.format == AUTO_NAME.get(fmt, fmt)
    assert _calls(parsed)[0][0] == "execute_bash"


NOT_CALLS = [
    "Just prose: the answer is 42.",
    "Use the tool_call syntax? No, I am done. Results come back in tool_response blocks.",
    "```python\ndef f(x):\n    return [g(a=1) for a in x]\n```",
    '```json\n{"name": "Bob", "age": 3}\n```',
    '{"name": "Bob", "age": 3}',
    '[{"id": 1}, {"id": 2}]',
    "[1, 2, 3]",
    "[f(x) for x in range(3)]",
    "See [the docs](https://example.com) and [foo(bar)] there.",
    "The dict {\"a\": {\"b\": [1, 2]}} is data, and so is {'name': 'x', 'arguments': {}} in Python.",
    "- [ ] task one\n- [x] task two",
    "a <b>bold</b> <i>claim</i> and x < y > z",
    "functools is a module; functools.partial(f) is handy.",
    "Call me at [TOOL] or to=someone.",
]


@pytest.mark.parametrize("text", NOT_CALLS)
def test_auto_never_reads_prose_code_or_data_as_calls(text):
    parsed = parse_action(text)
    assert parsed.calls == [] and parsed.format is None
    assert parsed.text == text.strip()


def test_reasoning_sections_are_skipped():
    call = render_calls([("ls", {"path": "."})], "hermes")
    parsed = parse_action(f"<think>maybe {render_calls([('rm', {})], 'hermes')}?</think>\nOk.\n{call}")
    assert _calls(parsed) == [("ls", {"path": "."})] and "rm" in parsed.reasoning and parsed.text == "Ok."
    # the opening tag was in the prompt (Qwen3 and DeepSeek-R1 templates)
    assert _calls(parse_action(f"plan: {call}</think>{call}")) == [("ls", {"path": "."})]
    # the model stopped while thinking: no call
    assert parse_action(f"<think>I could {call}").calls == []
    assert _calls(parse_action(f"<seed:think>x</seed:think>{render_calls([('ls', {})], 'seed_oss')}")) == [("ls", {})]


def test_harmony_analysis_is_reasoning_and_final_is_text():
    text = (
        "<|channel|>analysis<|message|>Need a listing.<|end|><|start|>assistant<|channel|>commentary "
        'to=functions.ls <|constrain|>json<|message|>{"path": "/"}<|call|>'
    )
    parsed = parse_action(text)
    assert (parsed.format, _calls(parsed), parsed.text) == ("openai", [("ls", {"path": "/"})], "")
    final = parse_action("<|channel|>final<|message|>All done.<|return|>", "openai")
    assert final.calls == [] and final.text == "All done."


MALFORMED = {
    "hermes": '<tool_call>{"name": "x", "arguments": {"a": </tool_call>',
    "llama3_json": '<|python_tag|>{"name": "x", "parameters": {"a": 1}',
    "mistral": '[TOOL_CALLS]x[ARGS]{"a": ',
    "deepseek_v3": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>x\n{bad}<｜tool▁call▁end｜>",
    "deepseek_v31": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>x<｜tool▁sep｜>{bad<｜tool▁call▁end｜>",
    "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.x:0<|tool_call_argument_begin|>[1]<|tool_call_end|>",
    "openai": "<|channel|>commentary to=functions.x <|constrain|>json<|message|>{oops<|call|>",
    "glm45": "<tool_call>\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
    "qwen3_xml": "<tool_call>\n<function=>\n</function>\n</tool_call>",
    "minimax_m2": "<minimax:tool_call>nothing here</minimax:tool_call>",
    "granite": "<|tool_call|>[{oops}]",
    "internlm": "<|action_start|><|plugin|>\nnot json<|action_end|>",
    "jamba": "<tool_calls>[{]</tool_calls>",
    "phi4_mini_json": "functools[{bad]",
    "pythonic": "[get_weather(city=)]",
    "llama4_pythonic": "<|python_start|>[get_weather('positional')]<|python_end|>",
    "longcat": "<longcat_tool_call>{}</longcat_tool_call>",
}


@pytest.mark.parametrize("fmt", sorted(MALFORMED))
def test_malformed_calls_are_errors_that_show_the_expected_form(fmt):
    for mode in (fmt, "auto"):
        parsed = parse_action(MALFORMED[fmt], mode, id_prefix="bad")
        assert parsed.calls and parsed.calls[0].id == "bad_0", mode
        error = parsed.calls[0].error
        assert error and "Expected " in error, (mode, parsed)
        assert get_format(fmt).example in error or mode == "auto"


def test_auto_reports_a_broken_hermes_call_in_hermes_terms():
    parsed = parse_action('<tool_call>\nexecute_bash {"command": "ls"}\n</tool_call>')
    assert parsed.format == "hermes" and "Expected <tool_call>\n{" in parsed.calls[0].error
    assert parse_action("<tool_call>finish</tool_call>").calls[0].name == "finish"  # GLM, no arguments


HOSTILE = [
    "[" * 100_000,
    '{"a":' * 100_000,
    "<tool_call>" + '{"a":' * 100_000,
    "<tool_call>" + "[" * 100_000 + "</tool_call>",
    "<|python_tag|>" + '{"name": "x", "parameters": ' * 50_000,
    "[TOOL_CALLS]" + "[" * 100_000,
    "[" + "f(a=" * 50_000 + "]",
    "<|channel|>commentary to=functions.x<|message|>" + "[" * 100_000,
    '\ud800<tool_call>\udfff{"name": "\ud83d", "arguments": {"k": "\udc00"}}</tool_call>',
    "{" * 300_000,
    "<tool_call>" * 50_000,
    "<|channel|>" * 50_000,
    "[TOOL_CALLS]x[ARGS]" * 20_000,
    "<function=a>" * 20_000 + "<parameter=b>" * 20_000,
    "\x00" * 1000 + "[f(a='\x00')]",
]


@pytest.mark.parametrize("fmt", ["auto", *ALL])
def test_hostile_inputs_never_raise_and_stay_fast(fmt):
    started = time.monotonic()
    for text in HOSTILE:
        parsed = parse_text(text, fmt)
        json.dumps([c.as_dict() for c in parsed.calls])  # what env.step puts in info
    assert time.monotonic() - started < 20


def test_a_huge_action_is_read_in_linear_time():
    call = render_calls([("ls", {"path": "x" * 50})], "hermes")
    text = ("prose " * 20 + call) * 5_000  # ~1.3 MB, 5,000 calls
    started = time.monotonic()
    parsed = parse_action(text)
    assert len(parsed.calls) == 5_000 and not parsed.errors
    assert time.monotonic() - started < 10


@pytest.mark.parametrize(
    "message",
    [
        {"role": "assistant", "content": 123},
        {"role": "assistant", "content": [{"type": "text", "text": 5}, "x", {"text": "<tool_call>"}]},
        {"role": "assistant", "content": {"nested": ["\ud800"]}},
        {"role": "assistant", "tool_calls": [{"function": {"name": ["x"], "arguments": "{}"}}]},
        {"role": "assistant", "tool_calls": [{"id": 7, "function": {"name": "x", "arguments": 5}}]},
        {"role": "assistant", "tool_calls": "not a list"},
        {"role": "assistant", "content": None, "tool_calls": [None, 1, {"function": None}]},
    ],
)
def test_odd_message_contents_never_raise(message):
    parsed = parse_action(message)
    assert all(c.id for c in parsed.calls)


_EXTRA_PIECES = [
    "</tool_call>", "</function>", "<parameter=a>", "</parameter>", "[ARGS]", "<|tool_call_end|>", "<|call|>",
    "<|message|>", '{"name": "x", "arguments": {"a": [1, {"b": "c"}]}}', '{"name": ', "[", "]", "{", "}", "(",
    ")", "=", '"', "\n", "```json", "```", "<think>", "</think>", "functions.x:0", "<｜tool▁sep｜>", "x(a=1)",
]  # fmt: skip
_PIECES = st.sampled_from([*sorted({m for f in FORMATS.values() for m in f.markers}), *_EXTRA_PIECES])
_TEXT = st.lists(
    st.one_of(_PIECES, st.text(st.characters(codec=None, exclude_categories=()), max_size=8)), max_size=30
).map("".join)


@pytest.mark.parametrize("fmt", ["auto", *ALL])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT)
def test_property_parsing_never_raises(fmt, text):
    parsed = parse_text(text, fmt)
    for call in parsed.calls:
        assert call.id and isinstance(call.arguments, dict) and (call.error is None or call.error)
        json.dumps(call.as_dict())


@requires_bwrap
def test_the_environment_runs_calls_written_in_every_format():
    from harness_gym import HarnessEnv

    env = HarnessEnv("S0T0O0C0W0", max_steps=60)
    try:
        env.reset(seed=0)
        bash = env.tool_interface.name_for("execute_bash")
        for fmt in [*ALL, "auto"]:
            env.harness_spec["tool_call_format"] = fmt
            written = "auto" if fmt == "auto" else fmt
            action = render_calls([(bash, {"command": f"echo {written}"})], "hermes" if fmt == "auto" else fmt)
            obs, _, terminated, _, info = env.step(action)
            assert not terminated and not info["parse_errors"], (fmt, info["parse_errors"])
            assert obs["messages"][-1]["content"] == f"{written}\n", fmt
        env.harness_spec["tool_call_format"] = "auto"
        obs, *_ = env.step({"role": "assistant", "content": 123})  # odd content: no call, no crash
        assert obs["messages"][-2]["content"] == "123"
    finally:
        env.close()
