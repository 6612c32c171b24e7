"""``harness-gym external describe NAME``: a real CLI's harness measured as data.

One short episode (the CLI's own shell tool runs ``echo``, then a final answer) on a built-in
task; from the proxy's records: the system prompt's size, the tool names and count, the schemas'
size, how a tool result comes back (the observation format), the side requests, and the startup
time to the first request.
"""

from __future__ import annotations

import json
from typing import Any

from harness_gym.external.catalog import ExternalCli, load_cli
from harness_gym.external.policies import ScriptedPolicy, text_of
from harness_gym.external.runner import run_external_episode
from harness_gym.tasks import load_tasks

DESCRIBE_TASK = "workspace-sort-unique"
MARKER = "harness-gym-describe-marker"


def describe_cli(reference: str | ExternalCli, task_id: str = DESCRIBE_TASK) -> dict[str, Any]:
    """Run the describing episode and summarise the CLI's first agent request and its first tool result."""
    cli = load_cli(reference)
    task = next(t for t in load_tasks("builtin") if t.id == task_id)
    episode = run_external_episode(cli, task, ScriptedPolicy.cli_shell(cli, [f"echo {MARKER}"]), max_turns=5)
    agent = [r for r in episode.proxy_records if not r["side"] and r.get("policy_request")]
    if not agent:
        raise RuntimeError(f"{cli.id} sent no agent request: {episode.record['error']}")
    first = agent[0]["policy_request"]
    system = "\n\n".join(text_of(m.get("content")) for m in first["messages"] if m.get("role") == "system")
    tools = [t["function"]["name"] for t in first["tools"]]
    observation = None
    for record in agent[1:]:
        for message in record["policy_request"]["messages"]:
            if message.get("role") == "tool" and MARKER in text_of(message.get("content")):
                observation = text_of(message.get("content"))[:400]
                break
        if observation is not None:
            break
    return {
        "id": cli.id,
        "version": cli.version,
        "model": cli.model,
        "wire_api": cli.wire_api,
        "dialect": agent[0]["dialect"],
        "system_prompt_chars": len(system),
        "first_request_messages": len(first["messages"]),
        "first_user_message_chars": sum(
            len(text_of(m.get("content"))) for m in first["messages"] if m.get("role") == "user"
        ),
        "tools": tools,
        "tool_count": len(tools),
        "tool_schema_chars": len(json.dumps(first["tools"])),
        "roles": {name: cli.role(name) for name in tools},
        "observation_sample": observation,
        "side_requests": sum(1 for r in episode.proxy_records if r["side"]),
        "startup_s": episode.record["durations"].get("startup_s"),
        "episode_outcome": episode.record["outcome"],
    }
