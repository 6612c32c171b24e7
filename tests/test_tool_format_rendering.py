"""Rendering per family (tools block, calls, results; through the tokenizer's template when it
takes tools), the model-to-format table, and tool-call validity per format."""

from __future__ import annotations

import json

import pytest
import yaml

from harness_gym.agents.openai_chat import OpenAIChatAgent
from harness_gym.metrics import tool_call_validity_by_format, tool_calls_by_format
from harness_gym.prompting import TEXT_FORMATS, text_messages, tools_prompt
from harness_gym.tool_formats import (
    FORMATS,
    ModelTableError,
    UnknownFormatError,
    format_for_model,
    format_names,
    model_families,
    parse_text,
    render_prompt,
    tools_block,
)
from harness_gym.tool_formats.models import TABLE, load_table
from trainers.executor_settings import ExecutorSettings

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "execute_bash",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "List the files."},
    {
        "role": "assistant",
        "content": "Looking.",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'}},
            {"id": "c2", "type": "function", "function": {"name": "execute_bash", "arguments": '{"command": "pwd"}'}},
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
    {"role": "tool", "tool_call_id": "c2", "content": "/work"},
]


#: formats whose calls are the whole message (prose before them is not read as calls, as in vLLM)
WHOLE_MESSAGE = {"pythonic", "llama4_pythonic", "xlam"}


@pytest.mark.parametrize("fmt", sorted(set(FORMATS) - {"json"}))
def test_text_messages_write_the_family_layout_and_read_back(fmt):
    conversation = [dict(m) for m in CONVERSATION]
    if fmt in WHOLE_MESSAGE:
        conversation[2]["content"] = ""
    messages = text_messages(conversation, TOOLS, fmt)
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("You are an agent.\n\n")
    assert "execute_bash" in messages[0]["content"]
    assistant = next(m for m in messages if m["role"] == "assistant")
    parsed = parse_text(assistant["content"], fmt)
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("execute_bash", {"command": "ls"}),
        ("execute_bash", {"command": "pwd"}),
    ]
    assert parsed.text == ("" if fmt in WHOLE_MESSAGE else "Looking.")
    results = messages[messages.index(assistant) + 1 :]
    assert "a.txt" in results[0]["content"] and "/work" in results[-1]["content"]


def test_hermes_layout_is_qwen3s_and_results_share_a_user_turn():
    messages = text_messages(CONVERSATION, TOOLS, "hermes")
    system = messages[0]["content"]
    assert "You are provided with function signatures within <tools></tools> XML tags:" in system
    assert json.dumps(TOOLS[0]) in system
    assert messages[-1] == {
        "role": "user",
        "content": "<tool_response>\na.txt\n</tool_response>\n<tool_response>\n/work\n</tool_response>",
    }


@pytest.mark.parametrize(
    "fmt, fragment",
    [
        ("qwen3_xml", "<function>\n<name>execute_bash</name>"),
        ("openai", "namespace functions {"),
        ("mistral", '[AVAILABLE_TOOLS][{"type": "function"'),
        ("llama3_json", 'Respond in the format {"name": function name, "parameters"'),
        ("glm45", "<arg_key>{arg-key-1}</arg_key>"),
        ("deepseek_v31", "### execute_bash\nDescription: Run a shell command"),
    ],
)
def test_tools_blocks_follow_the_family_templates(fmt, fragment):
    assert fragment in tools_block(TOOLS, fmt)
    assert tools_prompt(TOOLS, fmt) == tools_block(TOOLS, fmt)


