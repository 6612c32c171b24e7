"""Turning observations into what a model reads: OpenAI chat messages (native tool calling), or
plain chat messages with the tools described in the system prompt (text tool calling)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness_gym.tool_formats import format_for_model, format_names, tools_block
from harness_gym.tool_formats import text_messages as _family_text_messages

#: text tool-call formats a prompt can ask for (vLLM parser names and aliases); ``auto`` is resolved
#: from the model by the agents (see :func:`harness_gym.tool_formats.format_for_model`)
TEXT_FORMATS = tuple(name for name in format_names() if name != "auto")
TOOL_MODES = ("native", "native-strict", "auto", *TEXT_FORMATS)
# a tool no template invents: if its name is missing from the rendered prompt, the tools were dropped
PROBE_TOOL: dict[str, Any] = {
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

    The one place that chooses it: the format the model's family was trained on
    (:func:`harness_gym.tool_formats.format_for_model`; Hermes where the name says nothing)."""
    return format_for_model(model) if model else "hermes"


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
    if requested == "auto":  # the text format the model's family was trained on
        return text_format_for(model), None
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


def tools_prompt(tools: Sequence[Mapping[str, Any]], fmt: str = "hermes") -> str:
    """The tool section of a system prompt, for models without native tool calling, in the layout
    of family ``fmt``."""
    if fmt not in TEXT_FORMATS:
        raise ValueError(f"unknown text tool-call format {fmt!r}; choose one of {TEXT_FORMATS}")
    return tools_block(tools, fmt)


def text_messages(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], fmt: str = "hermes"
) -> list[dict[str, str]]:
    """Plain ``role``/``content`` messages: tools described in the system message, calls and tool
    results written as family ``fmt`` writes them (Hermes/Qwen: results as user turns wrapped in
    ``<tool_response>``, consecutive results joined in one turn)."""
    if fmt not in TEXT_FORMATS:
        raise ValueError(f"unknown text tool-call format {fmt!r}; choose one of {TEXT_FORMATS}")
    return _family_text_messages(messages, tools, fmt)


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
