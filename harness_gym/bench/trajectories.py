"""The trajectory format: one JSON object per line.

    {"type": "episode", "format": "harness-gym-trajectory/1", "episode_id", "harness", "config",
     "task_id", "run", "seed", "reward", "spec_hash", "agent", ...}
    {"type": "message", "index": 0, "role": "system", "source": "system", "content": "..."}
    ... one line per message: role, content, source (system | task | policy | tool | hook |
        workflow | summary | skill), and tool_calls / tool_call_id / name where present
    {"type": "step", "step": 1, "parsed_calls": [...], "parse_errors": [...], "tool_errors": [...],
     "exit_codes": [...], "hooks_fired": [...], "context_reset": false}

Messages are the full transcript (never compressed); ``step`` lines mark where context
management rewrote the prompt (``context_reset``). A trainer masks every message whose source is
not ``policy``.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

FORMAT = "harness-gym-trajectory/1"
STEP_KEYS = (
    "parsed_calls",
    "parse_errors",
    "tool_errors",
    "exit_codes",
    "workflow_feedback",
    "hooks_fired",
    "context_reset",
    "truncation_reason",
    "terminated_reason",
)


def write_trajectory(
    path: Path, header: Mapping[str, Any], transcript: Sequence[Mapping[str, Any]], infos: Sequence[Mapping[str, Any]]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps({"type": "episode", "format": FORMAT, **header}, ensure_ascii=False) + "\n")
        for index, message in enumerate(transcript):
            handle.write(json.dumps({"type": "message", "index": index, **message}, ensure_ascii=False) + "\n")
        for info in infos[1:]:
            step = {"type": "step", "step": info.get("step")}
            step.update({k: info[k] for k in STEP_KEYS if k in info})
            handle.write(json.dumps(step, ensure_ascii=False, default=str) + "\n")


def read_trajectory(path: str | Path) -> dict[str, Any]:
    """``{"episode": {...}, "messages": [...], "steps": [...]}`` from a trajectory file."""
    episode: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        kind = item.pop("type", None)
        if kind == "episode":
            episode = item
        elif kind == "message":
            item.pop("index", None)
            messages.append(item)
        elif kind == "step":
            steps.append(item)
        else:
            raise ValueError(f"{path}:{number}: unknown line type {kind!r}")
    if episode.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file")
    return {"episode": episode, "messages": messages, "steps": steps}


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