def _tokenizer(template: str):
    """A real (tiny, word-level) transformers tokenizer with the given chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="[UNK]")
    tokenizer.chat_template = template
    return tokenizer


TOOL_AWARE = (
    "{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<call>{{ c.function.name }} {{ c.function.arguments | tojson }}</call>{% endfor %}"
    "</{{ m.role }}>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}"
)
PLAIN = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


def test_render_prompt_uses_the_template_when_it_takes_tools():
    text = render_prompt(_tokenizer(TOOL_AWARE), CONVERSATION, TOOLS)
    assert text.startswith("<tools>execute_bash;</tools><system>You are an agent.</system>")
    assert '<call>execute_bash {"command": "ls"}</call>' in text and "<tool>a.txt</tool>" in text
    assert text.endswith("<assistant>")


def test_render_prompt_falls_back_to_the_family_layout():
    tokenizer = _tokenizer(PLAIN)
    text = render_prompt(tokenizer, CONVERSATION, TOOLS, fmt="mistral")
    assert "[AVAILABLE_TOOLS]" in text and '[TOOL_CALLS]execute_bash[ARGS]{"command": "ls"}' in text
    assert "<|im_start|>tool\n[TOOL_RESULTS]a.txt[/TOOL_RESULTS]" in text
    # auto: a tokenizer named after nothing in the table, whose vocabulary holds Mistral's marker
    tokenizer.add_tokens(["[TOOL_CALLS]"], special_tokens=True)
    assert format_for_model(tokenizer) == "mistral"
    assert "[TOOL_CALLS]execute_bash" in render_prompt(tokenizer, CONVERSATION, TOOLS)


@pytest.mark.parametrize(
    "model, fmt",
    [
        ("Qwen/Qwen3-8B", "hermes"),
        ("Qwen/Qwen2.5-7B-Instruct", "hermes"),
        ("Qwen/Qwen3-Coder-30B-A3B-Instruct", "qwen3_xml"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama3_json"),
        ("meta-llama/Llama-3.3-70B-Instruct", "llama3_json"),
        ("meta-llama/Llama-4-Scout-17B-16E-Instruct", "llama4_pythonic"),
        ("mistralai/Mistral-Small-3.2-24B-Instruct-2506", "mistral"),
        ("deepseek-ai/DeepSeek-V3-0324", "deepseek_v3"),
        ("deepseek-ai/DeepSeek-R1", "deepseek_v3"),
        ("deepseek-ai/DeepSeek-V3.1", "deepseek_v31"),
        ("openai/gpt-oss-120b", "openai"),
        ("moonshotai/Kimi-K2-Instruct-0905", "kimi_k2"),
        ("zai-org/GLM-4.5-Air", "glm45"),
        ("ibm-granite/granite-3.3-8b-instruct", "granite"),
        ("internlm/internlm2_5-7b-chat", "internlm"),
        ("ai21labs/AI21-Jamba-1.5-Mini", "jamba"),
        ("Salesforce/xLAM-2-8b-fc-r", "xlam"),
        ("tencent/Hunyuan-A13B-Instruct", "hunyuan_a13b"),
        ("microsoft/Phi-4-mini-instruct", "phi4_mini_json"),
        ("MiniMaxAI/MiniMax-M2", "minimax_m2"),
        ("/models/my-finetune", "hermes"),
    ],
)
def test_model_to_format_table(model, fmt):
    assert format_for_model(model) == fmt


def test_table_overrides_and_validation(tmp_path):
    assert format_for_model("Qwen/Qwen3-8B", override="xml") == "qwen3_xml"
    assert format_for_model("Qwen/Qwen3-8B", override="auto") == "hermes"
    with pytest.raises(UnknownFormatError, match="unknown tool-call format 'yaml'"):
        format_for_model("x", override="yaml")
    assert {fmt for _, fmt in model_families()} <= set(FORMATS)
    data = yaml.safe_load(TABLE.read_text())
    data["models"][0]["format"] = "nonsense"
    bad = tmp_path / "models.yaml"
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(ModelTableError, match="unknown tool-call formats \\['nonsense'\\]"):
        load_table(str(bad))
    custom = tmp_path / "custom.yaml"
    custom.write_text(yaml.safe_dump({"default": "mistral", "models": [], "template_markers": []}))
    assert format_for_model("Qwen/Qwen3-8B", table=custom) == "mistral"


def test_auto_tool_mode_in_the_agents_and_the_trainer():
    assert OpenAIChatAgent("http://127.0.0.1:9/v1", "Qwen/Qwen3-Coder-Flash", tool_mode="auto").tool_mode == "qwen3_xml"
    assert OpenAIChatAgent("http://127.0.0.1:9/v1", "m", tool_mode="kimi_k2").tool_mode == "kimi_k2"
    assert "auto" not in TEXT_FORMATS and {"hermes", "xml", "mistral", "openai"} <= set(TEXT_FORMATS)
    assert ExecutorSettings(tool_call_format="auto").tool_call_format == "auto"
    assert ExecutorSettings(tool_call_format="deepseek_v3").tool_call_format == "deepseek_v3"
    with pytest.raises(ValueError, match="tool_call_format must be a text format or auto"):
        ExecutorSettings(tool_call_format="bogus")


def test_harness_spec_schema_lists_every_format():
    from importlib.resources import files

    schema = json.loads(files("harness_gym").joinpath("schemas/harness_spec.schema.json").read_text())
    assert schema["properties"]["tool_call_format"]["enum"] == list(format_names())


def test_tool_call_validity_per_format():
    steps = [
        {"parsed_calls": [{"format": "hermes"}, {"format": "hermes", "error": "bad JSON"}]},
        {"parsed_calls": [{"format": "mistral"}], "parse_errors": []},
        {"parsed_calls": []},
        {},
    ]
    counts = tool_calls_by_format(steps)
    assert counts == {"hermes": {"calls": 2, "parse_errors": 1}, "mistral": {"calls": 1, "parse_errors": 0}}
    summary = tool_call_validity_by_format([counts, {"hermes": {"calls": 2, "parse_errors": 0}}, None])
    assert summary == {
        "hermes": {"calls": 4, "parse_errors": 1, "validity": 0.75},
        "mistral": {"calls": 1, "parse_errors": 0, "validity": 1.0},
    }


def test_hf_actions_keep_the_formats_special_tokens_and_drop_the_rest():
    from harness_gym.agents.huggingface import decode_action

    tokenizer = _tokenizer(PLAIN)
    tokenizer.add_special_tokens({"eos_token": "<|im_end|>"})
    tokenizer.add_tokens(["[TOOL_CALLS]", "[ARGS]", "<|python_tag|>"], special_tokens=True)
    ids = tokenizer("[TOOL_CALLS] hello [ARGS] hello <|im_end|>", add_special_tokens=False)["input_ids"]
    assert decode_action(tokenizer, ids, "mistral").replace(" ", "") == "[TOOL_CALLS]hello[ARGS]hello"
    assert "[TOOL_CALLS]" not in decode_action(tokenizer, ids, "hermes")  # hermes has no special markers
