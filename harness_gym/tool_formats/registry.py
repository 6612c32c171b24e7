"""The formats by name (vLLM's ``--tool-call-parser`` names, so one flag means the same thing in
both), auto-detection, reasoning sections, and the never-raising entry point :func:`parse_text`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness_gym.errors import ToolCallError
from harness_gym.tool_formats.base import Draft, ParsedAction, ToolCall, ToolFormat
from harness_gym.tool_formats.harmony import Harmony
from harness_gym.tool_formats.json_calls import tagged_json_formats
from harness_gym.tool_formats.pythonic import Llama4Pythonic, Pythonic
from harness_gym.tool_formats.special_tokens import DeepSeekV3, DeepSeekV31, KimiK2, Mistral, MistralLegacy
from harness_gym.tool_formats.xml_calls import xml_formats


def _build() -> dict[str, ToolFormat]:
    formats: list[ToolFormat] = [
        *tagged_json_formats(),
        *xml_formats(),
        Mistral(),
        MistralLegacy(),
        DeepSeekV3(),
        DeepSeekV31(),
        KimiK2(),
        Pythonic(),
        Llama4Pythonic(),
        Harmony(),
    ]
    return {f.name: f for f in formats}


FORMATS: dict[str, ToolFormat] = _build()
ALIASES: dict[str, str] = {alias: f.name for f in FORMATS.values() for alias in f.aliases}
#: formats whose names are not vLLM parser names (harness-gym's own)
LOCAL_FORMATS = ("json", "mistral_legacy")

#: auto-detection order: the most specific markers first, bare JSON last. hunyuan_a13b and xlam
#: share their markers with jamba and json and read the same calls, so auto never picks them.
DETECTION_ORDER = (
    "openai",
    "kimi_k2",
    "deepseek_v3",
    "deepseek_v31",
    "mistral",
    "minimax_m2",
    "seed_oss",
    "longcat",
    "internlm",
    "granite",
    "granite-20b-fc",
    "llama3_json",
    "jamba",
    "phi4_mini_json",
    "glm45",
    "qwen3_xml",
    "hermes",
    "pythonic",
    "llama4_pythonic",
    "json",
)

_REASONING = (("<think>", "</think>"), ("<seed:think>", "</seed:think>"))


class UnknownFormatError(ToolCallError):
    """A format name that is neither a registered format, an alias nor ``auto``."""


def format_names() -> tuple[str, ...]:
    """Every accepted name: ``auto``, the formats and their aliases."""
    return ("auto", *FORMATS, *ALIASES)


def get_format(name: str) -> ToolFormat:
    canonical = ALIASES.get(name, name)
    if canonical not in FORMATS:
        raise UnknownFormatError(f"unknown tool-call format {name!r}; choose one of {', '.join(format_names())}")
    return FORMATS[canonical]


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, the rest). A closed ``<think>`` section is reasoning; so is everything before a
    lone ``</think>`` (templates that open the section in the prompt) and everything after an
    unclosed ``<think>`` (the model ran out of tokens while thinking)."""
    reasoning: list[str] = []
    for start, end in _REASONING:
        close = text.rfind(end)
        if close >= 0:
            head = text[:close]
            open_at = head.find(start)
            prefix = head[:open_at] if open_at >= 0 else ""
            reasoning.append(head[open_at + len(start) :] if open_at >= 0 else head)
            text = prefix + text[close + len(end) :]
        elif start in text:
            open_at = text.find(start)
            reasoning.append(text[open_at + len(start) :])
            text = text[:open_at]
    return "\n".join(r.strip() for r in reasoning).strip(), text


def _detectors() -> tuple[tuple[ToolFormat, tuple[str, ...] | None], ...]:
    """DETECTION_ORDER as (format, its markers) where the format detects by markers alone (the
    base :meth:`ToolFormat.detect`), (format, None) where it has a detect of its own."""
    return tuple(
        (FORMATS[name], FORMATS[name].markers if type(FORMATS[name]).detect is ToolFormat.detect else None)
        for name in DETECTION_ORDER
    )


_DETECTORS = _detectors()


def detect(text: str) -> ToolFormat | None:
    """The format of the calls in ``text`` (reasoning already removed), None for plain prose: the
    first of DETECTION_ORDER whose detect accepts it (markers tested inline, not by a method call
    per format: auto detection runs at every step)."""
    for chosen, markers in _DETECTORS:
        if markers is None:
            if chosen.detect(text):
                return chosen
            continue
        for marker in markers:
            if marker in text:
                return chosen
    return None


def parse_text(text: str, fmt: str = "auto", id_prefix: str = "call") -> ParsedAction:
    """Prose, reasoning and tool calls of one assistant text. Never raises on what the text holds:
    a call that cannot be read (or a parser failure on hostile input) is a call with ``error`` set."""
    chosen: ToolFormat | None = None if fmt == "auto" else get_format(fmt)
    try:
        reasoning, rest = split_reasoning(text)
        chosen = chosen or detect(rest)
        if chosen is None:
            return ParsedAction(rest.strip(), [], reasoning)
        extraction = chosen.extract(rest)
        calls = [_call(d, f"{id_prefix}_{i}", chosen.name) for i, d in enumerate(extraction.drafts)]
        return ParsedAction(extraction.text.strip(), calls, reasoning, chosen.name if calls else None)
    except Exception as exc:
        name = chosen.name if chosen else "auto"
        message = f"the {name} tool-call parser could not read this action ({type(exc).__name__})"
        return ParsedAction("", [ToolCall(f"{id_prefix}_0", "", {}, name, "", message)], "", name)


def _call(draft: Draft, call_id: str, fmt: str) -> ToolCall:
    return ToolCall(call_id, draft.name, draft.arguments if not draft.error else {}, fmt, draft.raw, draft.error)


def render_calls(calls: Sequence[tuple[str, Mapping[str, Any]]], fmt: str) -> str:
    """The text a model of family ``fmt`` writes for these (name, arguments) calls."""
    return get_format(fmt).render_calls(calls)
