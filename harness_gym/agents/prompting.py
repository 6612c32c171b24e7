"""Turning observations into what a model reads: OpenAI chat messages (native tool calling), or
plain chat messages with the tools described in the system prompt (text tool calling)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

TEXT_FORMATS = ("hermes", "xml")
TOOL_MODES = ("native", "native-strict", *TEXT_FORMATS)
# a tool no template invents: if its name is missing from the rendered prompt, the tools were dropped
PROBE_TOOL = {
    "type": "function",
    "function": {
        "name": "harness_gym_probe_tool",
        "description": "Probe: is this tool rendered into the prompt?",
        "parameters": {"type": "object", "properties": {"probe_argument": {"type": "string"}}},
    },
}
PROBE_MESSAGES = [{"role": "user", "content": "Say OK."}]


def text_format_for(model: str | None = None) -> str:
    """The text tool-call format to describe tools in when the model cannot take them natively.

    The one place that chooses it, so a model-to-format table can plug in here."""
    return "hermes"


def template_renders_tools(tokenizer: Any, chat_template: str | None = None) -> bool:
    """Whether the tokenizer's chat template puts the ``tools`` into the prompt: the probe
    conversation rendered with and without a tool, compared."""
    options: dict[str, Any] = {"tokenize": False, "add_generation_prompt": True}
    if chat_template is not None:
        options["chat_template"] = chat_template
    without = tokenizer.apply_chat_template(PROBE_MESSAGES, **options)
    try:
        with_tools = tokenizer.apply_chat_template(PROBE_MESSAGES, tools=[PROBE_TOOL], **options)
    except Exception:  # a template that chokes on tools does not support them
        return False
    return with_tools != without and PROBE_TOOL["function"]["name"] in with_tools


def resolve_tool_mode(requested: str, renders_tools: bool | None, model: str | None = None) -> tuple[str, str | None]:
    """(the mode to use, a notice for the user or None). ``native`` falls back to a text format
    when the template drops the tools; ``native-strict`` refuses instead. ``renders_tools=None``
    (unknown: the server reported no token usage) keeps native, with a notice."""
    if requested not in TOOL_MODES:
        raise ValueError(f"tool mode must be one of {TOOL_MODES}, got {requested!r}")
    if requested in TEXT_FORMATS:
        return requested, None
    if renders_tools is None:
        return "native", "could not check whether the chat template renders tools (no token usage reported)"
    if renders_tools:
        return "native", None
    if requested == "native-strict":
        raise ValueError(
            "the model's chat template drops the `tools` field, so the model would never see its tools; "
            "use --tool-mode native (falls back to a text format) or --tool-mode hermes|xml"
        )
    fallback = text_format_for(model)
    return fallback, (
        f"the model's chat template drops the `tools` field: tools are described in the system prompt "
        f"instead ({fallback} text format); --tool-mode native-strict refuses instead"
    )


_HERMES_INSTRUCTIONS = """## Tools
You can act by calling the functions described below. Their signatures, as JSON, sit between <tools> and </tools>:
<tools>
{signatures}
</tools>
To call a function, write its name and a JSON object of arguments between <tool_call> and </tool_call>, for example
<tool_call>
{{"name": "{example}", "arguments": {{}}}}
</tool_call>
You may write some reasoning before the call. Results come back in <tool_response> blocks."""

_XML_INSTRUCTIONS = """## Tools
You can act by calling the functions described below. Their signatures, as JSON, sit between <tools> and </tools>:
<tools>
{signatures}
</tools>
To call a function, write
<tool_call>
<function={example}>
<parameter=NAME>
VALUE
</parameter>
</function>
</tool_call>
with one parameter block per argument. Results come back in <tool_response> blocks."""


def tools_prompt(tools: Sequence[Mapping[str, Any]], fmt: str = "hermes") -> str:
    """The tool section of a system prompt, for models without native tool calling."""
    if fmt not in TEXT_FORMATS:
        raise ValueError(f"unknown text tool-call format {fmt!r}; choose one of {TEXT_FORMATS}")
    signatures = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
    example = tools[0]["function"]["name"] if tools else "name"
    template = _HERMES_INSTRUCTIONS if fmt == "hermes" else _XML_INSTRUCTIONS
    return template.format(signatures=signatures, example=example)


def text_messages(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], fmt: str = "hermes"
) -> list[dict[str, str]]:
    """Plain ``role``/``content`` messages: tools described in the system message, tool results as
    user turns wrapped in ``<tool_response>`` (consecutive results joined in one turn)."""
    out: list[dict[str, str]] = []
    for message in messages:
        role, content = message["role"], message.get("content") or ""
        if role == "tool":
            block = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1]["content"].startswith("<tool_response>"):
                out[-1]["content"] += "\n" + block
            else:
                out.append({"role": "user", "content": block})
        elif role == "assistant" and message.get("tool_calls"):
            calls = "".join(
                f"\n<tool_call>\n{json.dumps({'name': c['function']['name'], 'arguments': _args(c)})}\n</tool_call>"
                for c in message["tool_calls"]
            )
            out.append({"role": "assistant", "content": content + calls})
        else:
            out.append({"role": role, "content": content})
    if tools:
        section = tools_prompt(tools, fmt)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + section}
        else:
            out.insert(0, {"role": "system", "content": section})
    return out


def _args(call: Mapping[str, Any]) -> Any:
    raw = call["function"].get("arguments", "{}")
    try:
        return json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return raw


def openai_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """OpenAI chat messages (the ``source`` tag dropped; tool call ids kept)."""
    out = []
    for message in messages:
        item: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
        if message.get("tool_calls"):
            item["tool_calls"] = message["tool_calls"]
        if message["role"] == "tool":
            item["tool_call_id"] = message.get("tool_call_id", "")
        out.append(item)
    return out
