"""Formats whose calls are JSON objects (``{"name": ..., "arguments": {...}}``) after a marker:
one declarative :class:`TaggedJson` spec per family instead of one parser each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_gym.tool_formats.base import (
    Draft,
    Extraction,
    ToolFormat,
    blocks,
    cut,
    decode_prefix,
    draft_from_object,
    dumps,
    dumps_safe,
    snippet,
    tool_function,
)

_SEPARATORS = " \t\r\n;,"
_MAX_MISSES = 200  # `{` that open no JSON value: past this many a message is not a call list


@dataclass(frozen=True)
class JsonLayout:
    """How calls are written: ``start`` + payload + ``end`` (None: the payload runs to the next
    ``start`` or the end of the text, and text after the JSON is prose). ``payload`` is ``object``
    (one object per block), ``list`` (a JSON array of objects) or ``objects`` (objects separated by
    ``joiner``). ``name_key``/``arguments_key`` are what the family writes; readers also accept
    ``parameters`` for ``arguments``."""

    start: str
    end: str | None
    payload: str = "object"
    arguments_key: str = "arguments"
    joiner: str = "\n"
    block_per_call: bool = True


class TaggedJson(ToolFormat):
    """A JSON call format described by a :class:`JsonLayout` (see the module doc)."""

    layout: JsonLayout

    def __init__(
        self,
        name: str,
        layout: JsonLayout,
        *,
        aliases: tuple[str, ...] = (),
        markers: tuple[str, ...] | None = None,
        result_role: str = "user",
        result_wrapper: str | None = "<tool_response>\n{content}\n</tool_response>",
        tools_intro: str | None = None,
    ) -> None:
        self.name = name  # type: ignore[misc]
        self.layout = layout
        self.aliases = aliases  # type: ignore[misc]
        self.markers = markers if markers is not None else (layout.start.strip(),)  # type: ignore[misc]
        self.result_role = result_role  # type: ignore[misc]
        self.result_wrapper = result_wrapper  # type: ignore[misc]
        if tools_intro:
            self.tools_intro = tools_intro  # type: ignore[misc]
        self.example = self.render_calls([("<tool name>", {"<parameter>": "<value>"})])  # type: ignore[misc]

    # ------------------------------------------------------------------ reading

    def extract(self, text: str) -> Extraction:
        drafts: list[Draft] = []
        spans: list[tuple[int, int]] = []
        start, end = self.layout.start.strip(), (self.layout.end or "").strip() or None
        for begin, stop, inside, _closed in blocks(text, start, end):
            found, used = self._read_payload(inside, has_end=end is not None)
            drafts.extend(found)
            spans.append((begin, stop if end is not None else begin + len(start) + used))
        return Extraction(drafts, cut(text, spans))

    def _read_payload(self, inside: str, has_end: bool) -> tuple[list[Draft], int]:
        """The calls at the start of ``inside`` and how many characters they took. Text after the
        JSON is an error inside a block with an end marker, prose when the format has none."""
        drafts: list[Draft] = []
        position = _skip(inside, 0)
        while position < len(inside) and inside[position] in "[{":
            decoded = decode_prefix(inside, position)
            if decoded is None:
                break
            value, after = decoded
            items = value if isinstance(value, list) else [value]
            if not items:
                drafts.append(Draft("", {}, inside[position:after], self.expected("the list of tool calls is empty")))
            for item in items:
                raw = inside[position:after] if len(items) == 1 else dumps_safe(item)
                drafts.append(draft_from_object(item, raw, self))
            position = _skip(inside, after)
        rest = inside[position:]
        if not drafts:
            problem = "the tool call is not valid JSON" if rest.strip() else "the tool call is empty"
            return [Draft("", {}, inside, self.expected(f"{problem}: {snippet(inside)}"))], len(inside)
        if has_end and rest.strip():
            drafts.append(Draft("", {}, rest, self.expected(f"unexpected text after the JSON call: {snippet(rest)}")))
        return drafts, len(inside) if has_end else position

    # ------------------------------------------------------------------ writing

    def _object(self, name: str, arguments: Mapping[str, Any]) -> str:
        return dumps({"name": name, self.layout.arguments_key: dict(arguments)})

    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        layout = self.layout
        end = layout.end or ""
        if layout.payload == "list":
            body = "[" + ", ".join(self._object(n, a) for n, a in calls) + "]"
            return f"{layout.start}{body}{end}"
        if layout.payload == "objects" or not layout.block_per_call:
            return layout.start + layout.joiner.join(self._object(n, a) for n, a in calls) + end
        return "\n".join(f"{layout.start}{self._object(n, a)}{end}" for n, a in calls)


def _skip(text: str, position: int) -> int:
    while position < len(text) and text[position] in _SEPARATORS:
        position += 1
    return position


class BareJson(TaggedJson):
    """A message that is nothing but a call object or a list of them (optionally in a ```json
    fence): what many small models write when asked for JSON. Used by ``auto`` only."""

    def __init__(self) -> None:
        super().__init__("json", JsonLayout("", None, payload="list"), markers=())

    def detect(self, text: str) -> bool:
        return self._whole(text) is not None

    def _whole(self, text: str) -> list[Draft] | None:
        body = text.strip()
        if body.startswith("```"):
            first_line_end = body.find("\n")
            if first_line_end < 0 or not body.endswith("```") or body[3:first_line_end].strip() not in ("", "json"):
                return None
            body = body[first_line_end + 1 : -3].strip()
        if not body or body[0] not in "[{":
            return None
        decoded = decode_prefix(body)
        if decoded is None or decoded[1] != len(body):
            return None
        value = decoded[0]
        items = value if isinstance(value, list) else [value]
        if not items or not all(_looks_like_call(item) for item in items):
            return None
        return [draft_from_object(item, dumps_safe(item), self) for item in items]

    def extract(self, text: str) -> Extraction:
        drafts = self._whole(text)
        return Extraction(drafts, "") if drafts else Extraction([], text)


def _looks_like_call(value: Any) -> bool:
    return isinstance(value, dict) and "name" in value and ("arguments" in value or "parameters" in value)


class Llama3Json(TaggedJson):
    """Llama 3.1-3.3 (and Llama 4's JSON mode): ``<|python_tag|>`` (optional) then one or more
    ``{"name": ..., "parameters": {...}}`` objects separated by ``; ``. Without the tag, JSON call
    objects anywhere in the message count, as in vLLM's parser."""

    def __init__(self) -> None:
        super().__init__(
            "llama3_json",
            JsonLayout("<|python_tag|>", None, payload="objects", arguments_key="parameters", joiner="; "),
            aliases=("llama4_json",),
            result_role="ipython",
            result_wrapper=None,
            tools_intro=(
                "Given the following functions, please respond with a JSON for a function call with its proper "
                'arguments that best answers the given prompt.\n\nRespond in the format {"name": function name, '
                '"parameters": dictionary of argument name and its value}. Do not use variables.'
            ),
        )

    def extract(self, text: str) -> Extraction:
        if self.layout.start in text:
            return super().extract(text)
        drafts: list[Draft] = []
        spans: list[tuple[int, int]] = []
        misses = 0
        position = text.find("{")
        while position >= 0 and misses < _MAX_MISSES:
            decoded = (
                decode_prefix(text, position)
                if text[_skip(text, position + 1) : _skip(text, position + 1) + 1] == '"'
                else None
            )
            if decoded is not None and _looks_like_call(decoded[0]):
                drafts.append(draft_from_object(decoded[0], text[position : decoded[1]], self))
                spans.append((position, decoded[1]))
                position = text.find("{", decoded[1])
            else:
                misses += decoded is None
                position = text.find("{", position + 1)
        return Extraction(drafts, cut(text, spans))

    def render_tools(self, tools: Sequence[Mapping[str, Any]]) -> str:
        signatures = "\n\n".join(dumps({"type": "function", "function": tool_function(t)}) for t in tools)
        return f"{self.tools_intro}\n\n{signatures}"


class Xlam(TaggedJson):
    """xLAM: a JSON array of ``{"name", "arguments"}`` objects, bare or in a ```json fence, after
    ``[TOOL_CALLS]`` or in ``<tool_call>``."""

    def __init__(self) -> None:
        super().__init__("xlam", JsonLayout("", None, payload="list"), markers=())

    def detect(self, text: str) -> bool:
        return BareJson().detect(text)

    def extract(self, text: str) -> Extraction:
        for start, end in (("```json", "```"), ("```", "```"), ("[TOOL_CALLS]", "\n"), ("<tool_call>", "</tool_call>")):
            for begin, stop, inside, closed in blocks(text, start, end):
                if not closed and end != "\n":
                    continue
                decoded = decode_prefix(inside.strip())
                if decoded is not None and decoded[1] == len(inside.strip()) and isinstance(decoded[0], list):
                    drafts = [draft_from_object(i, dumps_safe(i), self) for i in decoded[0] if _looks_like_call(i)]
                    return Extraction(drafts, cut(text, [(begin, stop)]).strip())
        body = text.strip()
        if body.startswith("["):
            decoded = decode_prefix(body)
            if decoded is not None and decoded[1] == len(body) and isinstance(decoded[0], list):
                return Extraction(
                    [draft_from_object(i, dumps_safe(i), self) for i in decoded[0] if _looks_like_call(i)], ""
                )
            if "{" in body and "name" in body and "arguments" in body:
                return Extraction(
                    [Draft("", {}, body, self.expected(f"the tool-call list is not valid JSON: {snippet(body)}"))], ""
                )
        return Extraction([], text)

    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        return dumps([{"name": n, "arguments": dict(a)} for n, a in calls])


def tagged_json_formats() -> list[ToolFormat]:
    """The JSON families that are pure data: marker, payload shape, argument key, result turn."""
    return [
        TaggedJson("hermes", JsonLayout("<tool_call>\n", "\n</tool_call>"), aliases=("qwen3_json",)),
        TaggedJson(
            "longcat",
            JsonLayout("<longcat_tool_call>", "</longcat_tool_call>"),
            result_wrapper="<longcat_tool_response>\n{content}\n</longcat_tool_response>",
        ),
        TaggedJson(
            "jamba",
            JsonLayout("<tool_calls>", "</tool_calls>", payload="list"),
            result_role="tool",
            result_wrapper=None,
        ),
        TaggedJson(
            "hunyuan_a13b",
            JsonLayout("<tool_calls>", "</tool_calls>", payload="list"),
            markers=("<tool_calls>",),
            result_wrapper="<tool_response>{content}</tool_response>",
        ),
        TaggedJson(
            "granite",
            JsonLayout("<|tool_call|>", None, payload="list"),
            markers=("<|tool_call|>",),
            result_role="tool",
            result_wrapper=None,
        ),
        TaggedJson(
            "granite-20b-fc",
            JsonLayout("<function_call> ", None),
            markers=("<function_call>",),
            result_role="user",
            result_wrapper="<function_response> {content}",
        ),
        TaggedJson(
            "internlm",
            JsonLayout("<|action_start|><|plugin|>\n", "<|action_end|>", arguments_key="parameters"),
            markers=("<|action_start|><|plugin|>",),
            result_role="environment",
            result_wrapper=None,
        ),
        TaggedJson(
            "phi4_mini_json",
            JsonLayout("functools", None, payload="list"),
            markers=("functools[",),
            result_role="tool",
            result_wrapper=None,
        ),
        Llama3Json(),
        Xlam(),
        BareJson(),
    ]
