"""External agent CLIs as data: one schema-validated YAML file per CLI, identified by a content hash.

A CLI file names its package and exact version, the headless argv template, the wire API, the
environment and HOME files that point it at the proxy and switch its side traffic off, its
completion signal and how its tools map to roles. Templates use ``{name}`` placeholders from
:data:`PLACEHOLDERS` only (so TOML and JSON braces stay literal).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness_gym.errors import HarnessSpecError
from harness_gym.external.proxy.masking import RULES, ToolOutputMasking
from harness_gym.spec import non_finite_numbers, spec_hash

PREFIX = "external:"
PLACEHOLDERS = ("task", "model", "max_turns", "origin", "api_key", "home", "workspace", "install", "entry")
# how an install tree is laid out, per package manager: a new layout is a new key (a new tree beside
# the old one), so a tree is never run as if it had a layout it lacks. pip 2: the interpreter and its
# standard library are copied into the tree (before, the virtual environment used the host's
# /usr/bin/pythonX.Y, which a world does not have). npm trees keep the first layout (no entry):
# a CLI that runs on Node pins it in its file (package.node), which changes its key already.
INSTALL_LAYOUT = {"pip": 2}
_PLACEHOLDER = re.compile(r"\{(" + "|".join(PLACEHOLDERS) + r")\}")
# the canonical tool name graders read, by role (a role without one keeps the CLI's own name)
CANONICAL_BY_ROLE = {
    "shell": "execute_bash",
    "edit": "file_editor",
    "read": "read_file",
    "view": "read_file",
    "search": "search",
    "finish": "finish",
}


class ExternalCliError(HarnessSpecError):
    """An external CLI id is unknown or its file is invalid; the message says which and why."""


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    text = resources.files("harness_gym").joinpath("schemas/external_cli.schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _clis_dir() -> Path:
    return Path(str(resources.files("harness_gym").joinpath("external/clis")))


@dataclass(frozen=True)
class ExternalCli:
    """One validated CLI file; ``data`` is the file's mapping, ``digest`` its content hash."""

    data: Mapping[str, Any]
    digest: str

    @property
    def name(self) -> str:
        return str(self.data["name"])

    @property
    def id(self) -> str:
        return PREFIX + self.name

    @property
    def package(self) -> Mapping[str, Any]:
        return self.data["package"]

    @property
    def version(self) -> str:
        return str(self.package["version"])

    @property
    def install_key(self) -> str:
        """The install folder's name: package slug, version, and a hash of everything installed
        (package, extras, runtime, :data:`INSTALL_LAYOUT`), so two ids sharing a package share one tree."""
        slug = re.sub(r"[^a-z0-9.-]+", "-", str(self.package["name"]).split("/")[-1].lower()).strip("-")
        layout = INSTALL_LAYOUT.get(str(self.package["manager"]))
        hashed = {**self.package, "layout": layout} if layout else self.package
        return f"{slug}-{self.version}-{spec_hash(hashed)[:12]}"

    @property
    def heavy(self) -> bool:
        return bool(self.data.get("heavy", False))

    @property
    def wire_api(self) -> str:
        return str(self.data["wire_api"])

    @property
    def model(self) -> str:
        return str(self.data["model"])

    @property
    def shell_tool(self) -> tuple[str, str]:
        """(tool name, argument key) of the CLI's own shell tool."""
        tool = self.data["shell_tool"]
        return str(tool["name"]), str(tool["argument"])

    def role(self, tool: str) -> str:
        """The role of one of the CLI's tools (``other`` for a tool the file does not list)."""
        return str(self.data["tool_roles"].get(tool, "other"))

    def canonical(self, tool: str) -> str:
        """The canonical tool name graders see for a call to ``tool``."""
        return CANONICAL_BY_ROLE.get(self.role(tool), tool)

    def render(self, values: Mapping[str, str]) -> dict[str, Any]:
        """argv, env and HOME files with every placeholder filled in (env/file mappings become JSON)."""
        return {
            "argv": [fill(str(a), values) for a in self.data["argv"]],
            "env": {k: _as_text(fill_all(v, values)) for k, v in (self.data.get("env") or {}).items()},
            "files": {k: _as_text(fill_all(v, values)) for k, v in (self.data.get("files") or {}).items()},
        }


def fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``{placeholder}`` replaced (one pass: a value's own braces stay as they are)."""
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)


