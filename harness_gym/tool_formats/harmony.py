"""gpt-oss's harmony format (``openai``): messages ``<|start|>assistant<|channel|>CHANNEL ...
<|message|>BODY<|end|>``; a tool call is a ``commentary`` message addressed ``to=functions.NAME``
ending in ``<|call|>``; ``analysis`` is reasoning."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from harness_gym.tool_formats.base import Draft, Extraction, ToolFormat, arguments_object, tool_function

_ENDS = ("<|end|>", "<|call|>", "<|return|>")


def _messages(text: str) -> list[tuple[str, str, int, int]]:
    """(header, body, start, end) of each message; the first may lack ``<|start|>assistant``.
    Linear in the text: the next position of each delimiter is looked up once per pass."""
    out: list[tuple[str, str, int, int]] = []
    cached: dict[str, int] = {}

    def after(token: str, position: int) -> int:
        found = cached.get(token, -2)
        if found == -1 or (found >= position):
            return found
        cached[token] = text.find(token, position)
        return cached[token]

    position = 0
    while True:
        channel = after("<|channel|>", position)
        if channel < 0:
            return out
        start = text.rfind("<|start|>", position, channel)
        begin = channel if start < 0 else start
        body_at = after("<|message|>", channel)
        if body_at < 0:
            out.append((text[channel:], "", begin, len(text)))
            return out
        candidates = [(after(token, body_at), token) for token in (*_ENDS, "<|start|>")]
        found = [(index, token) for index, token in candidates if index >= 0]
        stop, token = min(found) if found else (len(text), "")
        consumed = len(token) if token != "<|start|>" else 0
        out.append((text[begin:body_at], text[body_at + len("<|message|>") : stop], begin, stop + consumed))
        position = max(stop + consumed, body_at + 1)


class Harmony(ToolFormat):
    name = "openai"
    aliases = ("harmony", "gpt_oss")
    markers = ("<|channel|>",)
    example = (
        '<|channel|>commentary to=functions.<tool name> <|constrain|>json<|message|>{"<parameter>": <value>}<|call|>'
    )
    result_role = "tool"
    result_wrapper = None

    def extract(self, text: str) -> Extraction:
        drafts: list[Draft] = []
        prose: list[str] = []
        messages = _messages(text)
        if not messages:
            return Extraction([], text)
        lead = text[: messages[0][2]]
        for header, body, _begin, _end in messages:
            recipient = next((w[3:] for w in header.replace("<|", " <|").split() if w.startswith("to=")), None)
            if recipient:
                name = recipient[len("functions.") :] if recipient.startswith("functions.") else recipient
                arguments, error = arguments_object(body.strip() or "{}")
                drafts.append(
                    Draft(name, arguments, header + "<|message|>" + body, self.expected(error) if error else None)
                )
            elif "analysis" not in header.split("<|message|>")[0]:
                prose.append(body)
        return Extraction(drafts, "\n".join([lead.strip(), *prose]).strip())

    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        return "<|start|>assistant".join(
            f"<|channel|>commentary to=functions.{n} <|constrain|>json<|message|>{json.dumps(dict(a), ensure_ascii=False)}<|call|>"
            for n, a in calls
        )

    def render_tools(self, tools: Sequence[Mapping[str, Any]]) -> str:
        lines = ["# Tools", "", "## functions", "", "namespace functions {", ""]
        for tool in tools:
            function = tool_function(tool)
            if function.get("description"):
                lines.append(f"// {function['description']}")
            properties = (function.get("parameters") or {}).get("properties") or {}
            required = set((function.get("parameters") or {}).get("required") or [])
            if properties:
                lines.append(f"type {function.get('name')} = (_: {{")
                for key, schema in properties.items():
                    if isinstance(schema, Mapping) and schema.get("description"):
                        lines.append(f"// {schema['description']}")
                    optional = "" if key in required else "?"
                    lines.append(f"{key}{optional}: {_ts_type(schema)},")
                lines.append("}) => any;")
            else:
                lines.append(f"type {function.get('name')} = () => any;")
            lines.append("")
        lines.append("} // namespace functions")
        return "\n".join(lines)

    def render_result(self, content: str) -> dict[str, str]:
        return {"role": "tool", "content": content}


def _ts_type(schema: Any) -> str:
    if not isinstance(schema, Mapping):
        return "any"
    if "enum" in schema:
        return " | ".join(json.dumps(v) for v in schema["enum"])
    kind = schema.get("type")
    if kind == "array":
        return f"{_ts_type(schema.get('items'))}[]"
    return {"string": "string", "integer": "number", "number": "number", "boolean": "boolean", "object": "object"}.get(
        str(kind), "any"
    )
