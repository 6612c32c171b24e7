"""A CLI's own rewrite of old tool results in the history it resends, described in its file
(``masked_results``): Gemini CLI 0.61.0 replaces results older than the newest 50,000 tokens of
tool output by a preview and the path of a file it saved them to (``ToolOutputMaskingService``, read
in the installed bundle). The proxy flags two requests that give one call different results as
tampering (``RolloutChannel.verify``); a resent result is accepted instead only where it is exactly
what the rule makes of the result first recorded for that call: the preview the service cuts from
that original, in the service's template, a file path of the service's shape, for a result the
service would mask (old enough, not its newest, not exempt, shorter masked). Only the preview's
digest and the CLI's token estimate of each original are kept (:class:`Original`)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_gym.external.policies import OBJECT
from harness_gym.external.proxy import gemini

# the rules the proxy implements, by the name a CLI file gives, and the package and version whose bundle
# each was read in: a CLI file pinning another version is refused (its service may cut its preview
# differently, and then needs its own rule, checked against its bundle: tests/test_external_masking.py)
RULES: dict[str, tuple[str, str]] = {"gemini-cli-0.61.0-tool-output-masking": ("@google/gemini-cli", "0.61.0")}

# JavaScript's String.prototype.trim: WhiteSpace and LineTerminator (not Python's str.strip set)
_JS_SPACE = (
    "\t\n\v\f\r \u00a0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
# formatShellPreview's /^(Output|...): /m: JavaScript's ^ in multiline mode follows \n, \r, U+2028 and
# U+2029 (a scan for the line break first: a lookbehind tried at every position costs 4x as much)
_NAMES = ("Output", "Error", "Exit Code", "Signal", "Background PIDs", "Process Group PGID")
_SECTION = re.compile("[\n\r\u2028\u2029](" + "|".join(_NAMES) + "): ")
_INDEX_KEY = re.compile(r"0|[1-9][0-9]{0,9}")  # an integer-like key: JavaScript orders those first
_SAFE = re.compile(r"[^a-zA-Z0-9_-]")  # sanitizeFilenamePart
# the service's file, its name (``<tool>_<call>_<random>``) compared by :meth:`ToolOutputMasking._path`
_FILE = re.compile(
    r"(?:/[A-Za-z0-9._-]+)*/\.gemini/tmp/[A-Za-z0-9._-]+/tool-outputs/(?:session-[A-Za-z0-9_-]+/)?([A-Za-z0-9_-]+)\.txt"
)
_RANDOM = re.compile(r"[0-9a-z]*")  # Math.random().toString(36).substring(7)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _units(text: str) -> int:
    """``text.length`` in JavaScript: UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _js_slice(text: str, start: int, end: int | None = None) -> str:
    """``text.slice(start, end)`` in JavaScript (UTF-16 units: a pair may be cut, as the CLI cuts it)."""
    data = text.encode("utf-16-le", "surrogatepass")
    begin = max(len(data) // 2 + start, 0) if start < 0 else start
    return data[2 * begin : None if end is None else 2 * end].decode("utf-16-le", "surrogatepass")


def _js_trim(text: str) -> str:
    return text.strip(_JS_SPACE)


def _plain(value: Any) -> bool:
    """Whether ``JSON.stringify`` of ``value`` is the stdlib's text (with lone surrogates escaped): no
    floats (JavaScript spells some otherwise), no integer-like keys (JavaScript puts those first)."""
    if isinstance(value, OBJECT):
        return all(not _INDEX_KEY.fullmatch(k) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, str | int)  # bool is an int


_SURROGATE = re.compile("[\ud800-\udfff]")


def _js_json(value: Any, pretty: bool) -> str:
    """``JSON.stringify(value)`` or ``JSON.stringify(value, null, 2)`` for a :func:`_plain` value."""
    if pretty:
        text = json.dumps(value, ensure_ascii=False, indent=2)
    else:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _compact_units(value: Any, pretty: str | None = None) -> int:
    """``JSON.stringify(value).length``; from ``pretty`` (the value's pretty JSON) where the value is
    an object of scalars, the CLI's usual response: only its layout differs, 4 units an entry and 1."""
    flat = isinstance(value, dict) and value and not any(isinstance(v, (*OBJECT, list)) for v in value.values())
    if pretty is not None and flat:
        return _units(pretty) - 4 * len(value) - 1
    return _units(_js_json(value, False))


def _js_truthy(value: Any) -> bool:
    return isinstance(value, (*OBJECT, list)) or bool(value)


def _js_string(value: Any) -> str | None:
    """``String(value)`` for the values a CLI's response holds; None for others (not reproduced)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int):
        return str(value)
    return None


def _simple_preview(content: str) -> str:
    """``formatSimplePreview``: more than 20 lines become the first and last 10."""
    lines = content.split("\n")
    if len(lines) <= 20:
        return content
    return "\n".join(lines[:10]) + f"\n\n... [{len(lines) - 20} lines omitted] ...\n\n" + "\n".join(lines[-10:])


def _sections(content: str) -> list[str]:
    """``content.split(/^(Output|...): /m)`` as JavaScript splits it: text, name, text, name, ..., text."""
    cuts = [(0, name) for name in _NAMES if content.startswith(name + ": ")]
    cuts += [(m.start() + 1, m.group(1)) for m in _SECTION.finditer(content)]
    parts, end = [], 0
    for start, name in cuts:
        parts += [content[end:start], name]
        end = start + len(name) + 2
    return [*parts, content[end:]]


def _shell_preview(response: Mapping[str, Any]) -> str | None:
    """``formatShellPreview``: each section of the shell tool's output, its Output cut to 20 lines."""
    content = next((response[k] for k in ("output", "stdout") if _js_truthy(response.get(k))), "")
    if not isinstance(content, str):
        return _js_json(content, False) if isinstance(content, (*OBJECT, list)) else _js_string(content)
    parts = _sections(content)
    if len(parts) < 3:
        return _simple_preview(content)
    previews = [_simple_preview(_js_trim(parts[0]))] if _js_trim(parts[0]) else []
    for position in range(1, len(parts), 2):
        name, section = parts[position], _js_trim(parts[position + 1]) if position + 1 < len(parts) else ""
        previews.append(f"Output: {_simple_preview(section)}" if name == "Output" else f"{name}: {section}")
    preview = "\n".join(previews)
    code = response.get("exitCode")
    code = response.get("exit_code") if code is None else code
    if code is not None and not (type(code) is int and code == 0):
        said = _js_string(code)
        if said is None:
            return None
        if f"Exit Code: {said}" not in content:
            preview += f"\n[Exit Code: {said}]"
    error = response.get("error")
    if _js_truthy(error):
        said = _js_string(error)
        if said is None:
            return None
        if f"Error: {said}" not in content:
            preview += f"\n[Error: {said}]"
    return preview


@dataclass(frozen=True)
class Original:
    """What the rule needs of a call's first recorded result: the CLI's token estimate of its part,
    whether the service scans it at all (not exempt, some content, not masked already) and the
    digest of the preview it would cut (None where the proxy cannot reproduce it: never accepted)."""

    name: str
    tokens: int
    scanned: bool
    preview: str | None


@dataclass(frozen=True)
class Masked:
    """One accepted mask: the call, the masked text's digest (resent on every later turn) and the file
    the CLI says it saved the original to."""

    call_id: str
    tool: str
    path: str
    digest: str
    turn: int  # the rollout's agent turn that first carried it

    def to_json(self) -> dict[str, Any]:
        return {"call_id": self.call_id, "tool": self.tool, "path": self.path, "turn": self.turn}


@dataclass(frozen=True)
class Change:
    """A result a request gives a call that differs from the first one recorded for it."""

    ordinal: int  # among the request's tool results (the order of its functionResponse parts)
    call_id: str
    text: str
    digest: str


@dataclass(frozen=True)
class ToolOutputMasking:
    """Gemini CLI 0.61.0's ``ToolOutputMaskingService.mask``, as its CLI file describes it: the masked
    text is ``head + preview + middle + path + tail``; the preview is the shell tool's sections
    (``formatShellPreview``) or the first and last 250 characters of the response's JSON; a part is
    masked only once the newer tool output the service counts passes ``protection_threshold_tokens``,
    and only in a pass where what it may mask adds up to ``min_prunable_tokens``."""

    rule: str
    head: str
    middle: str
    tail: str
    protection_threshold_tokens: int
    min_prunable_tokens: int
    shell_tool: str
    exempt_tools: frozenset[str]

    @classmethod
    def from_data(cls, data: Mapping[str, Any] | None) -> ToolOutputMasking | None:
        """The rule a CLI file's ``masked_results`` names (None where it has none); ValueError for an
        unknown rule."""
        if not data:
            return None
        if data.get("rule") not in RULES:
            raise ValueError(f"unknown masked_results rule {data.get('rule')!r}; known: {', '.join(RULES)}")
        return cls(
            rule=str(data["rule"]),
            head=str(data["head"]),
            middle=str(data["middle"]),
            tail=str(data["tail"]),
            protection_threshold_tokens=int(data["protection_threshold_tokens"]),
            min_prunable_tokens=int(data["min_prunable_tokens"]),
            shell_tool=str(data["shell_tool"]),
            exempt_tools=frozenset(data.get("exempt_tools") or ()),
        )

    @staticmethod
    def responses(body: Mapping[str, Any] | None) -> list[Mapping[str, Any]] | None:
        """The request's functionResponse objects, one per canonical tool result (Gemini's wire)."""
        return gemini.function_responses(body) if body is not None else None

    def split(self, text: str) -> tuple[str, str] | None:
        """(preview, path) of a text in the rule's template, else None (the path has no line break, so
        the last ``middle`` is the one the template put there)."""
        if len(text) < len(self.head) + len(self.tail) or not self.looks_masked(text):
            return None
        inner = text[len(self.head) : len(text) - len(self.tail)]
        if self.middle not in inner:
            return None
        preview, path = inner.rsplit(self.middle, 1)
        return preview, path

    def looks_masked(self, text: str) -> bool:
        return text.startswith(self.head) and text.endswith(self.tail)

    def original(self, response: Mapping[str, Any]) -> Original:
        """What is kept of a call's first result (``response`` its functionResponse object); one the
        proxy cannot reproduce (nested past the stack, say) is kept as never masked."""
        try:
            return self._original(response)
        except (RecursionError, ValueError, TypeError):
            return Original(str(response.get("name") or "unknown_tool"), 0, False, None)

    def _original(self, response: Mapping[str, Any]) -> Original:
        name = response.get("name")
        name = name if isinstance(name, str) and name else "unknown_tool"
        value = response.get("response")
        if not _js_truthy(value) or not _plain(value) or "parts" in response:
            return Original(name, self._tokens(response) or 0, False, None)  # not scanned, or not reproduced
        content = _js_json(value, True)  # getToolOutputContent
        tokens = self._tokens(response, content) or 0
        if name in self.exempt_tools or "<tool_output_masked" in content:
            return Original(name, tokens, False, None)
        if name == self.shell_tool:
            preview = _shell_preview(value) if isinstance(value, OBJECT) else None
        elif _units(content) > 500:
            preview = f"{_js_slice(content, 0, 250)}\n... [TRUNCATED] ...\n{_js_slice(content, -250)}"
        else:
            preview = content
        return Original(name, tokens, True, _digest(preview) if preview is not None else None)

    @staticmethod
    def _tokens(response: Mapping[str, Any], pretty: str | None = None) -> int | None:
        """``estimateTokenCountSync([part])`` of a functionResponse part: its name's and its response
        JSON's length over 4, floored (None where the JSON is not reproduced). ``pretty``: the
        response's pretty JSON where the caller has it."""
        name, value = response.get("name"), response.get("response")
        units = _units(name) if isinstance(name, str) else 0
        if isinstance(value, str):
            return (units + _units(value)) // 4
        if value is None:
            return units // 4
        return (units + _compact_units(value, pretty)) // 4 if _plain(value) else None

    def check(
        self,
        changes: Sequence[Change],
        calls: Sequence[str | None],  # the reply call id of each tool result of the request, by ordinal
        responses: Sequence[Mapping[str, Any]],  # and its functionResponse object
        protected_from: int,  # the first ordinal of the newest results (the latest turn's)
        originals: Mapping[str, Original],
        masked: Mapping[str, Masked],
        turn: int,
    ) -> tuple[str | None, list[Masked]]:
        """(why a change is not the CLI's masking, or None; the masks accepted)."""
        newly = {c.ordinal for c in changes}
        # the tool output the service counts, from each result to the newest turn (its own included), as
        # suffix sums: one pass a request, not one a mask (O(results x masks) on a history of many calls)
        past = [0] * (protected_from + 1)
        for o in range(protected_from - 1, -1, -1):
            c = calls[o]
            counted = c is not None and c in originals and originals[c].scanned and (o in newly or c not in masked)
            past[o] = past[o + 1] + (originals[c].tokens if counted and c is not None else 0)
        # what the service may mask this pass: every counted result from the first past the threshold on
        boundary = next(
            (o for o in range(protected_from - 1, -1, -1) if past[o] > self.protection_threshold_tokens), -1
        )
        prunable = past[0] - past[boundary + 1] if boundary >= 0 else 0
        accepted = []
        for change in changes:
            try:
                why = self._why_not(change, responses, protected_from, originals, masked, past, prunable)
            except (RecursionError, ValueError, TypeError) as exc:  # a body the rule cannot read: not its mask
                why = f"the rewritten result cannot be read as a mask ({type(exc).__name__})"
            if why is not None:
                return f"tool call {change.call_id!r}: {why}", []
            _, path = self.split(change.text) or ("", "")
            accepted.append(Masked(change.call_id, originals[change.call_id].name, path, change.digest, turn))
        return None, accepted

    def _why_not(
        self,
        change: Change,
        responses: Sequence[Mapping[str, Any]],
        protected_from: int,
        originals: Mapping[str, Original],
        masked: Mapping[str, Masked],
        past: Sequence[int],
        prunable: int,
    ) -> str | None:
        original = originals.get(change.call_id)
        if change.call_id in masked:
            return "a result masked before is masked again, differently (the CLI masks a result once)"
        if change.ordinal >= protected_from:
            return "one of the newest results is rewritten (the CLI never masks its latest turn)"
        if original is None or original.preview is None:
            return "the result is rewritten, and it is not one the CLI's masking rewrites"
        part, pieces = responses[change.ordinal], self.split(change.text)
        if pieces is None or part.get("response") != {"output": change.text}:
            return f"the result is rewritten, and not in the template of the {self.rule} rule"
        preview, path = pieces
        if _digest(preview) != original.preview:
            return "a masked result whose preview is not the one the CLI cuts from the result first recorded"
        if not self._path(path, part):
            return f"a masked result whose file path {path[:200]!r} is not of the CLI's shape"
        if (self._tokens(part) or 0) >= original.tokens:
            return "a masked result no shorter than its original (the CLI keeps such a result)"
        if past[change.ordinal] <= self.protection_threshold_tokens:
            return (
                f"a result masked with {past[change.ordinal] - original.tokens} tokens of newer tool output: the "
                f"CLI masks only past the newest {self.protection_threshold_tokens}"
            )
        if prunable < self.min_prunable_tokens:
            return (
                f"a result masked with {prunable} tokens of tool output past the newest "
                f"{self.protection_threshold_tokens}: the CLI masks nothing under {self.min_prunable_tokens}"
            )
        return None

    @staticmethod
    def _path(path: str, part: Mapping[str, Any]) -> bool:
        """The service's file: ``<HOME>/.gemini/tmp/<project>/tool-outputs/session-<id>/<tool>_<call>_<random>.txt``
        (tool and call id sanitized and lower-cased, the random part base-36). The call id is the CLI's
        own, ``<name>__<id>``: it strips the ``<name>__`` prefix from the ids it sends
        (``stripToolCallIdPrefixes``), so the wire's id is accepted with it or, unprefixed, without.
        The file name is compared as text, not compiled into a pattern: an id is the agent's to choose,
        and compiling a regular expression costs ~1 us a character."""
        found = _FILE.fullmatch(path)
        if found is None:
            return False
        name, call = part.get("name"), part.get("id")
        tool = _SAFE.sub("_", name if isinstance(name, str) and name else "unknown_tool").lower()
        rest = found.group(1)
        if not rest.startswith(tool + "_"):
            return False
        rest = rest[len(tool) + 1 :]
        if not (isinstance(call, str) and call):
            stamp, _, random = rest.partition("_")  # Date.now()
            return stamp.isdigit() and stamp.isascii() and _RANDOM.fullmatch(random) is not None
        prefix = (_js_trim(name) if isinstance(name, str) else "") or "generic_tool"
        for said in (_SAFE.sub("_", f"{prefix}__{call}").lower(), _SAFE.sub("_", call).lower()):
            if rest.startswith(said + "_") and _RANDOM.fullmatch(rest, len(said) + 1) is not None:
                return True
        return False
