"""What every tool-call format shares: the parsed call, the parsed action, the format interface and
the small scanning helpers the formats are built from.

A format never raises on what a model wrote: a call it cannot read becomes a :class:`ToolCall` with
``error`` set (naming the problem and showing the expected form), so the environment can answer it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass
class ToolCall:
    """One tool call as the model wrote it. ``error`` is set when it could not be parsed."""

    id: str
    name: str
    arguments: dict[str, Any]
    format: str
    raw: str = ""
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments, "format": self.format}
        if self.error:
            out["error"] = self.error
        return out


@dataclass
class ParsedAction:
    """An assistant action split into its prose (``text``), its reasoning and its tool calls.

    ``format`` is the format the calls were read in (the detected one under ``auto``), None when
    the action holds no call.
    """

    text: str
    calls: list[ToolCall] = field(default_factory=list)
    reasoning: str = ""
    format: str | None = None

    @property
    def errors(self) -> list[str]:
        return [c.error for c in self.calls if c.error]


@dataclass
class Draft:
    """A call as a format read it, before ids are assigned: name and arguments, or an error."""

    name: str
    arguments: dict[str, Any]
    raw: str
    error: str | None = None


@dataclass
class Extraction:
    """What a format found in a text: the calls (drafts) and the prose left around them."""

    drafts: list[Draft]
    text: str


class ToolFormat:
    """A model family's tool-call syntax: how to find calls in text and how to write them.

    Subclasses set the class attributes and implement :meth:`extract` and :meth:`render_calls`.
    ``markers`` are strings only this format's calls contain (auto-detection looks for them);
    ``example`` is the expected form quoted in error messages.
    """

    name: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    markers: ClassVar[tuple[str, ...]] = ()
    example: ClassVar[str] = ""
    #: how the family's templates hand tool results back: (role, wrapper with {content}), or
    #: ("tool", None) for a plain tool-role message
    result_role: ClassVar[str] = "user"
    result_wrapper: ClassVar[str | None] = "<tool_response>\n{content}\n</tool_response>"
    #: the family's system-prompt sentence that introduces the tool signatures and the call form
    tools_intro: ClassVar[str] = (
        "You may call one or more functions to assist with the user query. The function signatures, as JSON, "
        "are listed below."
    )

    def detect(self, text: str) -> bool:
        """Whether ``text`` holds an attempt at a call in this format (used by ``auto``)."""
        # a loop, not any() over a generator (half again as slow): auto detection tries 17 formats per step
        for marker in self.markers:  # noqa: SIM110
            if marker in text:
                return True
        return False

    def extract(self, text: str) -> Extraction:
        raise NotImplementedError

    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        """The text a model of this family writes for these (name, arguments) calls."""
        raise NotImplementedError

    def render_tools(self, tools: Sequence[Mapping[str, Any]]) -> str:
        """The system-prompt block describing the tools, in the family's documented layout."""
        signatures = "\n".join(dumps(tool_function(t)) for t in tools)
        example = self.render_calls([(first_tool_name(tools), {})])
        return (
            f"# Tools\n\n{self.tools_intro}\n<tools>\n{signatures}\n</tools>\n\n"
            f"To call a function, write:\n{example}\nYou may write some reasoning before the call."
        )

    def render_result(self, content: str) -> dict[str, str]:
        """One tool result as the plain chat message the family's template produces."""
        if self.result_wrapper is None:
            return {"role": self.result_role, "content": content}
        return {"role": self.result_role, "content": self.result_wrapper.format(content=content)}

    def expected(self, problem: str) -> str:
        return f"{problem}. Expected {self.example}"


# --------------------------------------------------------------------------- helpers


def dumps(value: Any) -> str:
    """Compact-ish JSON as the families' templates write it (``tojson``: ", " and ": ", unicode kept)."""
    return json.dumps(value, ensure_ascii=False)


def tool_function(tool: Mapping[str, Any]) -> Any:
    return tool.get("function", tool)


def first_tool_name(tools: Sequence[Mapping[str, Any]]) -> str:
    if tools:
        name = tool_function(tools[0]).get("name")
        if isinstance(name, str) and name:
            return name
    return "tool_name"


def snippet(text: str, limit: int = 160) -> str:
    text = text.strip()
    return "`" + (text if len(text) <= limit else text[:limit] + "…") + "`"


def blocks(text: str, start: str, end: str | None) -> Iterator[tuple[int, int, str, bool]]:
    """Each ``start ... end`` block: (block start, block end, inside, closed). An unclosed block
    runs to the end of the text; with ``end`` None every block runs to the next ``start``."""
    position = 0
    while True:
        begin = text.find(start, position)
        if begin < 0:
            return
        inner = begin + len(start)
        stop = text.find(end, inner) if end else text.find(start, inner)
        if stop < 0:
            yield begin, len(text), text[inner:], False
            return
        after = stop + len(end) if end else stop
        yield begin, after, text[inner:stop], True
        position = after


def cut(text: str, spans: Sequence[tuple[int, int]]) -> str:
    """``text`` without the given (sorted, disjoint) spans."""
    pieces, position = [], 0
    for begin, end in spans:
        pieces.append(text[position:begin])
        position = end
    pieces.append(text[position:])
    return "".join(pieces)


_DECODER = json.JSONDecoder()


def decode_json(text: str) -> tuple[Any, str | None]:
    """(value, None) or (None, error message) for a JSON document."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at character {exc.pos}): {snippet(text)}"
    except RecursionError:
        return None, "the JSON is nested too deeply to read"


def decode_prefix(text: str, at: int = 0) -> tuple[Any, int] | None:
    """A JSON value starting at ``text[at]`` and where it ends, or None."""
    try:
        return _DECODER.raw_decode(text, at)
    except (json.JSONDecodeError, RecursionError):
        return None


def arguments_object(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Arguments given as an object or as a JSON string holding one."""
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, Mapping):
        return dict(raw), None
    if isinstance(raw, str):
        value, error = decode_json(raw)
        if error:
            return {}, f"the arguments are {error}"
        if isinstance(value, dict):
            return value, None
        return {}, f"the arguments must be a JSON object, got {type(value).__name__}: {snippet(raw)}"
    return {}, f"the arguments must be a JSON object, got {type(raw).__name__}"


def draft_from_object(
    value: Any, raw: str, fmt: ToolFormat, argument_keys: Sequence[str] = ("arguments", "parameters")
) -> Draft:
    """A call written as ``{"name": ..., "arguments": {...}}`` (the key names vary by family)."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str) or not value["name"]:
        return Draft("", {}, raw, fmt.expected('a tool call needs a "name" string and an arguments object'))
    raw_args: Any = next((value[key] for key in argument_keys if key in value), {})
    arguments, error = arguments_object(raw_args)
    return Draft(value["name"], arguments, raw, fmt.expected(error) if error else None)


def dumps_safe(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (ValueError, RecursionError, TypeError):
        return repr(value)[:2000]


Registry = dict[str, ToolFormat]
