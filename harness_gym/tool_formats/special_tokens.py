"""Formats built from special-token delimiters with the name and the JSON arguments in separate
fields: Mistral, DeepSeek V3 / V3.1 and Kimi K2."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness_gym.tool_formats.base import (
    Draft,
    Extraction,
    ToolFormat,
    arguments_object,
    blocks,
    cut,
    decode_prefix,
    draft_from_object,
    dumps,
    dumps_safe,
    snippet,
    tool_function,
)


def _named_call(fmt: ToolFormat, name: str, raw_args: str, raw: str) -> Draft:
    name = name.strip()
    if not name:
        return Draft("", {}, raw, fmt.expected("the tool call has no function name"))
    arguments, error = arguments_object(raw_args.strip())
    return Draft(name, arguments, raw, fmt.expected(error) if error else None)


class Mistral(ToolFormat):
    """Mistral: ``[TOOL_CALLS]name[ARGS]{...}`` per call (tokenizer v11+, optionally with
    ``[CALL_ID]id`` before ``[ARGS]``) and the older ``[TOOL_CALLS][{"name": ..., "arguments": ...}]``."""

    name = "mistral"
    markers = ("[TOOL_CALLS]",)
    example = '[TOOL_CALLS]<tool name>[ARGS]{"<parameter>": <value>}'
    result_role = "tool"
    result_wrapper = "[TOOL_RESULTS]{content}[/TOOL_RESULTS]"

    def extract(self, text: str) -> Extraction:
        drafts: list[Draft] = []
        spans: list[tuple[int, int]] = []
        for begin, _stop, inside, _closed in blocks(text, "[TOOL_CALLS]", None):
            found, used = self._block(inside)
            drafts.extend(found)
            spans.append((begin, begin + len("[TOOL_CALLS]") + used))
        return Extraction(drafts, cut(text, spans))

    def _block(self, inside: str) -> tuple[list[Draft], int]:
        start = len(inside) - len(inside.lstrip())
        if inside[start : start + 1] in ("[", "{"):  # the older JSON form
            decoded = decode_prefix(inside, start)
            if decoded is None:
                return [
                    Draft("", {}, inside, self.expected(f"the tool calls are not valid JSON: {snippet(inside)}"))
                ], len(inside)
            value, after = decoded
            items = value if isinstance(value, list) else [value]
            return [draft_from_object(item, dumps_safe(item), self) for item in items], after
        args_at = inside.find("[ARGS]")
        if args_at < 0:
            return [Draft("", {}, inside, self.expected(f"the call has no [ARGS]: {snippet(inside)}"))], len(inside)
        name = inside[:args_at].split("[CALL_ID]")[0]
        json_at = args_at + len("[ARGS]")
        decoded = decode_prefix(inside, json_at + len(inside[json_at:]) - len(inside[json_at:].lstrip()))
        if decoded is None:
            return [_named_call(self, name, inside[json_at:], inside)], len(inside)
        return [_named_call(self, name, inside[json_at : decoded[1]], inside[: decoded[1]])], decoded[1]

    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        return "".join(f"[TOOL_CALLS]{name}[ARGS]{dumps(dict(arguments))}" for name, arguments in calls)

    def render_tools(self, tools: Sequence[Mapping[str, Any]]) -> str:
        listed = [{"type": "function", "function": tool_function(t)} for t in tools]
        return f"[AVAILABLE_TOOLS]{dumps(listed)}[/AVAILABLE_TOOLS]"


class MistralLegacy(Mistral):
    """Writes the older ``[TOOL_CALLS][{...}]`` form (Mistral 7B v0.3, Mixtral 8x22B); reads both."""

    name = "mistral_legacy"
    example = '[TOOL_CALLS][{"name": "<tool name>", "arguments": {"<parameter>": <value>}}]'

    def detect(self, text: str) -> bool:
        return False  # auto reads both forms through "mistral"

    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        return "[TOOL_CALLS]" + dumps([{"name": n, "arguments": dict(a)} for n, a in calls])


_DS_CALLS_BEGIN, _DS_CALLS_END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
_DS_CALL_BEGIN, _DS_CALL_END, _DS_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"


class _DeepSeek(ToolFormat):
    markers = (_DS_CALLS_BEGIN, _DS_CALL_BEGIN)
    result_role = "tool"
    result_wrapper = "<｜tool▁output▁begin｜>{content}<｜tool▁output▁end｜>"

    def extract(self, text: str) -> Extraction:
        drafts: list[Draft] = []
        spans: list[tuple[int, int]] = []
        for begin, stop, inside, _closed in blocks(text, _DS_CALL_BEGIN, _DS_CALL_END):
            drafts.append(self._call(inside))
            spans.append((begin, stop))
        if not drafts and _DS_CALLS_BEGIN in text:
            at = text.find(_DS_CALLS_BEGIN)
            return Extraction(
                [Draft("", {}, text[at:], self.expected("the tool-calls section holds no call"))], text[:at]
            )
        remaining = cut(text, spans).replace(_DS_CALLS_BEGIN, "").replace(_DS_CALLS_END, "")
        return Extraction(drafts, remaining)

    def _call(self, inside: str) -> Draft:
        raise NotImplementedError


class DeepSeekV3(_DeepSeek):
    """DeepSeek V3 / R1: ``<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME`` then the arguments in a
    ```json fence, then ``<｜tool▁call▁end｜>``, all inside ``<｜tool▁calls▁begin｜>...<｜tool▁calls▁end｜>``."""

    name = "deepseek_v3"
    example = f'{_DS_CALLS_BEGIN}{_DS_CALL_BEGIN}function{_DS_SEP}<tool name>\n```json\n{{"<parameter>": <value>}}\n```{_DS_CALL_END}{_DS_CALLS_END}'
    result_wrapper = (
        "<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>{content}<｜tool▁output▁end｜><｜tool▁outputs▁end｜>"
    )

    def detect(self, text: str) -> bool:
        return super().detect(text) and "```json" in text

    def _call(self, inside: str) -> Draft:
        sep = inside.find(_DS_SEP)
        if sep < 0:
            return Draft("", {}, inside, self.expected(f"the call has no {_DS_SEP}: {snippet(inside)}"))
        header, fence = (
            inside[sep + len(_DS_SEP) :].split("\n", 1) if "\n" in inside[sep:] else (inside[sep + len(_DS_SEP) :], "")
        )
        fence = fence.strip()
        if not (fence.startswith("```json") and fence.endswith("```")):
            return Draft(header.strip(), {}, inside, self.expected("the arguments must be in a ```json fence"))
        return _named_call(self, header, fence[len("```json") : -3], inside)

    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        body = "\n".join(
            f"{_DS_CALL_BEGIN}function{_DS_SEP}{name}\n```json\n{dumps(dict(arguments))}\n```{_DS_CALL_END}"
            for name, arguments in calls
        )
        return f"{_DS_CALLS_BEGIN}{body}{_DS_CALLS_END}"


