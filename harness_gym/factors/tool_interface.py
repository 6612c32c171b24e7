"""T: the tool interface — the names, descriptions and set of tools the agent is shown.

Level 0 shows the canonical tools. Level 1 renames them with semantically related aliases and adds
non-functional distractors; level 2 gives every tool an opaque identifier, so only the descriptions
tell the tools apart. Behaviour and parameters never change. With ``resample_names`` the aliases
(level 1) or identifiers (level 2) are re-drawn per episode from the episode's seed.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import jsonschema
import numpy as np

from harness_gym.spec import load_variant_file
from harness_gym.tools.roles import tool_role


def fragment(level: int) -> dict[str, Any]:
    """The ``tools`` (and ``tool_naming``) part of the spec at this level."""
    data = load_variant_file("T")
    try:
        variant = data["levels"][level]
    except KeyError:
        raise ValueError(f"factor T has no level {level}") from None
    tools: list[dict[str, Any]] = []
    for canonical, definition in data["functional"].items():
        tools.append(
            {
                "name": variant["names"][canonical],
                "canonical": canonical,
                "role": definition["role"],
                "implementation": definition["implementation"],
                "description": variant.get("descriptions", {}).get(canonical, definition["description"]),
                "parameters": copy.deepcopy(definition["parameters"]),
            }
        )
    for canonical, name in variant.get("distractors", {}).items():
        definition = data["distractors"][canonical]
        tools.append(
            {
                "name": name,
                "canonical": canonical,
                "role": "unavailable",
                "implementation": "unavailable",
                "description": definition["description"],
                "parameters": copy.deepcopy(definition["parameters"]),
            }
        )
    if variant.get("distractors"):
        tools.sort(key=lambda t: t["name"])  # no positional cue separating real tools from distractors
    naming: dict[str, Any] = {}
    if "alias_pool" in variant:
        naming["alias_pool"] = copy.deepcopy(variant["alias_pool"])
    if "opaque_prefix" in variant:
        naming["opaque_prefix"] = variant["opaque_prefix"]
    return {"tools": tools, "tool_naming": naming}


def resample_names(spec: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """A copy of ``spec`` whose tool names are re-drawn (aliases or opaque ids); others unchanged."""
    naming = spec.get("tool_naming") or {}
    out = copy.deepcopy(dict(spec))
    taken: set[str] = set()
    for tool in out["tools"]:
        pool = naming.get("alias_pool", {}).get(tool.get("canonical", ""))
        if pool:
            free = [n for n in pool if n not in taken] or [f"{pool[0]}_{len(taken)}"]
            tool["name"] = free[int(rng.integers(len(free)))]
        elif "opaque_prefix" in naming:
            name = tool["name"]
            while name == tool["name"] or name in taken:
                name = naming["opaque_prefix"] + "".join(f"{int(v):x}" for v in rng.integers(0, 16, size=4))
            tool["name"] = name
        taken.add(tool["name"])
    if naming:
        out["tools"].sort(key=lambda t: t["name"])
    return out


@dataclass(frozen=True)
class BoundTool:
    """A tool as presented in one episode, with its validator."""

    name: str
    canonical: str
    implementation: Any  # a name, "library:<op>", {"command": ...} or {"python": ...}
    description: str
    parameters: dict[str, Any]
    tags: tuple[str, ...] = ()
    role: str = "other"  # what calls to it do (harness_gym.tools.ROLES): hooks and metrics go by it

    def schema(self) -> dict[str, Any]:
        """The OpenAI function schema the agent sees."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": copy.deepcopy(self.parameters),
            },
        }


@functools.lru_cache(maxsize=256)
def _validator(parameters_json: str) -> jsonschema.protocols.Validator:
    schema = json.loads(parameters_json)
    return jsonschema.validators.validator_for(schema)(schema)


_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$schema", "$comment"})
_TYPE_CHECKS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: type(v) is int,
    "number": lambda v: type(v) in (int, float),
    "boolean": lambda v: type(v) is bool,
    "object": lambda v: type(v) is dict,
    "array": lambda v: type(v) is list,
    "null": lambda v: v is None,
}
Check = Callable[[Any], bool]


@functools.lru_cache(maxsize=256)
def _fast_check(parameters_json: str) -> Check | None:
    """A plain-Python test that accepts only arguments the schema accepts (a call's usual case, 30x
    faster than jsonschema), for the schemas tools usually have; None for any other schema. What it
    does not accept goes to jsonschema, which decides and says why."""
    schema = json.loads(parameters_json)
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return None
    if set(schema) - _ANNOTATIONS - {"type", "properties", "required", "additionalProperties"}:
        return None
    closed = schema.get("additionalProperties", True)
    properties, required = schema.get("properties", {}), schema.get("required", [])
    if not isinstance(closed, bool) or not isinstance(properties, dict) or not isinstance(required, list):
        return None
    checks: dict[str, Check] = {}
    for name, rule in properties.items():
        check = _fast_property(rule)
        if check is None:
            return None
        checks[name] = check
    needed = tuple(required)

    def accepts(arguments: Any) -> bool:
        if type(arguments) is not dict or not all(key in arguments for key in needed):
            return False
        for key, value in arguments.items():
            check = checks.get(key)
            if check is None:
                if closed is False:
                    return False
            elif not check(value):
                return False
        return True

    return accepts


