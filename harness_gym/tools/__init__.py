"""Tool implementations. Every implementation runs inside the sandbox; the host only dispatches.

A spec's tool names an ``implementation``; this module maps it to behaviour. New implementations
(evolvable harnesses' extra tools) register with :func:`register_implementation`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

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


def run_tool(implementation: str, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    """Run one validated tool call."""
    try:
        function = _IMPLEMENTATIONS[implementation]
    except KeyError:
        return ToolResult(f"Error: tool {context.tool_name} has no implementation {implementation!r}.", None)
    return function(arguments, context)


def _from_command(result: CommandResult) -> ToolResult:
    output = result.output
    if result.note:
        output = f"{output}\n[{result.note}]" if output else f"[{result.note}]"
    return ToolResult(output, result.exit_code, result.duration_s, result.pid, ran_command=True)


def _bash(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    timeout = float(arguments.get("timeout") or context.command_timeout_s)
    return _from_command(context.sandbox.run(arguments["command"], timeout_s=timeout))


def _file_editor(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    payload = dict(arguments, root=context.mount_path)
    return _from_command(context.sandbox.run_tool("file_editor.py", payload, timeout_s=context.command_timeout_s))


def _finish(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    return ToolResult("Submission received. The session is over.", 0, finished=True)


def _unavailable(arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
    return ToolResult(f"Error: {context.tool_name} is unavailable in this environment.", 1)


register_implementation("bash", _bash)
register_implementation("file_editor", _file_editor)
register_implementation("finish", _finish)
register_implementation("unavailable", _unavailable)
