"""Typed, validated ``sandbox_options``: one home for the sandbox defaults and their bounds.

``HarnessEnv(sandbox_options={...})`` builds a :class:`SandboxOptions`; an unknown key or a bad
value (a string where a number belongs, NaN, infinity, a negative duration) is refused with the
valid choices listed, instead of being dropped or reaching a backend.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness_gym.budget import COMMAND_TIMEOUT_S, OUTPUT_LIMIT_CHARS
from harness_gym.errors import SandboxError


class SandboxOptionsError(SandboxError, ValueError):
    """A sandbox option is unknown or has a bad value; the message lists the valid ones."""


def _positive_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def _positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value) and "\0" not in value


def _bool(value: Any) -> bool:
    return isinstance(value, bool)


def _binds(value: Any) -> bool:
    return isinstance(value, Mapping) and all(_text(k) and _text(v) for k, v in value.items())


def _check(rule: Callable[[Any], bool], expects: str, optional: bool = False) -> dict[str, Any]:
    return {"rule": rule, "expects": expects, "optional": optional}


@dataclass(frozen=True)
class SandboxOptions:
    """Every option any backend takes. ``None`` means: the backend's own choice (or not applicable)."""

    # every backend
    command_timeout_s: float = field(
        default=COMMAND_TIMEOUT_S, metadata=_check(_positive_number, "a positive finite number")
    )
    output_limit_chars: int = field(default=OUTPUT_LIMIT_CHARS, metadata=_check(_positive_int, "a positive integer"))
    workspace_root: str | None = field(default=None, metadata=_check(_text, "a folder path", True))
    python: str | None = field(default=None, metadata=_check(_text, "an interpreter path", True))
    # local (bubblewrap) and Docker limits
    memory_mb: int = field(default=4096, metadata=_check(_positive_int, "a positive integer"))
    # bubblewrap: the per-process address-space limit (RLIMIT_AS) when it must differ from memory_mb
    # (Node reserves tens of GiB of address space it never touches); None: memory_mb
    address_space_mb: int | None = field(default=None, metadata=_check(_positive_int, "a positive integer", True))
    max_processes: int = field(default=512, metadata=_check(_positive_int, "a positive integer"))
    cpus: float | None = field(default=None, metadata=_check(_positive_number, "a positive number of cores", True))
    strict_limits: bool = field(default=False, metadata=_check(_bool, "true or false"))
    # bubblewrap only
    max_file_mb: int = field(default=1024, metadata=_check(_positive_int, "a positive integer"))
    max_open_files: int = field(default=1024, metadata=_check(_positive_int, "a positive integer"))
    cpu_time_s: int = field(default=3600, metadata=_check(_positive_int, "a positive integer"))
    workspace_size_mb: int = field(default=1024, metadata=_check(_positive_int, "a positive integer"))
    tmp_size_mb: int = field(default=512, metadata=_check(_positive_int, "a positive integer"))
    extra_ro_binds: Mapping[str, str] | None = field(
        default=None, metadata=_check(_binds, "a mapping of host path to sandbox path", True)
    )
    # a world's root filesystem (harness_gym.worlds); the environment sets it from ``world=``
    system_root: str | None = field(default=None, metadata=_check(_text, "a root filesystem folder", True))
    # Docker only
    image: str | None = field(default=None, metadata=_check(_text, "an image name", True))
    shell: str | None = field(default=None, metadata=_check(_text, "a shell path", True))
    docker_host: str | None = field(default=None, metadata=_check(_text, "an engine address", True))
    # unsafe-host only
    allow_unsandboxed: bool = field(default=False, metadata=_check(_bool, "true or false"))

    def __post_init__(self) -> None:
        problems = []
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if value is None and item.metadata["optional"]:
                continue
            if not item.metadata["rule"](value):
                problems.append(f"{item.name} must be {item.metadata['expects']}, got {value!r}")
        if problems:
            raise SandboxOptionsError("invalid sandbox_options: " + "; ".join(problems))

    @classmethod
    def names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_mapping(cls, options: Mapping[str, Any] | SandboxOptions | None, **defaults: Any) -> SandboxOptions:
        """Options from a mapping (unknown keys refused) over ``defaults`` (e.g. the spec's budget)."""
        if isinstance(options, SandboxOptions):
            return dataclasses.replace(options, **{k: v for k, v in defaults.items() if k not in options.explicit()})
        options = dict(options or {})
        unknown = sorted(set(options) - set(cls.names()))
        if unknown:
            raise SandboxOptionsError(f"unknown sandbox_options {unknown}; valid options: {', '.join(cls.names())}")
        return cls(**{**defaults, **options})

    def explicit(self) -> dict[str, Any]:
        """The options that differ from the defaults."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name) != f.default}

    def for_backend(self, constructor: Callable[..., Any], backend: str) -> dict[str, Any]:
        """Keyword arguments for a backend's constructor. An explicitly set option the backend does not
        take is refused (a limit the backend would ignore is a silent failure)."""
        accepted = inspect.signature(constructor).parameters
        chosen = {k: v for k, v in self.explicit().items() if k != "image"}
        ignored = sorted(k for k in chosen if k not in accepted)
        if ignored:
            raise SandboxOptionsError(
                f"sandbox_options {ignored} do not apply to the {backend!r} backend; it takes: "
                + ", ".join(sorted(k for k in accepted if k in self.names()))
            )
        always = {"command_timeout_s": self.command_timeout_s, "output_limit_chars": self.output_limit_chars}
        return {**{k: v for k, v in always.items() if k in accepted}, **chosen}


DEFAULTS = SandboxOptions()
