import json

import pytest

from harness_gym.tool_calls import ActionError, coerce_arguments, parse_action


def test_hermes_calls_and_prose():
    text = 'I will look.\n<tool_call>\n{"name": "execute_bash", "arguments": {"command": "ls"}}\n</tool_call>\n<tool_call>{"name": "finish", "arguments": {}}</tool_call>'
    parsed = parse_action(text)
    assert parsed.text == "I will look."
    assert [(c.name, c.arguments, c.format) for c in parsed.calls] == [
        ("execute_bash", {"command": "ls"}, "hermes"),
        ("finish", {}, "hermes"),
    ]
    assert [c.id for c in parsed.calls] == ["call_0", "call_1"]


def test_hermes_arguments_as_string_and_unclosed_block():
    parsed = parse_action('<tool_call>{"name": "x", "arguments": "{\\"a\\": 1}"}')
    assert parsed.calls[0].arguments == {"a": 1} and parsed.calls[0].error is None


def test_openai_message():
    message = {
        "role": "assistant",
        "content": "ok",
        "tool_calls": [
            {
                "id": "abc",
                "type": "function",
                "function": {"name": "execute_bash", "arguments": json.dumps({"command": "pwd"})},
            }
        ],
    }
    parsed = parse_action(message)
    assert parsed.text == "ok"
    assert (parsed.calls[0].id, parsed.calls[0].name, parsed.calls[0].arguments) == (
        "abc",
        "execute_bash",
        {"command": "pwd"},
    )


def test_xml_function_format_bare_and_wrapped():
    text = "<function=file_editor>\n<parameter=command>\nview\n</parameter>\n<parameter=path>\na.py\n</parameter>\n</function>"
    for action in (text, f"<tool_call>\n{text}\n</tool_call>"):
        call = parse_action(action).calls[0]
        assert (call.name, call.arguments, call.format) == (
            "file_editor",
            {"command": "view", "path": "a.py"},
            "qwen3_xml",
        )


def test_xml_values_are_coerced_by_schema():
    schema = {
        "properties": {"insert_line": {"type": "integer"}, "view_range": {"type": "array"}, "path": {"type": "string"}}
    }
    out = coerce_arguments({"insert_line": "3", "view_range": "[1, 5]", "path": "12"}, schema)
    assert out == {"insert_line": 3, "view_range": [1, 5], "path": "12"}


def test_bare_json_and_fenced_json():
    assert parse_action('{"name": "finish", "arguments": {}}').calls[0].name == "finish"
    assert parse_action('```json\n{"name": "finish", "arguments": {"message": "x"}}\n```').calls[0].arguments == {
        "message": "x"
    }
    assert parse_action('{"just": "data"}').calls == []


@pytest.mark.parametrize(
    "action, fragment",
    [
        ("<tool_call>{not json}</tool_call>", "the tool call is not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'needs a "name"'),
        ('<tool_call>{"name": "x", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ("<function=>\n</function>", "has no name"),
        (
            {"role": "assistant", "tool_calls": [{"id": "1", "function": {"name": "x", "arguments": "{bad"}}]},
            "not valid JSON",
        ),
        ({"role": "assistant", "tool_calls": [{"id": "1"}]}, "each tool call must look like"),
    ],
)
def test_malformed_calls_keep_an_id_and_say_what_was_expected(action, fragment):
    parsed = parse_action(action)
    assert len(parsed.calls) == 1
    assert fragment in parsed.calls[0].error
    assert parsed.calls[0].id


def test_fixed_format_ignores_other_formats():
    hermes = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    xml = "<function=a></function>"
    # a <tool_call> block is a call attempt in both formats: in xml mode it is malformed
    assert "Expected <tool_call>\n<function=" in parse_action(hermes, "xml").calls[0].error
    assert parse_action(xml, "hermes").calls == []
    assert parse_action(hermes, "openai").calls == []
    assert parse_action(xml, "xml").calls[0].name == "a"
    with pytest.raises(ValueError, match="unknown tool-call format"):
        parse_action("x", "yaml")


def test_non_text_action_is_rejected_clearly():
    with pytest.raises(ActionError, match="must be a string or an assistant message"):
        parse_action(42)  # type: ignore[arg-type]
