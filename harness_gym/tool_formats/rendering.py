"""A conversation with tools as a model family saw it in training.

- With a tokenizer whose chat template takes ``tools`` (Qwen3, Llama 3.1, Mistral, DeepSeek,
  gpt-oss, ...), :func:`render_prompt` hands the template the tools, the assistant's calls
  (``tool_calls``) and the ``tool`` messages: the family's own rendering, exactly.
- Otherwise (a template that ignores tools, like SmolLM2's, or no tokenizer at all),
  :func:`text_messages` writes the family's documented layout into plain ``role``/``content``
  messages: the tools block in the system message, the calls in the family's syntax, the results
  wrapped the way the family's template wraps them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from harness_gym.tool_formats.layouts import TOOLS_BLOCKS
from harness_gym.tool_formats.models import format_for_model
from harness_gym.tool_formats.registry import get_format


def tools_block(tools: Sequence[Mapping[str, Any]], fmt: str) -> str:
    """The system-prompt section describing ``tools`` for family ``fmt``."""
    chosen = get_format(fmt)
    writer = TOOLS_BLOCKS.get(chosen.name)
    return writer(tools) if writer else chosen.render_tools(tools)


def _arguments(call: Mapping[str, Any]) -> Any:
    function = call.get("function") or {}
    raw = function.get("arguments", "{}")
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return raw


def _as_mapping(arguments: Any) -> dict[str, Any]:
    return dict(arguments) if isinstance(arguments, Mapping) else {"arguments": arguments}


def text_messages(
    messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]], fmt: str = "hermes"
) -> list[dict[str, str]]:
    """Plain ``role``/``content`` messages in family ``fmt``'s layout (see the module doc).
    Consecutive results that the family puts in a user turn share one turn, as its template does."""
    chosen = get_format(fmt)
    out: list[dict[str, str]] = []
    previous_was_result = False
    for message in messages:
        role, content = message["role"], message.get("content") or ""
        content = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        if role == "tool":
            rendered = chosen.render_result(content)
            if previous_was_result and rendered["role"] == "user" and out and out[-1]["role"] == "user":
                out[-1]["content"] += "\n" + rendered["content"]
            else:
                out.append(rendered)
            previous_was_result = True
            continue
        previous_was_result = False
        if role == "assistant" and message.get("tool_calls"):
            calls = [(c["function"]["name"], _as_mapping(_arguments(c))) for c in message["tool_calls"]]
            text = chosen.render_calls(calls)
            out.append({"role": "assistant", "content": f"{content}\n{text}" if content else text})
        else:
            out.append({"role": role, "content": content})
    if tools:
        section = tools_block(tools, chosen.name)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + section}
        else:
            out.insert(0, {"role": "system", "content": section})
    return out


def template_takes_tools(tokenizer: Any) -> bool:
    """Whether the tokenizer's chat template renders a ``tools`` list (SmolLM2's ignores it)."""
    template = getattr(tokenizer, "chat_template", None)
    text = template if isinstance(template, str) else json.dumps(template or "", default=str)
    return "tools" in text


def template_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as tool-aware templates expect them: call arguments as mappings, ids kept."""
    out: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": message["role"], "content": message.get("content") or ""}
        if message.get("tool_calls"):
            item["tool_calls"] = [
                {
                    "id": c.get("id", f"call_{i}"),
                    "type": "function",
                    "function": {"name": c["function"]["name"], "arguments": _as_mapping(_arguments(c))},
                }
                for i, c in enumerate(message["tool_calls"])
            ]
        if message["role"] == "tool":
            item["tool_call_id"] = message.get("tool_call_id", "")
            if message.get("name"):
                item["name"] = message["name"]
        out.append(item)
    return out


def render_prompt(
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]],
    fmt: str = "auto",
    add_generation_prompt: bool = True,
) -> str:
    """The prompt text: the family's own template when it takes tools, else the documented layout
    of ``fmt`` (``auto``: the tokenizer's family, see :func:`format_for_model`) through the template."""
    if template_takes_tools(tokenizer):
        return tokenizer.apply_chat_template(
            template_messages(messages),
            tools=list(tools) or None,
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )
    plain = text_messages(messages, tools, format_for_model(tokenizer, fmt))
    return tokenizer.apply_chat_template(plain, tokenize=False, add_generation_prompt=add_generation_prompt)
