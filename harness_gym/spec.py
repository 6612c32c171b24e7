"""The harness spec: a harness as data, validated by a JSON schema and identified by a content hash.

A configuration of the 3^5 space compiles to a spec by merging one fragment per factor (from
``factors/variants/*.yaml``) over ``base.yaml``. The environment runs any valid spec; evolvable
harnesses extend the same spec with more tools, hooks and skills.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness_gym.space import HarnessConfig

SPEC_VERSION = 1


class SpecError(ValueError):
    """A harness spec is invalid; the message names the JSON path of the problem."""


@functools.cache
def spec_schema() -> dict[str, Any]:
    """The JSON schema every harness spec must satisfy."""
    text = resources.files("harness_gym").joinpath("schemas/harness_spec.schema.json").read_text(encoding="utf-8")
    return json.loads(text)


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    schema = spec_schema()
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def validate_spec(spec: Mapping[str, Any]) -> None:
    """Raise :class:`SpecError` listing every schema violation with its JSON path."""
    errors = sorted(_validator().iter_errors(spec), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  at {e.json_path}: {e.message}" for e in errors[:10]]
        more = f"\n  ... and {len(errors) - 10} more" if len(errors) > 10 else ""
        name = spec.get("name", "<unnamed>") if isinstance(spec, Mapping) else "<not a mapping>"
        raise SpecError(f"invalid harness spec {name!r}:\n" + "\n".join(lines) + more)


def spec_hash(spec: Mapping[str, Any]) -> str:
    """SHA-256 of the spec's canonical JSON (sorted keys), first 16 hex digits."""
    canonical = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive dict merge: mappings merge key by key, anything else in ``override`` replaces."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


@functools.cache
def load_variant_file(name: str) -> dict[str, Any]:
    """One of the packaged YAML files in ``factors/variants``."""
    text = resources.files("harness_gym").joinpath(f"factors/variants/{name}.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def load_spec(path: str | Path) -> dict[str, Any]:
    """Load and validate a spec from a YAML or JSON file."""
    data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a harness spec must be a mapping at the top level")
    validate_spec(data)
    return data


def save_spec(spec: Mapping[str, Any], path: str | Path) -> None:
    """Write a spec as YAML (``.yaml``/``.yml``) or JSON (anything else), validated first."""
    validate_spec(spec)
    target = Path(path)
    if target.suffix in {".yaml", ".yml"}:
        target.write_text(yaml.safe_dump(dict(spec), sort_keys=False, allow_unicode=True), encoding="utf-8")
    else:
        target.write_text(json.dumps(spec, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


@functools.cache
def _compiled(config: HarnessConfig) -> str:
    from harness_gym.factors import FACTOR_MODULES

    spec: dict[str, Any] = deep_merge(load_variant_file("base"), {"name": config.env_id, "config": config.code})
    for factor, module in FACTOR_MODULES.items():
        spec = deep_merge(spec, module.fragment(config.level(factor)))
    validate_spec(spec)
    return json.dumps(spec)


def compile_config(config: HarnessConfig | str) -> dict[str, Any]:
    """The harness spec of a configuration of the 3^5 space (a fresh copy each call)."""
    return json.loads(_compiled(HarnessConfig.parse(config)))
