"""Formats that write each argument as its own XML-ish element (values are raw text; non-string
values are JSON and are decoded later by :func:`harness_gym.tool_calls.coerce_arguments` from the
tool's schema): Qwen3-Coder, Seed-OSS, MiniMax-M2 and GLM-4.5."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_gym.tool_formats.base import Draft, Extraction, ToolFormat, blocks, cut, snippet

_BARE_NAME = re.compile(r"[A-Za-z_][\w.\-]*")


def _text_value(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _trim(value: str, how: str) -> str:
    if how == "all":
        return value.strip()
    if how == "newline":
        value = value[1:] if value.startswith("\n") else value
        return value[:-1] if value.endswith("\n") else value
    return value


@dataclass(frozen=True)
class XmlLayout:
    """``wrapper`` around each call (the reader also takes bare functions when ``wrapper_optional``),
    a function element ``func_open NAME func_name_end ... func_close`` and parameter elements
    ``param_open KEY param_name_end VALUE param_close``; ``trim`` says how a value's surrounding
    whitespace is read (``newline``: one newline each side, ``all``, ``none``)."""

    wrapper: tuple[str, str]
    func_open: str
    func_name_end: str
    func_close: str
    param_open: str
    param_name_end: str
    param_close: str
    trim: str
    wrapper_optional: bool = False
    newline_layout: bool = True


class XmlFunctions(ToolFormat):
    """A format described by an :class:`XmlLayout`."""

    def __init__(
        self,
        name: str,
        layout: XmlLayout,
        *,
        aliases: tuple[str, ...] = (),
        markers: tuple[str, ...],
        result_wrapper: str | None,
        result_role: str = "user",
    ) -> None:
        self.name = name  # type: ignore[misc]
        self.layout = layout
        self.aliases = aliases  # type: ignore[misc]
        self.markers = markers  # type: ignore[misc]
        self.result_wrapper = result_wrapper  # type: ignore[misc]
        self.result_role = result_role  # type: ignore[misc]
        self.example = self.render_calls([("<tool name>", {"<parameter>": "<value>"})])  # type: ignore[misc]

    def extract(self, text: str) -> Extraction:
        layout = self.layout
        drafts: list[Draft] = []
        spans: list[tuple[int, int]] = []
        start, end = layout.wrapper
        for begin, stop, inside, _closed in blocks(text, start, end):
            spans.append((begin, stop))
            found = self._functions(inside)
            drafts.extend(
                found
                or [
                    Draft(
                        "",
                        {},
                        inside,
                        self.expected(
                            f"no {layout.func_open}...{layout.func_close} element in the call: {snippet(inside)}"
                        ),
                    )
                ]
            )
        if layout.wrapper_optional:
            rest = cut(text, spans)
            for _begin, _stop, inside, closed in blocks(rest, layout.func_open, layout.func_close):
                drafts.append(self._function(inside, closed))
            text_left = cut(rest, [(b, s) for b, s, _, _ in blocks(rest, layout.func_open, layout.func_close)])
            return Extraction(drafts, text_left)
        return Extraction(drafts, cut(text, spans))

    def _functions(self, inside: str) -> list[Draft]:
        return [
            self._function(body, closed)
            for _b, _s, body, closed in blocks(inside, self.layout.func_open, self.layout.func_close)
        ]

    def _function(self, body: str, closed: bool) -> Draft:
        layout = self.layout
        raw = layout.func_open + body + (layout.func_close if closed else "")
        name_end = body.find(layout.func_name_end)
        if name_end < 0:
            return Draft(
                "", {}, raw, self.expected(f"the function element is not closed with {layout.func_name_end!r}")
            )
        name = body[:name_end].strip().strip("\"'")
        if not name:
            return Draft("", {}, raw, self.expected("the function element has no name"))
        arguments: dict[str, Any] = {}
        params = body[name_end + len(layout.func_name_end) :]
        for _b, _s, param, _closed in blocks(params, layout.param_open, layout.param_close):
            key_end = param.find(layout.param_name_end)
            key = param[:key_end].strip().strip("\"'") if key_end >= 0 else ""
            if not key:
                return Draft(name, {}, raw, self.expected("a parameter element has no name"))
            arguments[key] = _trim(param[key_end + len(layout.param_name_end) :], layout.trim)
        return Draft(name, arguments, raw)

    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        layout = self.layout
        nl = "\n" if layout.newline_layout else ""
        out = []
        for name, arguments in calls:
            params = "".join(
                f"{layout.param_open}{key}{layout.param_name_end}{nl}{_text_value(value)}{nl}{layout.param_close}\n"
                for key, value in arguments.items()
            )
            out.append(
                f"{layout.wrapper[0]}\n{layout.func_open}{name}{layout.func_name_end}\n{params}{layout.func_close}\n{layout.wrapper[1]}"
            )
        return "\n".join(out)


class MinimaxM2(XmlFunctions):
    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        invokes = "".join(
            f'<invoke name="{name}">\n'
            + "".join(f'<parameter name="{k}">{_text_value(v)}</parameter>\n' for k, v in arguments.items())
            + "</invoke>\n"
            for name, arguments in calls
        )
        return f"<minimax:tool_call>\n{invokes}</minimax:tool_call>"

    def extract(self, text: str) -> Extraction:
        drafts: list[Draft] = []
        spans: list[tuple[int, int]] = []
        for begin, stop, inside, _closed in blocks(text, *self.layout.wrapper):
            spans.append((begin, stop))
            drafts.extend(
                self._functions(inside) or [Draft("", {}, inside, self.expected("no <invoke> element in the call"))]
            )
        return Extraction(drafts, cut(text, spans))


class Glm45(ToolFormat):
    """GLM-4.5 / 4.6 / 4.7: ``<tool_call>NAME`` then ``<arg_key>K</arg_key><arg_value>V</arg_value>``
    pairs, then ``</tool_call>``."""

    name = "glm45"
    aliases = ("glm47",)
    markers = ("<arg_key>",)
    example = "<tool_call><tool name>\n<arg_key><parameter></arg_key>\n<arg_value><value></arg_value>\n</tool_call>"
    result_role = "observation"
    result_wrapper = "<tool_response>\n{content}\n</tool_response>"

    def detect(self, text: str) -> bool:
        """``<arg_key>``, or a ``<tool_call>`` holding nothing but a function name (a GLM call
        without arguments); any other malformed ``<tool_call>`` is left to Hermes."""
        if "<arg_key>" in text:
            return True
        return any(
            _BARE_NAME.fullmatch(inside.strip()) for _b, _s, inside, _c in blocks(text, "<tool_call>", "</tool_call>")
        )

    def extract(self, text: str) -> Extraction:
        drafts: list[Draft] = []
        spans: list[tuple[int, int]] = []
        for begin, stop, inside, _closed in blocks(text, "<tool_call>", "</tool_call>"):
            spans.append((begin, stop))
            drafts.append(self._call(inside))
        return Extraction(drafts, cut(text, spans))

    def _call(self, inside: str) -> Draft:
        key_at = inside.find("<arg_key>")
        name = (inside if key_at < 0 else inside[:key_at]).strip()
        if not name or any(c in name for c in "<>{}\n"):
            return Draft(
                "", {}, inside, self.expected(f"the call must start with the function name: {snippet(inside)}")
            )
        arguments: dict[str, Any] = {}
        rest = "" if key_at < 0 else inside[key_at:]
        for _b, _s, key, _closed in blocks(rest, "<arg_key>", "</arg_key>"):
            value_at = rest.find("<arg_value>", rest.find(key))
            if value_at < 0:
                return Draft(name, {}, inside, self.expected(f"the argument {key.strip()!r} has no <arg_value>"))
            value_end = rest.find("</arg_value>", value_at)
            value = rest[value_at + len("<arg_value>") : value_end if value_end >= 0 else len(rest)]
            arguments[key.strip()] = value
            rest = rest[value_end + len("</arg_value>") :] if value_end >= 0 else ""
            if not rest:
                break
        return Draft(name, arguments, inside)

    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        return "\n".join(
            f"<tool_call>{name}\n"
            + "".join(
                f"<arg_key>{k}</arg_key>\n<arg_value>{_text_value(v)}</arg_value>\n" for k, v in arguments.items()
            )
            + "</tool_call>"
            for name, arguments in calls
        )


def xml_formats() -> list[ToolFormat]:
    qwen = XmlLayout(
        ("<tool_call>", "</tool_call>"),
        "<function=",
        ">",
        "</function>",
        "<parameter=",
        ">",
        "</parameter>",
        "newline",
        wrapper_optional=True,
    )
    seed = XmlLayout(
        ("<seed:tool_call>", "</seed:tool_call>"),
        "<function=",
        ">",
        "</function>",
        "<parameter=",
        ">",
        "</parameter>",
        "newline",
    )
    minimax = XmlLayout(
        ("<minimax:tool_call>", "</minimax:tool_call>"),
        "<invoke name=",
        ">",
        "</invoke>",
        "<parameter name=",
        ">",
        "</parameter>",
        "none",
        newline_layout=False,
    )
    return [
        XmlFunctions(
            "qwen3_xml",
            qwen,
            aliases=("qwen3_coder", "xml"),
            markers=("<function=",),
            result_wrapper="<tool_response>\n{content}\n</tool_response>",
        ),
        XmlFunctions("seed_oss", seed, markers=("<seed:tool_call>",), result_role="tool", result_wrapper=None),
        MinimaxM2(
            "minimax_m2",
            minimax,
            markers=("<minimax:tool_call>",),
            result_role="tool",
            result_wrapper="<response>{content}</response>",
        ),
        Glm45(),
    ]
