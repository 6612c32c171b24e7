"""Viewing a trajectory (the format is :mod:`harness_gym.records`): coloured text for a terminal and
a standalone HTML page."""

from __future__ import annotations

import html
import json
from collections.abc import Mapping
from typing import Any

_COLOURS = {
    "system": "90",
    "task": "36",
    "policy": "32",
    "tool": "37",
    "hook": "35",
    "workflow": "33",
    "summary": "34",
    "skill": "95",
}


def render_text(trajectory: Mapping[str, Any], colour: bool = True, limit: int = 2000) -> str:
    """A readable terminal rendering, one block per message, coloured by source."""
    episode = trajectory["episode"]
    lines = [
        f"{episode.get('harness')} | task {episode.get('task_id')} | run {episode.get('run')} | "
        f"reward {episode.get('reward')} | {episode.get('steps')} steps"
    ]
    for message in trajectory["messages"]:
        source = message.get("source", "?")
        head = f"── {source} ({message['role']})"
        if message.get("name"):
            head += f" {message['name']}"
        body = message.get("content") or ""
        if message.get("tool_calls"):
            body += "".join(
                f"\n→ {c['function']['name']}({c['function'].get('arguments', '')})" for c in message["tool_calls"]
            )
        if len(body) > limit:
            body = body[: limit // 2] + f"\n[... {len(body) - limit} characters ...]\n" + body[-limit // 2 :]
        lines.append(f"\033[{_COLOURS.get(source, '0')}m{head}\033[0m" if colour else head)
        lines.append(body)
    return "\n".join(lines)


def render_html(trajectory: Mapping[str, Any]) -> str:
    """A standalone HTML page of the trajectory."""
    episode = trajectory["episode"]
    title = html.escape(f"{episode.get('harness')} / {episode.get('task_id')} / run {episode.get('run')}")
    blocks = []
    for message in trajectory["messages"]:
        source = html.escape(str(message.get("source", "?")))
        calls = "".join(
            f"<div class='call'>→ {html.escape(c['function']['name'])}({html.escape(str(c['function'].get('arguments', '')))})</div>"
            for c in message.get("tool_calls") or []
        )
        blocks.append(
            f"<div class='msg {source}'><div class='head'>{source} · {html.escape(message['role'])}</div>"
            f"<pre>{html.escape(message.get('content') or '')}</pre>{calls}</div>"
        )
    meta = html.escape(json.dumps({k: episode.get(k) for k in ("reward", "steps", "spec_hash", "agent", "seed")}))
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{title}</title><style>
body {{font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; color: #222}}
.msg {{border-left: 4px solid #bbb; margin: .6rem 0; padding: .3rem .8rem; background: #fafafa}}
.head {{font-size: .8rem; text-transform: uppercase; color: #666}}
pre {{white-space: pre-wrap; word-break: break-word; margin: .3rem 0}}
.policy {{border-color: #2e7d32}} .tool {{border-color: #616161}} .hook {{border-color: #8e24aa}}
.workflow {{border-color: #f9a825}} .summary {{border-color: #1565c0}} .skill {{border-color: #d81b60}}
.task {{border-color: #00838f}} .system {{border-color: #9e9e9e}} .call {{font-family: monospace; color: #2e7d32}}
</style></head><body><h1>{title}</h1><p><code>{meta}</code></p>{"".join(blocks)}</body></html>"""
