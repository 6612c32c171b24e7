"""README.md's table of contents, from its ``##`` and ``###`` headings (GitHub's anchors), between
the ``<!-- toc -->`` and ``<!-- tocstop -->`` markers.

    python tests/readme_toc.py           # exit 1 and say so when the TOC is stale
    python tests/readme_toc.py --write   # rewrite it
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
START, END = "<!-- toc -->", "<!-- tocstop -->"


def anchor(title: str, seen: dict[str, int]) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens, numbered repeats."""
    slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
    count = seen.get(slug, 0)
    seen[slug] = count + 1
    return slug if count == 0 else f"{slug}-{count}"


def headings(text: str) -> list[tuple[int, str]]:
    """(level, title) of the ``##``/``###`` headings outside fenced code blocks."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else re.match(r"(#{2,3}) (.+)", line)
        if match:
            found.append((len(match.group(1)), match.group(2).strip()))
    return found


def toc(text: str) -> str:
    seen: dict[str, int] = {}
    lines = []
    for level, title in headings(text):
        link = anchor(title, seen)
        if title == "Contents":
            continue
        lines.append(f"{'  ' * (level - 2)}- [{title.replace('`', '')}](#{link})")
    return "\n".join(lines)


def with_toc(text: str) -> str:
    if START not in text or END not in text:
        raise SystemExit(f"README.md has no {START} ... {END} markers")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{START}\n{toc(text)}\n{END}{tail}"


def main(argv: list[str]) -> int:
    text = README.read_text(encoding="utf-8")
    updated = with_toc(text)
    if "--write" in argv:
        README.write_text(updated, encoding="utf-8")
        return 0
    if updated != text:
        print("README.md's table of contents is stale: run python tests/readme_toc.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
