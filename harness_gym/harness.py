"""The front door: a frozen, typed :class:`Harness` resolved from any reference, in one place.

A harness is referred to in many ways: a configuration id (``S1T2O0C1W2``), an environment id
(``Harness-S1T2O0C1W2``, ``harness_gym/Harness-S1T2O0C1W2-v0``, ``HarnessAdapt-H1``), a preset, a
spec file (YAML or JSON), an inline spec mapping. :meth:`Harness.resolve` turns every one of them
into the same object; the environment, the bench, the trainer's requests and the CLI all call it,
so a reference means the same harness everywhere. The JSON-schema-validated spec stays the data
underneath (:attr:`Harness.spec`, :attr:`Harness.spec_hash`); the typed views (:attr:`budget`,
:attr:`tools`) read it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_gym.budget import Budget
from harness_gym.errors import HarnessSpecError
from harness_gym.factors import compile_config
from harness_gym.presets import PRESETS, load_preset, preset_path
from harness_gym.space import FACTORS, HarnessConfig
from harness_gym.spec import load_spec, resolve_spec, spec_hash, validate_spec
from harness_gym.tools.roles import tool_role

SPEC_SUFFIXES = (".yaml", ".yml", ".json")
_VERSIONED_ID = re.compile(r"^harness_gym/(?P<id>.+)-v\d+$")

ACCEPTED = (
    "a configuration id ('S1T2O0C1W2' or its digits '12012')",
    "an environment id ('Harness-S1T2O0C1W2', 'harness_gym/Harness-S1T2O0C1W2-v0')",
    "a preset ({presets})",
    "a spec file (*.yaml, *.yml, *.json)",
    "a spec mapping",
    "a Harness",
)


@dataclass(frozen=True)
class ToolView:
    """One tool of a harness, as data: presented name, canonical name, role and implementation."""

    name: str
    canonical: str
    role: str
    implementation: Any


@dataclass(frozen=True, slots=True)
class Harness:
    """A resolved harness: its validated spec (kept as canonical JSON, so the object is immutable),
    its content hash and where it came from. Build it with :meth:`resolve`."""

    name: str
    spec_hash: str
    config: str | None  # the configuration id when the harness is a point of the 3^5 space
    source: str  # the reference it was resolved from, for messages and manifests
    spec_json: str

    # ------------------------------------------------------------------ construction

    @classmethod
    def resolve(cls, ref: Harness | HarnessConfig | Mapping[str, Any] | str | Path) -> Harness:
        """The harness a reference names; :class:`HarnessSpecError` lists what is accepted otherwise."""
        if isinstance(ref, Harness):
            return ref
        if isinstance(ref, HarnessConfig):
            return cls.from_spec(compile_config(ref), source=ref.code)
        if isinstance(ref, Mapping):
            return cls.from_spec(resolve_spec(ref), source="inline spec")
        if isinstance(ref, Path):
            return cls._from_file(ref)
        if not isinstance(ref, str):
            raise HarnessSpecError(f"a harness reference cannot be a {type(ref).__name__}; it is {_accepted()}")
        text = ref.strip()
        if not text:
            raise HarnessSpecError(f"the harness reference is empty; it must be {_accepted()}")
        versioned = _VERSIONED_ID.match(text)
        short = versioned.group("id") if versioned else text
        if short in PRESETS:
            return cls.from_spec(load_preset(short), source=str(preset_path(short)))
        if text.endswith(SPEC_SUFFIXES) or Path(text).is_file():
            return cls._from_file(Path(text))
        try:
            config = HarnessConfig.parse(short)
        except ValueError as exc:
            raise HarnessSpecError(f"unknown harness {ref!r}: it must be {_accepted()}.\nAs an id: {exc}") from None
        return cls.from_spec(compile_config(config), source=config.code)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any], source: str = "inline spec") -> Harness:
        """A harness from an expanded spec (``extends``/``use`` already resolved); validated here."""
        try:
            data = json.loads(json.dumps(spec))  # a plain, independent copy
        except (TypeError, ValueError) as exc:
            raise HarnessSpecError(f"a harness spec must be JSON data: {exc}") from None
        validate_spec(data)
        return cls(data["name"], spec_hash(data), data.get("config"), source, json.dumps(data))

    @classmethod
    def _from_file(cls, path: Path) -> Harness:
        if not path.is_file():
            raise HarnessSpecError(f"harness spec file {path} does not exist")
        return cls.from_spec(load_spec(path), source=str(path))

    def with_changes(self, *, tool_call_format: str | None = None, max_steps: int | None = None) -> Harness:
        """The same harness with another tool-call format or step budget (a new, validated spec)."""
        if tool_call_format is None and max_steps is None:
            return self
        spec = self.spec
        if tool_call_format is not None:
            spec["tool_call_format"] = tool_call_format
        if max_steps is not None:
            spec["budget"]["max_steps"] = int(max_steps)
        return Harness.from_spec(spec, source=self.source)

    # ------------------------------------------------------------------ typed views

    @property
    def spec(self) -> dict[str, Any]:
        """The spec as data (a fresh copy: changing it changes nothing here)."""
        data: dict[str, Any] = json.loads(self.spec_json)
        return data

    @property
    def budget(self) -> Budget:
        return Budget.from_spec(json.loads(self.spec_json)["budget"])

    @property
    def tools(self) -> tuple[ToolView, ...]:
        return tuple(
            ToolView(t["name"], t.get("canonical", t["name"]), tool_role(t), t["implementation"])
            for t in json.loads(self.spec_json)["tools"]
        )

    @property
    def factors(self) -> dict[str, int] | None:
        """The factor levels (``{"S": 1, "T": 2, ...}``) of a harness in the 3^5 space, else None."""
        if self.config is None:
            return None
        parsed = HarnessConfig.parse(self.config)
        return {factor: parsed.level(factor) for factor in FACTORS}

    @property
    def in_space(self) -> bool:
        return self.config is not None

    def __repr__(self) -> str:
        return f"Harness({self.name!r}, spec_hash={self.spec_hash!r}, source={self.source!r})"


def _accepted() -> str:
    items = [item.format(presets=", ".join(sorted(PRESETS))) for item in ACCEPTED]
    return "one of: " + "; ".join(items)
