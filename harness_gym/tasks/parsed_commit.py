"""R2E-Gym's ``parsed_commit_content`` as the unified diff of its gold fix (what ``git apply`` takes).

An R2E-Gym row carries its gold commit only as a JSON ``ParsedCommit``; the row's ``prompt`` is the
prose prompt its issue was written from (the patch quoted inside it), not a patch. The format,
as R2E-Gym's ``commit_models`` define and its commit parser fills it:

- ``file_diffs``: one per file, ``{header: {file: {path}, misc_line}, index_line, is_binary_file,
  binary_line, minus_file: {path}, plus_file: {path}, hunks}``. ``misc_line`` holds the lines
  between ``diff --git`` and ``index`` (``new file mode 100644``; several joined by newlines);
  ``index_line`` is ``{old_commit_hash, new_commit_hash, mode}`` or null; ``minus_file`` and
  ``plus_file`` hold the text after ``--- `` and ``+++ `` (``a/x.py``, ``/dev/null``), or null
  when the diff has no such lines. Renames do not occur (R2E-Gym's parser refuses them).
- a hunk: ``{descriptor: {old_range: {start, length}, new_range, section}, line_group:
  {all_lines: [{content, type}]}}``; ``length`` null means 1; ``type`` is ``context``, ``added``,
  ``deleted`` or ``note`` (``\\ No newline at end of file``); ``content`` has no prefix.

R2E-Gym's gold patch is the commit's non-test Python files (``get_patch(test_file=False)``, Python
only by default): the same selection here, test files (R2E-Gym's rule) and binary diffs left out
and named. Its parser splits a diff on newlines, so the last hunk of a commit may end with an
empty context line its header does not count: such surplus trailing lines are dropped, any other
disagreement with the header is an error (a patch that applies wrongly would be a wrong reference).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

LINE_PREFIX = {"context": " ", "added": "+", "deleted": "-"}
TEST_FOLDERS = {"tests", "Tests", "test", "Test"}


class ParsedCommitError(ValueError):
    """``parsed_commit_content`` is not a ParsedCommit this module can turn into a patch."""


@dataclass
class GoldPatch:
    """The gold patch and the files of the commit it leaves out (``path (why)``)."""

    patch: str
    skipped: list[str] = field(default_factory=list)


def is_test_path(path: str) -> bool:
    """R2E-Gym's test-file rule: the tests are the grader's, never part of the reference."""
    parts = path.split("/")
    return path.endswith("_test.py") or parts[-1].startswith("test_") or bool(TEST_FOLDERS & set(parts))


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ParsedCommitError(f"{where} is not an object")
    return value


def _text(value: Any, where: str, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value) or "\n" in value:
        raise ParsedCommitError(f"{where} must be a {'' if empty else 'non-empty '}one-line string, not {value!r:.80}")
    return value


def _range(value: Any, where: str) -> tuple[str, int]:
    """A hunk range as written in its header (``3`` or ``3,4``) and the lines it spans."""
    value = _object(value, where)
    start, length = value.get("start"), value.get("length")
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ParsedCommitError(f"{where}.start must be a non-negative integer, not {start!r}")
    if length is None:
        return str(start), 1
    if isinstance(length, bool) or not isinstance(length, int) or length < 0:
        raise ParsedCommitError(f"{where}.length must be a non-negative integer or null, not {length!r}")
    return f"{start},{length}", length


def _hunk(hunk: Any, where: str) -> list[str]:
    hunk = _object(hunk, where)
    descriptor = _object(hunk.get("descriptor"), f"{where}.descriptor")
    old_text, old_length = _range(descriptor.get("old_range"), f"{where}.old_range")
    new_text, new_length = _range(descriptor.get("new_range"), f"{where}.new_range")
    section = _text(descriptor.get("section") or "", f"{where}.section", empty=True)
    lines = _object(hunk.get("line_group"), f"{where}.line_group").get("all_lines")
    if not isinstance(lines, list):
        raise ParsedCommitError(f"{where}.line_group.all_lines is not a list")
    body: list[str] = []
    old_count = new_count = 0
    for number, line in enumerate(lines):
        line = _object(line, f"{where} line {number}")
        kind, content = line.get("type"), _text(line.get("content"), f"{where} line {number}", empty=True)
        if kind == "note":
            if not body or body[-1].startswith("\\"):
                raise ParsedCommitError(f"{where} line {number}: a note must follow a diff line")
            body.append(f"\\ {content}")
            continue
        if kind not in LINE_PREFIX:
            raise ParsedCommitError(f"{where} line {number}: unknown type {kind!r} (context, added, deleted, note)")
        body.append(LINE_PREFIX[kind] + content)
        old_count += kind != "added"
        new_count += kind != "deleted"
    while (old_count > old_length or new_count > new_length) and body and body[-1] == " ":
        body.pop()  # the parser's artefact: the newline ending the diff read as an empty context line
        old_count, new_count = old_count - 1, new_count - 1
    if (old_count, new_count) != (old_length, new_length):
        raise ParsedCommitError(
            f"{where}: its lines span {old_count} old / {new_count} new lines, "
            f"its header says {old_length} / {new_length}"
        )
    return [f"@@ -{old_text} +{new_text} @@" + (f" {section}" if section else ""), *body]


def _file_patch(diff: Mapping[str, Any], path: str, where: str) -> str:
    header = _object(diff.get("header"), f"{where}.header")
    out = [f"diff --git a/{path} b/{path}"]
    misc = header.get("misc_line")
    if misc:
        if not isinstance(misc, str):
            raise ParsedCommitError(f"{where}.header.misc_line is not a string")
        out += misc.split("\n")
    index = diff.get("index_line")
    if index:
        index = _object(index, f"{where}.index_line")
        old = _text(index.get("old_commit_hash"), f"{where}.index_line.old_commit_hash")
        new = _text(index.get("new_commit_hash"), f"{where}.index_line.new_commit_hash")
        mode = _text(index.get("mode") or "", f"{where}.index_line.mode", empty=True)
        out.append(f"index {old}..{new}" + (f" {mode}" if mode else ""))
    minus, plus = diff.get("minus_file"), diff.get("plus_file")
    hunks = diff.get("hunks") or []
    if not isinstance(hunks, list):
        raise ParsedCommitError(f"{where}.hunks is not a list")
    if minus and plus:
        out.append("--- " + _text(_object(minus, f"{where}.minus_file").get("path"), f"{where}.minus_file.path"))
        out.append("+++ " + _text(_object(plus, f"{where}.plus_file").get("path"), f"{where}.plus_file.path"))
    elif hunks:
        raise ParsedCommitError(f"{where} has hunks but no ---/+++ file lines")
    for number, hunk in enumerate(hunks):
        out += _hunk(hunk, f"{where} hunk {number}")
    return "\n".join(out) + "\n"


def gold_patch(content: str | Mapping[str, Any]) -> GoldPatch:
    """The unified diff of the commit's non-test Python files (empty when it changes none)."""
    if isinstance(content, str):
        try:
            content = json.loads(content)
        except json.JSONDecodeError as exc:
            raise ParsedCommitError(f"not JSON ({exc.msg} at character {exc.pos})") from exc
    file_diffs = _object(content, "the ParsedCommit").get("file_diffs")
    if not isinstance(file_diffs, list):
        raise ParsedCommitError("file_diffs is missing or not a list")
    patches: list[str] = []
    skipped: list[str] = []
    for number, diff in enumerate(file_diffs):
        where = f"file_diffs[{number}]"
        diff = _object(diff, where)
        header = _object(diff.get("header"), f"{where}.header")
        path = _text(_object(header.get("file"), f"{where}.header.file").get("path"), f"{where}.header.file.path")
        if is_test_path(path):
            skipped.append(f"{path} (test file)")
        elif not path.endswith(".py"):
            skipped.append(f"{path} (not Python)")
        elif diff.get("is_binary_file"):
            skipped.append(f"{path} (binary)")
        else:
            patches.append(_file_patch(diff, path, f"{where} ({path})"))
    return GoldPatch("".join(patches), skipped)
