"""Pythonic calls: the whole message is a Python list of calls, ``[name(a="v", b=1), other()]``
(Llama 3.2 small models, Llama 4, ToolACE, several small models). Read with :mod:`ast` and
``literal_eval`` only, never executed."""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from harness_gym.tool_formats.base import Draft, Extraction, ToolFormat, snippet

_CALL_HEAD = re.compile(r"\[\s*[A-Za-z_][\w.]*\(")
_MAX_SOURCE = 1_000_000  # characters: ast on more is slow and no model writes a call that long


def py_literal(value: Any) -> str:
    """A Python literal for a JSON value (strings ASCII-escaped with ``ascii`` so any code point,
    astral or lone surrogate, survives the round trip)."""
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, str):
        return ascii(value)
    if isinstance(value, float) and not math.isfinite(value):
        return f"float({str(value)!r})"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{py_literal(str(k))}: {py_literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(py_literal(v) for v in value) + "]"
    return json.dumps(str(value))


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


class Pythonic(ToolFormat):
    name = "pythonic"
    example = '[<tool name>(<parameter>="<value>"), <other tool>(<parameter>=1)]'
    result_role = "tool"
    result_wrapper = None
    strip_tokens: tuple[str, ...] = ()

    def _source(self, text: str) -> str:
        body = text.strip()
        for token in self.strip_tokens:
            body = body.replace(token, "")
        return body.strip()

    def _looks_like_list(self, body: str) -> bool:
        if not (body.startswith("[") and body.endswith("]") and "(" in body):
            return False
        head = body[1:].lstrip()
        return bool(head) and (head[0].isalpha() or head[0] == "_")

    def _tree(self, source: str) -> ast.Expression | str:
        """The parsed source, or why it is not a call list."""
        if len(source) > _MAX_SOURCE:
            return "the call list is too long to read"
        try:
            tree = ast.parse(source, mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            return f"not a valid Python call list ({type(exc).__name__}): {snippet(source)}"
        if not isinstance(tree.body, ast.List):
            return "the calls must form one Python list"
        return tree

    def detect(self, text: str) -> bool:
        """Only a message that parses as a list of calls: a list comprehension or any other code
        that merely starts with ``[name`` is prose."""
        body = self._source(text)
        if not self._looks_like_list(body):
            return False
        tree = self._tree(body)
        if isinstance(tree, str):
            if tree.startswith("not a valid Python"):  # a call attempt only if it reads `[name(...)]`
                return body.endswith(")]") and _CALL_HEAD.match(body) is not None
            return False
        elements = tree.body.elts  # type: ignore[attr-defined]
        return bool(elements) and all(isinstance(e, ast.Call) for e in elements)

    def extract(self, text: str) -> Extraction:
        source = self._source(text)
        if not self._looks_like_list(source):
            return Extraction([], text)
        tree = self._tree(source)
        if isinstance(tree, str):
            return Extraction([Draft("", {}, source[:2000], self.expected(tree))], "")
        return Extraction([self._call(node, source) for node in tree.body.elts], "")  # type: ignore[attr-defined]

    def _call(self, node: ast.expr, source: str) -> Draft:
        raw = ast.get_source_segment(source, node) or ""
        if not isinstance(node, ast.Call):
            return Draft("", {}, raw, self.expected(f"each list item must be a call: {snippet(raw)}"))
        name = _dotted(node.func)
        if not name:
            return Draft("", {}, raw, self.expected("the called function must be a plain name"))
        if node.args:
            return Draft(name, {}, raw, self.expected("pass arguments by keyword (name=value)"))
        arguments: dict[str, Any] = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                return Draft(name, {}, raw, self.expected("**kwargs is not allowed in a call"))
            try:
                arguments[keyword.arg] = ast.literal_eval(keyword.value)
            except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
                segment = ast.get_source_segment(source, keyword.value) or ""
                return Draft(
                    name, {}, raw, self.expected(f"the argument {keyword.arg!r} is not a literal: {snippet(segment)}")
                )
        return Draft(name, _jsonable(arguments), raw)

    def render_calls(self, calls: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
        return (
            "["
            + ", ".join(f"{n}(" + ", ".join(f"{k}={py_literal(v)}" for k, v in a.items()) + ")" for n, a in calls)
            + "]"
        )


def _jsonable(value: Any) -> Any:
    """literal_eval may give tuples, sets or bytes: make the arguments JSON-shaped."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, complex):
        return str(value)
    return value


class Llama4Pythonic(Pythonic):
    """Llama 4: pythonic calls, sometimes between ``<|python_start|>`` and ``<|python_end|>``."""

    name = "llama4_pythonic"
    strip_tokens = ("<|python_start|>", "<|python_end|>")
    result_role = "ipython"
