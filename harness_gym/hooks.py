"""Runtime hooks: messages the harness injects into the policy's context when an event fires.

A hook is data in the harness spec::

    {"name": "budget_reminder", "event": "budget", "when": {"steps_remaining_at_most": 5},
     "message": "{steps_remaining} steps left: ...", "max_fires": 2}

``event`` is one of :data:`EVENTS`; ``when`` holds predicates from :data:`PREDICATES` that must all
hold (what a call did, edit or test, comes from its tool's role, :mod:`harness_gym.tools.roles`, never
from its name; ``role_in`` matches roles, ``tool_in`` the names a spec chose); ``message`` is a template over :meth:`EpisodeState.fields`. A ``before_finish`` hook with
``block_finish: true`` turns the finishing call away once (the agent gets the message instead); a
hook with ``stop_episode: true`` ends the episode (truncated, with the hook named as the reason).
Trusted Python hooks register with :func:`register_hook_plugin` and are named in the spec as
``{"name": ..., "event": ..., "plugin": "<registered name>"}``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

EVENTS = ("episode_start", "step", "tool_call", "tool_error", "before_finish", "budget")
_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@dataclass
class CallRecord:
    """One executed (or attempted) tool call, as hooks see it."""

    step: int
    name: str
    canonical: str
    arguments: dict[str, Any]
    exit_code: int | None
    error: bool
    is_edit: bool
    is_check: bool
    role: str = "other"  # the tool's role (harness_gym.tools.roles): what hooks condition on, not its name

    @property
    def signature(self) -> str:
        return self.name + json.dumps(self.arguments, sort_keys=True, default=str)


@dataclass
class EpisodeState:
    """What hooks can condition on."""

    step: int = 0
    max_steps: int = 1
    calls: list[CallRecord] = field(default_factory=list)
    context_chars: int = 0
    context_limit_chars: int = 0

    @property
    def steps_remaining(self) -> int:
        return max(self.max_steps - self.step, 0)

    def repeat_count(self) -> int:
        """How many times the last call was made identically in a row."""
        if not self.calls:
            return 0
        last, count = self.calls[-1].signature, 0
        for call in reversed(self.calls):
            if call.signature != last:
                break
            count += 1
        return count

    def ping_pong_count(self) -> int:
        """Length of the trailing A/B/A/B alternation of two distinct calls, in calls."""
        if len(self.calls) < 4:
            return 0
        a, b = self.calls[-1].signature, self.calls[-2].signature
        if a == b:
            return 0
        length = 0
        for index, call in enumerate(reversed(self.calls)):
            if call.signature != (a if index % 2 == 0 else b):
                break
            length += 1
        return length

    def consecutive_errors(self) -> int:
        count = 0
        for call in reversed(self.calls):
            if not call.error:
                break
            count += 1
        return count

    def edited_since_check(self) -> bool:
        """An edit was made and no check ran after the last edit."""
        last_edit = max((i for i, c in enumerate(self.calls) if c.is_edit), default=None)
        if last_edit is None:
            return False
        return not any(c.is_check for c in self.calls[last_edit + 1 :])

    def fields(self, call: CallRecord | None = None) -> dict[str, Any]:
        return {
            "steps": self.step,
            "max_steps": self.max_steps,
            "steps_remaining": self.steps_remaining,
            "repeat_count": self.repeat_count(),
            "ping_pong_count": self.ping_pong_count(),
            "consecutive_errors": self.consecutive_errors(),
            "context_chars": self.context_chars,
            "tool": call.name if call else "",
            "context_percent": self.context_percent(),
        }

    def context_percent(self) -> int:
        return int(100 * self.context_chars / self.context_limit_chars) if self.context_limit_chars else 0


Predicate = Callable[[EpisodeState, Any, "CallRecord | None"], bool]

PREDICATES: dict[str, Predicate] = {
    "steps_remaining_at_most": lambda s, v, c: s.steps_remaining <= v,
    "repeated_call_at_least": lambda s, v, c: s.repeat_count() >= v,
    "ping_pong_at_least": lambda s, v, c: s.ping_pong_count() >= v,
    "consecutive_errors_at_least": lambda s, v, c: s.consecutive_errors() >= v,
    "edited_since_check": lambda s, v, c: s.edited_since_check() == bool(v),
    "context_chars_at_least": lambda s, v, c: s.context_chars >= v,
    "context_percent_at_least": lambda s, v, c: s.context_percent() >= v,
    "every_n_steps": lambda s, v, c: s.step > 0 and s.step % v == 0,
    "tool_in": lambda s, v, c: c is not None and (c.name in v or c.canonical in v),
    "role_in": lambda s, v, c: c is not None and c.role in v,
    "exit_code_nonzero": lambda s, v, c: c is not None and (c.error == bool(v)),
}


class HookPlugin(Protocol):
    """A trusted Python hook: returns the message to inject, or None."""

    def __call__(self, state: EpisodeState, call: CallRecord | None) -> str | None: ...


_PLUGINS: dict[str, Callable[[Mapping[str, Any]], HookPlugin]] = {}


def register_hook_plugin(name: str, factory: Callable[[Mapping[str, Any]], HookPlugin]) -> None:
    """Make ``{"plugin": name}`` usable in specs; ``factory(hook_spec)`` builds the callable."""
    _PLUGINS[name] = factory


@dataclass
class Firing:
    """A hook that fired: its message, and what it asks of the episode."""

    hook: str
    message: str
    block_finish: bool = False
    stop_episode: bool = False

    def as_message(self) -> dict[str, Any]:
        return {"role": "user", "content": self.message, "source": "hook"}


class Hook:
    """One hook from the spec, with its per-episode fire count."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.spec = spec
        self.name: str = spec["name"]
        self.event: str = spec["event"]
        self.when: dict[str, Any] = dict(spec.get("when", {}))
        unknown = set(self.when) - set(PREDICATES)
        if unknown:
            raise ValueError(f"hook {self.name!r}: unknown condition(s) {sorted(unknown)}; known: {sorted(PREDICATES)}")
        self.max_fires: int | None = spec.get("max_fires")
        self.fires = 0
        self.plugin: HookPlugin | None = None
        if "plugin" in spec:
            try:
                self.plugin = _PLUGINS[spec["plugin"]](spec)
            except KeyError:
                raise ValueError(f"hook {self.name!r}: no plugin registered as {spec['plugin']!r}") from None

    def fire(self, state: EpisodeState, call: CallRecord | None) -> Firing | None:
        if self.max_fires is not None and self.fires >= self.max_fires:
            return None
        if not all(PREDICATES[key](state, value, call) for key, value in self.when.items()):
            return None
        if self.plugin is not None:
            text = self.plugin(state, call)
            if text is None:
                return None
        else:
            values = state.fields(call)
            text = _PLACEHOLDER.sub(lambda m: str(values.get(m.group(1), m.group(0))), self.spec["message"])
        self.fires += 1
        return Firing(self.name, text, bool(self.spec.get("block_finish")), bool(self.spec.get("stop_episode")))


class HookRunner:
    """All hooks of a spec, for one episode."""

    def __init__(self, hooks: Sequence[Mapping[str, Any]]) -> None:
        self.hooks = [Hook(h) for h in hooks]
        self.fired: list[Firing] = []
        # each event's hooks in spec order, indexed once per episode: a step asks for four or five
        # events, most harnesses have no hooks for any of them
        self._by_event: dict[str, list[Hook]] = {}
        for hook in self.hooks:
            self._by_event.setdefault(hook.event, []).append(hook)

    def run(self, event: str, state: EpisodeState, call: CallRecord | None = None) -> list[Firing]:
        hooks = self._by_event.get(event)
        if not hooks:
            return []
        firings = [f for h in hooks if (f := h.fire(state, call)) is not None]
        self.fired += firings
        return firings
