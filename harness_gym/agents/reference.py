"""The privileged reference agent (proves tasks solvable under any harness) and a do-nothing agent."""

from __future__ import annotations

import base64
import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym

from harness_gym.agents.base import CALL_FORMATS, _unwrap, _with_text, encode_call
from harness_gym.env import HarnessEnv

# How the reference agent expresses a canonical action with the tools a harness offers, in order
# of preference: (canonical tool, argument builder). file_editor actions that no tool covers fall
# back to a Python one-liner through the shell tool.
_ABS = "{root}/{path}"
_TRANSLATIONS: dict[str, list[tuple[str, Any]]] = {
    "bash": [
        ("execute_bash", lambda a, root: {"command": a["command"]}),
        ("cc_bash", lambda a, root: {"command": a["command"], "description": "run a command"}),
        ("oc_exec", lambda a, root: {"command": a["command"]}),
    ],
    "view": [
        ("file_editor", lambda a, root: dict(a)),
        ("read_file", lambda a, root: {"path": a["path"]}),
        ("cc_read", lambda a, root: {"file_path": _abs(root, a["path"])}),
        ("oc_read", lambda a, root: {"path": a["path"]}),
    ],
    "str_replace": [
        ("file_editor", lambda a, root: dict(a)),
        ("edit_file", lambda a, root: {"path": a["path"], "old_text": a["old_str"], "new_text": a["new_str"]}),
        (
            "cc_edit",
            lambda a, root: {
                "file_path": _abs(root, a["path"]),
                "old_string": a["old_str"],
                "new_string": a["new_str"],
            },
        ),
        ("oc_edit", lambda a, root: {"path": a["path"], "oldText": a["old_str"], "newText": a["new_str"]}),
    ],
    "create": [
        ("file_editor", lambda a, root: dict(a)),
        ("cc_write", lambda a, root: {"file_path": _abs(root, a["path"]), "content": a["file_text"]}),
        ("oc_write", lambda a, root: {"path": a["path"], "content": a["file_text"]}),
    ],
    "insert": [("file_editor", lambda a, root: dict(a))],
}
_SHELL_EDIT = (
    "import base64, json, os\n"
    "a = json.loads(base64.b64decode('{payload}'))\n"
    "p = os.path.join(a['root'], a['path'])\n"
    "if a['command'] == 'view':\n    print(open(p).read())\n"
    "elif a['command'] == 'create':\n    os.makedirs(os.path.dirname(p) or '.', exist_ok=True); open(p, 'w').write(a['file_text'])\n"
    "elif a['command'] == 'str_replace':\n    t = open(p).read(); assert t.count(a['old_str']) == 1; open(p, 'w').write(t.replace(a['old_str'], a['new_str']))\n"
    "elif a['command'] == 'insert':\n    l = open(p).read().split('\\n'); l[a['insert_line']:a['insert_line']] = a['new_str'].split('\\n'); open(p, 'w').write('\\n'.join(l))\n"
)


def _abs(root: str, path: str) -> str:
    return path if path.startswith("/") else f"{root.rstrip('/')}/{path}"


