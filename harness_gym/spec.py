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
import math
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness_gym.budget import BUDGET_DEFAULTS as BUDGET_DEFAULTS  # re-exported; its home is harness_gym.budget
from harness_gym.errors import HarnessSpecError


class SpecError(HarnessSpecError):
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
    """Raise :class:`SpecError` listing every schema violation with its JSON path (and every NaN or
    infinite number, which JSON Schema's ``number`` lets through)."""
    try:
        errors = sorted(_validator().iter_errors(spec), key=lambda e: list(e.absolute_path))
        lines = [f"  at {e.json_path}: {e.message}" for e in errors[:10]]
        lines += [f"  at {path}: {value!r} is not a finite number" for path, value in non_finite_numbers(spec)]
    except RecursionError:
        raise SpecError(TOO_DEEP) from None
    if lines:
        more = f"\n  ... and {len(errors) - 10} more" if len(errors) > 10 else ""
        name = spec.get("name", "<unnamed>") if isinstance(spec, Mapping) else "<not a mapping>"
        raise SpecError(f"invalid harness spec {name!r}:\n" + "\n".join(lines) + more)


def non_finite_numbers(value: Any, path: str = "$") -> list[tuple[str, float]]:
    """Every NaN or infinite float in a nested structure, with its JSON path (YAML reads ``.nan``/``.inf``)."""
    if isinstance(value, float):
        return [] if math.isfinite(value) else [(path, value)]
    if isinstance(value, Mapping):
        return [hit for key, item in value.items() for hit in non_finite_numbers(item, f"{path}.{key}")]
    if isinstance(value, (list, tuple)):
        return [hit for i, item in enumerate(value) for hit in non_finite_numbers(item, f"{path}[{i}]")]
    return []


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


TOO_DEEP = "a harness spec nested this deeply is not one (Python's recursion limit was reached reading it)"
MAX_EXTENDS = 32  # how many specs one ``extends`` chain may pass through


def load_spec(path: str | Path, _chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    """Load a spec from a YAML or JSON file, resolve ``extends`` and ``use`` references, validate it.
    An ``extends`` cycle, a chain longer than MAX_EXTENDS and a document nested too deeply are spec
    errors (they raised RecursionError)."""
    path = Path(path)
    real = path.resolve()
    if real in _chain:
        cycle = " -> ".join(str(p) for p in (*_chain[_chain.index(real) :], real))
        raise SpecError(f"extends: a cycle: {cycle}")
    if len(_chain) >= MAX_EXTENDS:
        raise SpecError(f"extends: a chain of more than {MAX_EXTENDS} specs ({_chain[0]} ...)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(f"cannot read harness spec {path}: {exc}") from exc
    except RecursionError:
        raise SpecError(f"{path}: {TOO_DEEP}") from None
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a harness spec must be a mapping at the top level")
    try:
        spec = resolve_spec(data, path.parent, (*_chain, real))
    except RecursionError:
        raise SpecError(f"{path}: {TOO_DEEP}") from None
    validate_spec(spec)
    return spec


@functools.cache
def tool_library() -> dict[str, Any]:
    """The packaged tool and hook library (``tools/library.yaml``)."""
    text = resources.files("harness_gym").joinpath("tools/library.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)


def resolve_spec(
    data: Mapping[str, Any], base_dir: Path | None = None, _chain: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """Expand a spec document: ``extends: <file or preset>`` composes it over another spec, and
    ``{use: <key>, ...}`` items in ``tools`` and ``hooks`` pull entries from the library (fields
    next to ``use`` override the entry's)."""
    spec = dict(data)
    parent_name = spec.pop("extends", None)
    if parent_name is not None and not isinstance(parent_name, str):
        raise SpecError(f"extends: must name a spec file or preset, not {parent_name!r}"[:300])
    if parent_name:
        parent = _load_parent(parent_name, base_dir, _chain)
        spec = compose(parent, spec)
    library = tool_library()
    for section in ("tools", "hooks"):
        items = []
        for index, item in enumerate(spec.get(section) or []):
            if isinstance(item, Mapping) and "use" in item:
                key = item["use"]
                if key not in library[section]:
                    raise SpecError(
                        f"$.{section}[{index}]: the library has no {section[:-1]} {key!r}; "
                        f"known: {sorted(library[section])}"
                    )
                entry = copy.deepcopy(library[section][key])
                entry.update({k: copy.deepcopy(v) for k, v in item.items() if k != "use"})
                items.append(entry)
            else:
                items.append(copy.deepcopy(item))
        if section in spec:
            spec[section] = items
    return spec


def _load_parent(name: str, base_dir: Path | None, chain: tuple[Path, ...] = ()) -> dict[str, Any]:
    candidates = [base_dir / name, base_dir / f"{name}.yaml"] if base_dir else []
    packaged = resources.files("harness_gym").joinpath(f"presets/{name}.yaml")
    for candidate in candidates:
        if candidate.is_file():
            return load_spec(candidate, chain)
    if packaged.is_file():
        return load_spec(Path(str(packaged)), chain)
    raise SpecError(f"extends: no spec file or preset named {name!r}")


def compose(base: Mapping[str, Any], *overlays: Mapping[str, Any]) -> dict[str, Any]:
    """Merge specs left to right: mappings merge key by key, lists and values are replaced."""
    spec = copy.deepcopy(dict(base))
    for overlay in overlays:
        spec = deep_merge(spec, overlay)
    return spec


def diff_specs(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """Human-readable differences: tools and hooks by name, other fields by JSON path."""
    lines: list[str] = []
    for section in ("tools", "hooks"):
        before = {item["name"]: item for item in old.get(section, [])}
        after = {item["name"]: item for item in new.get(section, [])}
        lines += [f"+ {section[:-1]} {n}" for n in after if n not in before]
        lines += [f"- {section[:-1]} {n}" for n in before if n not in after]
        lines += [f"~ {section[:-1]} {n}" for n in after if n in before and after[n] != before[n]]
    for key in sorted(set(old) | set(new)):
        if key in ("tools", "hooks"):
            continue
        lines += _diff_values(f"$.{key}", old.get(key), new.get(key))
    return lines


def _diff_values(path: str, old: Any, new: Any) -> list[str]:
    if old == new:
        return []
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        return [
            line
            for key in sorted(set(old) | set(new))
            for line in _diff_values(f"{path}.{key}", old.get(key), new.get(key))
        ]
    show = lambda v: json.dumps(v, ensure_ascii=False)[:120]  # noqa: E731
    return [f"~ {path}: {show(old)} -> {show(new)}"]


def strip_skills(spec: Mapping[str, Any]) -> dict[str, Any]:
    """The spec as evaluated: skills are for training only."""
    out = copy.deepcopy(dict(spec))
    out["skills"] = []
    return out


def save_spec(spec: Mapping[str, Any], path: str | Path) -> None:
    """Write a spec as YAML (``.yaml``/``.yml``) or JSON (anything else), validated first."""
    validate_spec(spec)
    target = Path(path)
    if target.suffix in {".yaml", ".yml"}:
        target.write_text(yaml.safe_dump(dict(spec), sort_keys=False, allow_unicode=True), encoding="utf-8")
    else:
        target.write_text(json.dumps(spec, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