class DeepSeekV31(_DeepSeek):
    """DeepSeek V3.1 / V3.2-Exp: ``<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}<｜tool▁call▁end｜>``."""

    name = "deepseek_v31"
    example = (
        f'{_DS_CALLS_BEGIN}{_DS_CALL_BEGIN}<tool name>{_DS_SEP}{{"<parameter>": <value>}}{_DS_CALL_END}{_DS_CALLS_END}'
    )

    def _call(self, inside: str) -> Draft:
        sep = inside.find(_DS_SEP)
        if sep < 0:
            return Draft("", {}, inside, self.expected(f"the call has no {_DS_SEP}: {snippet(inside)}"))
        return _named_call(self, inside[:sep], inside[sep + len(_DS_SEP) :], inside)

    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        body = "".join(f"{_DS_CALL_BEGIN}{n}{_DS_SEP}{dumps(dict(a))}{_DS_CALL_END}" for n, a in calls)
        return f"{_DS_CALLS_BEGIN}{body}{_DS_CALLS_END}"


_K_SECTION_BEGIN, _K_SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
_K_CALL_BEGIN, _K_CALL_END, _K_ARGS = "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>"


class KimiK2(ToolFormat):
    """Kimi K2: ``<|tool_call_begin|>functions.NAME:INDEX<|tool_call_argument_begin|>{json}<|tool_call_end|>``
    inside ``<|tool_calls_section_begin|>...<|tool_calls_section_end|>``."""

    name = "kimi_k2"
    markers = (_K_SECTION_BEGIN, _K_CALL_BEGIN)
    example = f'{_K_SECTION_BEGIN}{_K_CALL_BEGIN}functions.<tool name>:0{_K_ARGS}{{"<parameter>": <value>}}{_K_CALL_END}{_K_SECTION_END}'
    result_role = "tool"
    result_wrapper = None

    def extract(self, text: str) -> Extraction:
        drafts: list[Draft] = []
        spans: list[tuple[int, int]] = []
        for begin, stop, inside, _closed in blocks(text, _K_CALL_BEGIN, _K_CALL_END):
            spans.append((begin, stop))
            at = inside.find(_K_ARGS)
            if at < 0:
                drafts.append(Draft("", {}, inside, self.expected(f"the call has no {_K_ARGS}")))
                continue
            header = inside[:at].strip()
            name = header.rsplit(":", 1)[0] if ":" in header else header
            name = name[len("functions.") :] if name.startswith("functions.") else name
            drafts.append(_named_call(self, name, inside[at + len(_K_ARGS) :], inside))
        remaining = cut(text, spans).replace(_K_SECTION_BEGIN, "").replace(_K_SECTION_END, "")
        return Extraction(drafts, remaining)

    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        body = "".join(
            f"{_K_CALL_BEGIN}functions.{n}:{i}{_K_ARGS}{dumps(dict(a))}{_K_CALL_END}" for i, (n, a) in enumerate(calls)
        )
        return f"{_K_SECTION_BEGIN}{body}{_K_SECTION_END}"