def _plan(current: tuple[str, dict[str, Any]], later: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """The plan a solver could write before any tool output: the first call with its arguments, the
    later ones by tool only. Their arguments may come from output not yet seen (the count to write,
    the file that holds a word), and a plan that names them teaches a trained model to state answers
    it cannot know."""
    name, arguments = current
    steps = [f"1. {name} {json.dumps(arguments)[:60]}"]
    steps += [f"{i}. {c}" + (f" {a['command']}" if c == "file_editor" else "") for i, (c, a) in enumerate(later, 2)]
    return "Plan:\n" + "\n".join(steps)


class ReferenceAgent:
    """Replays the task's reference solution through the harness's own tools, then finishes.

    It maps each canonical action (``execute_bash``, ``file_editor``) to the tools this harness
    offers, writes a plan first, answers progress checks, repeats a call the workflow or a hook
    turned away, and runs a check before finishing when the harness has one. ``fmt`` chooses how
    calls are written (hermes, xml or openai).
    """

    name = "reference"

    def __init__(self, fmt: str = "hermes") -> None:
        if fmt not in CALL_FORMATS:
            raise ValueError(f"unknown call format {fmt!r}; choose one of {CALL_FORMATS}")
        self.fmt = fmt
        self.env: HarnessEnv | None = None
        self.queue: list[tuple[str, dict[str, Any]]] = []
        self.pending: tuple[str, dict[str, Any]] | None = None
        self.planned = False
        self.skipped = 0

    def reset(self, env: gym.Env) -> None:
        self.env = _unwrap(env)
        assert self.env.task is not None, "reset the environment before the agent"
        available = {t.canonical for t in self.env.tool_interface.tools.values()}
        translated = [
            self._translate(step["tool"], dict(step["arguments"]), available) for step in self.env.task.solution
        ]
        self.skipped = sum(t is None for t in translated)  # actions this harness offers no tool for
        self.queue = [t for t in translated if t is not None]
        if "run_check" in available and any(s["tool"] == "file_editor" for s in self.env.task.solution):
            self.queue.append(("run_check", {}))
        self.queue.append(("finish", {"message": "Reference solution applied and checked."}))
        self.pending = None
        self.planned = False

    def _translate(
        self, tool: str, arguments: dict[str, Any], available: set[str]
    ) -> tuple[str, dict[str, Any]] | None:
        assert self.env is not None and self.env.task is not None
        root = self.env.task.mount_path
        kind = "bash" if tool == "execute_bash" else arguments["command"]
        for canonical, build in _TRANSLATIONS.get(kind, []):
            if canonical in available:
                return canonical, build(arguments, root)
        if kind == "bash" or not any(c in available for c, _ in _TRANSLATIONS["bash"]):
            return None  # no tool can express it: the agent goes on without it (and will likely fail)
        payload = base64.b64encode(json.dumps(dict(arguments, root=root)).encode()).decode()
        script = _SHELL_EDIT.replace("{payload}", payload)
        return self._translate("execute_bash", {"command": f"python3 -c {shlex.quote(script)}"}, available)

    def act(self, observation: Mapping[str, Any]) -> str | dict[str, Any]:
        assert self.env is not None, "call reset(env) first"
        last = observation["messages"][-1]
        refused = last.get("source") in ("workflow", "hook") and last.get("role") == "tool"
        if not refused or self.pending is None:
            self.pending = self.queue.pop(0) if self.queue else ("finish", {"message": "done"})
        canonical, arguments = self.pending
        text = ""
        if not self.planned:
            text = _plan(self.pending, self.queue)
            self.planned = True
        elif last.get("source") == "workflow" and last.get("role") == "user":
            text = f"Progress check: {self.env.steps} steps done, following the plan; {len(self.queue) + 1} actions remain."
        if canonical == "finish" and self.env.tool_interface.finish_name is None:
            return (text + "\n" if text else "") + "Done: the reference solution is applied and checked."
        name = self.env.tool_interface.name_for(canonical)
        return _with_text(encode_call(name, arguments, self.fmt, call_id=f"ref_{self.env.steps}"), text)


class NullAgent:
    """Does nothing: submits at once (or, with ``finish=False``, only talks until the budget ends)."""

    name = "null"

    def __init__(self, finish: bool = True) -> None:
        self.finish = finish
        self.env: HarnessEnv | None = None

    def reset(self, env: gym.Env) -> None:
        self.env = _unwrap(env)

    def act(self, observation: Mapping[str, Any]) -> str | dict[str, Any]:
        if not self.finish or self.env is None:
            return "I will not do anything."
        if self.env.tool_interface.finish_name is None:
            return "I am done."  # a chat-style harness ends the session on a reply without a tool call
        name = self.env.tool_interface.name_for("finish")
        return "Plan:\n1. Submit without changes.\n" + str(encode_call(name, {"message": "nothing done"}))