def _fast_property(rule: Any) -> Check | None:
    if not isinstance(rule, dict) or set(rule) - _ANNOTATIONS - {"type", "enum", "minimum", "maximum"}:
        return None
    kinds = rule.get("type")
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if kinds is None or not isinstance(kinds, list) or not all(k in _TYPE_CHECKS for k in kinds):
        return None
    type_checks = [_TYPE_CHECKS[k] for k in kinds]
    enum, low, high = rule.get("enum"), rule.get("minimum"), rule.get("maximum")
    if enum is not None and not isinstance(enum, list):
        return None
    if any(bound is not None and type(bound) not in (int, float) for bound in (low, high)):
        return None

    def accepts(value: Any) -> bool:
        if not any(check(value) for check in type_checks):
            return False
        if enum is not None and not any(type(item) is type(value) and item == value for item in enum):
            return False
        numeric = type(value) in (int, float)
        if numeric and low is not None and not low <= value:
            return False
        return not (numeric and high is not None and not value <= high)

    return accepts


class ToolInterface:
    """Resolves the names the agent uses to tools, and validates arguments against their schemas."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.tools: dict[str, BoundTool] = {}
        self._validators: dict[str, jsonschema.protocols.Validator] = {}
        self._fast_checks: dict[str, Check | None] = {}
        for entry in spec["tools"]:
            tool = BoundTool(
                entry["name"],
                entry.get("canonical", entry["name"]),
                entry["implementation"],
                entry["description"],
                entry["parameters"],
                tuple(entry.get("tags", ())),
                tool_role(entry),
            )
            self.tools[tool.name] = tool
        self._compile()
        finishing = [t.name for t in self.tools.values() if t.role == "finish"]
        self.stop_when_no_tool_call = bool(spec.get("stop_when_no_tool_call"))
        if len(finishing) > 1 or (not finishing and not self.stop_when_no_tool_call):
            raise ValueError(
                f"a harness needs exactly one finishing tool (or stop_when_no_tool_call), found {len(finishing)}"
            )
        self.finish_name: str | None = finishing[0] if finishing else None
        self._schemas = [t.schema() for t in self.tools.values()]

    def _compile(self) -> None:
        """The validators and fast checks of every tool's schema (cached per schema)."""
        for tool in self.tools.values():
            key = json.dumps(tool.parameters, sort_keys=True)
            self._validators[tool.name] = _validator(key)
            self._fast_checks[tool.name] = _fast_check(key)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the compiled checks (jsonschema's validators hold local functions, which
        ``pickle`` refuses); :meth:`__setstate__` compiles them again from the schemas."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_validators", "_fast_checks")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._validators, self._fast_checks = {}, {}
        self._compile()

    def schemas(self) -> list[dict[str, Any]]:
        """OpenAI function schemas, fresh copies (observations must not share objects)."""
        return copy.deepcopy(self._schemas)

    def name_for(self, canonical: str) -> str:
        """The presented name of a canonical tool (privileged: used by the reference agent)."""
        for tool in self.tools.values():
            if tool.canonical == canonical:
                return tool.name
        raise KeyError(f"this harness has no tool presenting {canonical!r}")

    def resolve(self, name: str, arguments: dict[str, Any]) -> tuple[BoundTool | None, str | None]:
        """The tool called ``name`` and None, or None and an error message that says what was expected."""
        tool = self.tools.get(name)
        if tool is None:
            available = ", ".join(sorted(self.tools))
            return None, f"Error: unknown tool {name!r}. Available tools: {available}."
        fast = self._fast_checks.get(name)
        if fast is not None and fast(arguments):
            return tool, None
        errors = sorted(self._validators[name].iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if errors:
            details = "; ".join(f"{_where(e)}{e.message}" for e in errors[:5])
            props = tool.parameters.get("properties", {})
            required = tool.parameters.get("required", [])
            expected = ", ".join(f"{k}{'' if k in required else '?'}: {v.get('type', 'any')}" for k, v in props.items())
            return None, f"Error: invalid arguments for {name}: {details}. Expected arguments {{{expected}}}."
        return tool, None


def _where(error: jsonschema.ValidationError) -> str:
    path = "/".join(str(p) for p in error.absolute_path)
    return f"at '{path}': " if path else ""
