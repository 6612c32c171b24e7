"""The public turn API: what a model reads, rendered from an environment's messages and tools.

An observation is ``{"messages": [...], "tools": [...]}`` in harness-gym's own form (every message
carries a ``source``). A model reads it in one of the tool-call formats:

- ``hermes`` / ``xml``: plain chat messages, the tools described in the system message, tool
  results as user turns in ``<tool_response>`` blocks (models without native tool calling);
- ``openai``: OpenAI chat messages with ``tool_calls`` / ``tool`` roles; the tool schemas go to the
  chat template's own ``tools`` argument.

:func:`chat_messages` gives the messages, :func:`render` the text a chat template makes of them.
Formats are looked up by name in a registry, so more model families plug in with
:func:`register_format` without touching the callers.

Per step, ``info["new_messages"]`` holds what the environment appended after the policy's message;
when context management rewrote the history (``info["context_reset"]``), ``info["context"]`` holds
the whole new context: render it afresh, do not append.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from harness_gym.prompting import openai_messages, text_messages

Messages = Sequence[Mapping[str, Any]]
Renderer = Callable[[Messages, Messages], list[dict[str, Any]]]

_FORMATS: dict[str, tuple[Renderer, bool]] = {
    "hermes": (lambda messages, tools: text_messages(messages, tools, "hermes"), False),
    "xml": (lambda messages, tools: text_messages(messages, tools, "xml"), False),
    "openai": (lambda messages, tools: openai_messages(messages), True),
}


def register_format(name: str, renderer: Renderer, *, native_tools: bool = False) -> None:
    """Add a tool-call format: ``renderer(messages, tools)`` returns the chat messages a model of
    that family reads. ``native_tools`` says the chat template itself renders the tool schemas
    (they are then passed as its ``tools`` argument rather than written into the messages)."""
    if not name or not callable(renderer):
        raise ValueError("a format needs a name and a callable renderer(messages, tools)")
    _FORMATS[name] = (renderer, native_tools)


def formats() -> tuple[str, ...]:
    """The tool-call formats that can be rendered."""
    return tuple(_FORMATS)


def _format(fmt: str) -> tuple[Renderer, bool]:
    try:
        return _FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown tool-call format {fmt!r}; choose one of {formats()}") from None


def chat_messages(messages: Messages, tools: Messages = (), fmt: str = "hermes") -> list[dict[str, Any]]:
    """The messages a model of format ``fmt`` reads (the ``source`` tags dropped). For text formats
    the tools are described in the system message; pass ``tools=()`` to render only new messages."""
    renderer, _ = _format(fmt)
    return renderer(messages, tools)


def native_tools(fmt: str) -> bool:
    """Whether the chat template renders the tool schemas itself in this format."""
    return _format(fmt)[1]


def render(
    messages: Messages,
    tools: Messages,
    tokenizer: Any,
    fmt: str = "hermes",
    *,
    add_generation_prompt: bool = True,
    chat_template: str | None = None,
) -> str:
    """The text a model reads: ``chat_messages`` through the tokenizer's chat template (or
    ``chat_template``), ending with the generation prompt of the next assistant turn."""
    renderer, native = _format(fmt)
    options: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
    if chat_template is not None:
        options["chat_template"] = chat_template
    if native and tools:
        options["tools"] = [dict(t) for t in tools]
    return tokenizer.apply_chat_template(renderer(messages, tools), **options)


def render_observation(observation: Mapping[str, Any], tokenizer: Any, fmt: str = "hermes", **options: Any) -> str:
    """:func:`render` of an environment observation (``{"messages", "tools"}``)."""
    return render(observation["messages"], observation["tools"], tokenizer, fmt, **options)


def plain_text(messages: Messages) -> str:
    """A readable transcript without a chat template (role headers), for string-only interfaces."""
    return "\n\n".join(f"[{m['role']}]\n{m.get('content') or ''}" for m in messages)