def fill_all(value: Any, values: Mapping[str, str]) -> Any:
    """:func:`fill` through nested mappings and lists (keys too: a model name may be a key)."""
    if isinstance(value, str):
        return fill(value, values)
    if isinstance(value, Mapping):
        return {fill(str(k), values): fill_all(v, values) for k, v in value.items()}
    if isinstance(value, list):
        return [fill_all(v, values) for v in value]
    return value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=2)


def validate_cli(data: Any, source: str = "<cli>") -> ExternalCli:
    """Validate one CLI mapping; raise :class:`ExternalCliError` naming every problem's JSON path."""
    if not isinstance(data, Mapping):
        raise ExternalCliError(f"{source}: an external CLI file must be a mapping, got {type(data).__name__}")
    errors = sorted(_validator().iter_errors(data), key=lambda e: list(e.absolute_path))
    lines = [f"  at {e.json_path}: {e.message}" for e in errors[:10]]
    lines += [f"  at {path}: {value!r} is not a finite number" for path, value in non_finite_numbers(data)]
    if not lines:
        unknown = sorted(
            {m.group(0) for m in re.finditer(r"\{[a-z_]+\}", json.dumps(data))} - {"{" + p + "}" for p in PLACEHOLDERS}
        )
        lines += [f"  unknown placeholder {u}; known: {', '.join(PLACEHOLDERS)}" for u in unknown]
        shell, _ = data["shell_tool"]["name"], None
        if data["tool_roles"].get(shell) != "shell":
            lines.append(f"  shell_tool {shell!r} must have role 'shell' in tool_roles")
        lines += _masking_problems(data)
        for index, pattern in enumerate(data.get("rejected_call_results") or []):
            try:
                re.compile(pattern)
            except re.error as exc:
                lines.append(f"  at $.rejected_call_results[{index}]: {pattern!r} is not a regular expression: {exc}")
    if lines:
        raise ExternalCliError(f"invalid external CLI {source}:\n" + "\n".join(lines))
    return ExternalCli(data=dict(data), digest=spec_hash(data))


def _masking_problems(data: Mapping[str, Any]) -> list[str]:
    """A ``masked_results`` rule the proxy does not implement, on another wire or for another pin than the rule's."""
    masking = data.get("masked_results")
    if not masking:
        return []
    try:
        ToolOutputMasking.from_data(masking)
    except ValueError as exc:
        return [f"  at $.masked_results.rule: {exc}"]
    if data["wire_api"] != "gemini":
        return [f"  at $.masked_results: the rule {masking['rule']!r} reads Gemini's wire, not {data['wire_api']!r}"]
    package, version = RULES[masking["rule"]]
    if (data["package"]["name"], data["package"]["version"]) != (package, version):
        return [
            f"  at $.masked_results.rule: {masking['rule']!r} was read in {package} {version}'s bundle, not in "
            f"{data['package']['name']} {data['package']['version']}'s: read the new bundle's masking and name its rule"
        ]
    return []


def load_cli_file(path: str | Path) -> ExternalCli:
    """Load and validate a CLI file (the shipped ones, or a user's own)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ExternalCliError(f"cannot read external CLI file {path}: {exc}") from exc
    cli = validate_cli(data, str(path))
    if cli.name != path.stem:
        raise ExternalCliError(f"{path}: name {cli.name!r} must equal the file's stem {path.stem!r}")
    return cli


@functools.cache
def shipped_clis() -> dict[str, ExternalCli]:
    """Every shipped CLI by name, in name order."""
    return {p.stem: load_cli_file(p) for p in sorted(_clis_dir().glob("*.yaml"))}


def is_external(reference: str) -> bool:
    """Whether a harness reference names an external CLI (``external:<name>``)."""
    return reference.startswith(PREFIX)


def load_cli(reference: str | ExternalCli) -> ExternalCli:
    """A CLI by id (``external:claude-code``), bare name, or path to a YAML file."""
    if isinstance(reference, ExternalCli):
        return reference
    name = reference[len(PREFIX) :] if is_external(reference) else reference
    clis = shipped_clis()
    if name in clis:
        return clis[name]
    if name.endswith((".yaml", ".yml")) and Path(name).is_file():
        return load_cli_file(name)
    known = ", ".join(PREFIX + n for n in clis)
    raise ExternalCliError(f"unknown external CLI {reference!r}; known: {known}")


def gym_ids() -> dict[str, str]:
    """Gymnasium ids of the real CLIs (inverted control, :mod:`.gym_env`): ``External-ClaudeCode`` ->
    ``external:claude-code``, for every shipped CLI."""
    return {
        "External-" + "".join(p.capitalize() for p in name.split("-")): cli.id for name, cli in shipped_clis().items()
    }
