"""Record what each real CLI answers to tool calls it must refuse, into ``rejections/<cli>.json``.

Not a test: run by hand after ``harness-gym external install ...`` to refresh the recordings
``tests/test_external_validity.py`` replays (and to measure a new CLI's ``rejected_call_results``)::

    python tests/data/external/record_rejections.py claude-code-bare claude-code codex ...

Each CLI runs one real episode in the sandbox with a scripted policy making four calls: an unknown
tool, the shell tool with arguments its schema rejects, arguments that are not JSON, and a valid
shell call. The proxy's records are kept trimmed (message texts cut, schema descriptions dropped;
tool names, parameter schemas and the order of messages kept).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from harness_gym.external.catalog import load_cli
from harness_gym.external.policies import PolicyReply, ScriptedPolicy
from harness_gym.external.runner import run_external_episode
from harness_gym.tasks import load_tasks

HERE = Path(__file__).parent / "rejections"
TASK_ID = "workspace-sort-unique"
TEXT_LIMIT = 600


def probe_policy(tool: str, argument: str) -> ScriptedPolicy:
    """Four calls: unknown tool, schema-invalid arguments, non-JSON arguments, a valid call."""
    calls = [
        ("call_u", "NoSuchTool", json.dumps({argument: "ls"})),
        ("call_s", tool, json.dumps({"wrong_key": 5})),
        ("call_j", tool, "{not json"),
        ("call_ok", tool, json.dumps({argument: "echo hi"})),
    ]
    replies = [
        PolicyReply(tool_calls=[{"id": i, "name": n, "arguments": a}], finish_reason="tool_calls") for i, n, a in calls
    ]
    return ScriptedPolicy(replies)


def _schema(value: Any, in_properties: bool = False) -> Any:
    """A parameters schema without its prose (a property *named* description is kept)."""
    if isinstance(value, dict):
        return {
            k: _schema(v, k == "properties" and not in_properties)
            for k, v in value.items()
            if in_properties or not (k == "description" and isinstance(v, str))
        }
    if isinstance(value, list):
        return [_schema(v) for v in value]
    return value


def _text(value: Any) -> Any:
    if isinstance(value, str):
        return value[:TEXT_LIMIT]
    if isinstance(value, list):
        return [_text(v) for v in value]
    if isinstance(value, dict):
        return {k: _text(v) for k, v in value.items()}
    return value


def trimmed(record: dict[str, Any]) -> dict[str, Any] | None:
    request, reply = record.get("policy_request"), record.get("policy_reply")
    if request is None or reply is None:
        return None
    tools = [
        {
            "type": "function",
            "function": {"name": t["function"]["name"], "parameters": _schema(t["function"].get("parameters"))},
        }
        for t in request.get("tools") or []
        if t.get("function")
    ]
    return {
        "dialect": record["dialect"],
        "side": record["side"],
        "status": record["status"],
        "policy_request": {"model": request["model"], "messages": _text(request["messages"]), "tools": tools},
        "policy_reply": {"content": reply["content"], "tool_calls": reply["tool_calls"]},
    }


def main(names: list[str]) -> None:
    task = next(t for t in load_tasks("builtin") if t.id == TASK_ID)
    HERE.mkdir(exist_ok=True)
    for name in names:
        cli = load_cli(name)
        started = time.time()
        episode = run_external_episode(cli, task, probe_policy(*cli.shell_tool), max_turns=8, wall_s=600)
        records = [t for t in (trimmed(r) for r in episode.proxy_records) if t is not None]
        out = {"cli": cli.id, "version": cli.version, "outcome": episode.record["outcome"], "records": records}
        (HERE / f"{cli.name}.json").write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
        print(f"{cli.id}: {len(records)} records, {episode.record['outcome']}, {time.time() - started:.1f} s")
        for message in episode.transcript:
            if message["role"] == "tool":
                print(f"  {message['tool_call_id']}: {str(message['content'])[:160]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
