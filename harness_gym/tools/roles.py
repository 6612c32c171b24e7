"""Tool roles: what a call to a tool does, declared as data in the tool's spec entry.

Hooks, metrics and evolution ask a tool's role (``shell``, ``edit``, ``test``, ...), never its
name, so a harness that calls its shell ``Bash`` or ``run_shell_command`` is seen the same as one
that calls it ``execute_bash``. A spec entry without ``role`` gets one from its implementation,
else from its legacy ``tags``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from harness_gym.errors import HarnessSpecError

ROLES = ("shell", "read", "view", "edit", "search", "test", "finish", "plan", "unavailable", "other")

# the role of a tool that does not declare one, by implementation, then by tag
IMPLEMENTATION_ROLES = {
    "bash": "shell",
    "bash_ms": "shell",
    "file_editor": "edit",
    "finish": "finish",
    "unavailable": "unavailable",
}
TAG_ROLES = {"edit": "edit", "check": "test", "read": "read"}

# a shell command that runs tests, or that changes files
_CHECK = re.compile(
    r"\b(pytest|unittest|runtests\.py|bin/test|tox|nox|make\s+(check|test)|npm\s+test|go\s+test|cargo\s+test)\b"
    r"|python3?\s+(-m\s+)?\S*test"
)
_EDIT = re.compile(r"sed\s+-i|(^|[^2&])>\s*[^&\s]|\btee\b|\bpatch\b|git\s+apply|\bmv\s|\bcp\s|\brm\s|\btouch\s")
READ_ONLY_EDITOR_COMMANDS = ("view",)  # an edit tool's sub-commands that change nothing


def tool_role(entry: Mapping[str, Any]) -> str:
    """The role of a spec's tool entry: its ``role``, else its implementation's, else its tags'."""
    implementation = entry.get("implementation")
    role = entry.get("role")
    if role is None:
        if isinstance(implementation, str) and implementation in IMPLEMENTATION_ROLES:
            role = IMPLEMENTATION_ROLES[implementation]
        elif isinstance(implementation, Mapping) and "command" in implementation:
            role = "shell"
        else:
            role = next((TAG_ROLES[t] for t in entry.get("tags", ()) if t in TAG_ROLES), "other")
    if role not in ROLES:
        raise HarnessSpecError(f"tool {entry.get('name')!r}: unknown role {role!r}; roles: {', '.join(ROLES)}")
    if (role == "finish") != (implementation == "finish"):
        raise HarnessSpecError(
            f"tool {entry.get('name')!r}: role 'finish' belongs to the 'finish' implementation and only to it"
        )
    return role


def call_effects(role: str, arguments: Mapping[str, Any]) -> tuple[bool, bool]:
    """(is_edit, is_test) of one call, from its tool's role (and, for a shell, the command it ran)."""
    if role == "edit":
        return arguments.get("command") not in READ_ONLY_EDITOR_COMMANDS, False
    if role == "test":
        return False, True
    if role == "shell":
        command = str(arguments.get("command", ""))
        return bool(_EDIT.search(command)), bool(_CHECK.search(command))
    return False, False
