"""Tool implementations. Every implementation runs inside the sandbox; the host only dispatches.

A spec's tool names an ``implementation``; this module maps it to behaviour. New implementations
(evolvable harnesses' extra tools) register with :func:`register_implementation`.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from harness_gym.budget import effective_command_timeout
from harness_gym.sandboxes.base import CommandResult, Sandbox


@dataclass
class ToolContext:
    """What a tool implementation may use: the sandbox and the episode's settings."""

    sandbox: Sandbox
    mount_path: str
    command_timeout_s: float
    tool_name: str


@dataclass
class ToolResult:
    """A tool's raw result before the observation factor formats it."""

    output: str
    exit_code: int | None
    duration_s: float = 0.0
    pid: int | None = None
    finished: bool = False
    ran_command: bool = False


Implementation = Callable[[Mapping[str, Any], ToolContext], ToolResult]
_IMPLEMENTATIONS: dict[str, Implementation] = {}


def register_implementation(name: str, function: Implementation) -> None:
    """Make ``implementation: <name>`` usable in harness specs."""
    _IMPLEMENTATIONS[name] = function


LIBRARY_PREFIX = "library:"


def run_tool(implementation: str | Mapping[str, Any], arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    """Run one validated tool call.

    ``implementation`` is a registered name (``bash``, ``file_editor``, ``finish``, ``unavailable``),
    ``library:<op>`` (the in-sandbox tool library), ``{"command": template}`` (a shell command whose
    ``{argument}`` placeholders are filled with shell-quoted values) or ``{"python": source}`` (a
    script run in the sandbox with the arguments as JSON in ``sys.argv[1]``).
    """
    if isinstance(implementation, Mapping):
        if "command" in implementation:
            command = _fill_template(implementation["command"], arguments)
            return _from_command(context.sandbox.run(command, timeout_s=context.command_timeout_s))
        payload = {"args": dict(arguments), "root": context.mount_path}
        return _from_command(context.sandbox.run_inline(implementation["python"], payload, context.command_timeout_s))
    if implementation.startswith(LIBRARY_PREFIX):
        payload = {"op": implementation[len(LIBRARY_PREFIX) :], "args": dict(arguments), "root": context.mount_path}
        return _from_command(context.sandbox.run_tool("library.py", payload, timeout_s=context.command_timeout_s))
    try:
        function = _IMPLEMENTATIONS[implementation]
    except KeyError:
        return ToolResult(f"Error: tool {context.tool_name} has no implementation {implementation!r}.", None)
    return function(arguments, context)


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


def _fill_template(template: str, arguments: Mapping[str, Any]) -> str:
    """Fill ``{name}`` placeholders with shell-quoted argument values (missing ones become '')."""

    def value(match: re.Match[str]) -> str:
        item = arguments.get(match.group(1), "")
        text = item if isinstance(item, str) else json.dumps(item)
        return shlex.quote(text)

    return _PLACEHOLDER.sub(value, template)


def _from_command(result: CommandResult) -> ToolResult:
    output = result.output
    if result.note:
        output = f"{output}\n[{result.note}]" if output else f"[{result.note}]"
    return ToolResult(output, result.exit_code, result.duration_s, result.pid, ran_command=True)


def agent_timeout(requested: Any, unit_s: float, ceiling_s: float) -> tuple[float | None, str]:
    """The timeout for an agent-chosen ``timeout`` argument under ``ceiling_s`` (see
    :func:`harness_gym.budget.effective_command_timeout`, the one rule)."""
    return effective_command_timeout(ceiling_s, None, requested, unit_s)


def _bash(arguments: Mapping[str, Any], context: ToolContext, timeout_unit_s: float = 1.0) -> ToolResult:
    timeout, note = agent_timeout(arguments.get("timeout"), timeout_unit_s, context.command_timeout_s)
    if timeout is None:
        return ToolResult(note, 2)
    command = arguments["command"]
    if arguments.get("background") or arguments.get("run_in_background"):
        # detached from the shell's output; its log and pid are reported so the agent can follow up
        log = "/tmp/bg-$$-$RANDOM.log"
        command = (
            f'__hg_log={log}; (nohup bash -c {shlex.quote(command)} > "$__hg_log" 2>&1 &) ; '
            'echo "Started in the background; output goes to $__hg_log"'
        )
    result = _from_command(context.sandbox.run(command, timeout_s=timeout))
    if note:
        result.output = f"{result.output}\n{note}" if result.output else note
    return result


def _bash_ms(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    """Bash whose ``timeout`` is in milliseconds (Claude Code's convention)."""
    return _bash(arguments, context, timeout_unit_s=0.001)


def _file_editor(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    payload = dict(arguments, root=context.mount_path)
    return _from_command(context.sandbox.run_tool("file_editor.py", payload, timeout_s=context.command_timeout_s))


def _finish(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    return ToolResult("Submission received. The session is over.", 0, finished=True)


def _unavailable(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    return ToolResult(f"Error: {context.tool_name} is unavailable in this environment.", 1)


register_implementation("bash", _bash)
register_implementation("bash_ms", _bash_ms)
register_implementation("file_editor", _file_editor)
register_implementation("finish", _finish)
register_implementation("unavailable", _unavailable)
