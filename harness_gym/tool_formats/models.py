"""Which tool-call format a model emits, from its name or its tokenizer (``data/models.yaml``)."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness_gym.errors import ToolCallError
from harness_gym.tool_formats.registry import ALIASES, FORMATS, get_format

TABLE = Path(__file__).with_name("data") / "models.yaml"

_SCHEMA = {
    "type": "object",
    "required": ["default", "models", "template_markers"],
    "additionalProperties": False,
    "properties": {
        "default": {"type": "string"},
        "models": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["match", "format", "family"],
                "additionalProperties": False,
                "properties": {"match": {"type": "string"}, "format": {"type": "string"}, "family": {"type": "string"}},
            },
        },
        "template_markers": {
            "type": "array",
            "items": {
                "type": "array",
                "prefixItems": [{"type": "string"}, {"type": "string"}],
                "minItems": 2,
                "maxItems": 2,
            },
        },
    },
}


class ModelTableError(ToolCallError):
    """The model-to-format table is malformed or names an unknown format."""


@functools.lru_cache(maxsize=8)
def load_table(path: str | Path = TABLE) -> dict[str, Any]:
    """The table, validated: its schema, every regular expression and every format name."""
    data = yaml.safe_load(Path(path).read_text())
    try:
        jsonschema.validate(data, _SCHEMA)
    except jsonschema.ValidationError as exc:
        raise ModelTableError(f"{path}: {exc.message} at {'/'.join(map(str, exc.absolute_path))}") from None
    names = [data["default"], *(m["format"] for m in data["models"]), *(f for _, f in data["template_markers"])]
    unknown = sorted({n for n in names if n not in FORMATS and n not in ALIASES})
    if unknown:
        raise ModelTableError(f"{path}: unknown tool-call formats {unknown}")
    for entry in data["models"]:
        try:
            entry["pattern"] = re.compile(entry["match"], re.IGNORECASE)
        except re.error as exc:
            raise ModelTableError(f"{path}: bad pattern {entry['match']!r}: {exc}") from None
    return data


def format_for_model(model: Any, override: str | None = None, table: str | Path = TABLE) -> str:
    """The tool-call format for a model name, a model folder or a tokenizer.

    ``override`` (a format name other than ``auto``) wins. A tokenizer is looked up by its
    ``name_or_path``, then by markers in its chat template and vocabulary; a name matching nothing
    gets the table's default (``hermes``).
    """
    if override and override != "auto":
        return get_format(override).name
    data = load_table(str(table))
    name = model if isinstance(model, str) else str(getattr(model, "name_or_path", "") or "")
    for entry in data["models"]:
        if name and entry["pattern"].search(name):
            return entry["format"]
    if not isinstance(model, str):
        found = _from_tokenizer(model, data["template_markers"])
        if found:
            return found
    return data["default"]


def _from_tokenizer(tokenizer: Any, markers: list[list[str]]) -> str | None:
    template = getattr(tokenizer, "chat_template", None)
    template_text = template if isinstance(template, str) else str(template or "")
    try:
        vocabulary = tokenizer.get_vocab() if hasattr(tokenizer, "get_vocab") else {}
    except Exception:  # a tokenizer without a usable vocabulary is matched by its template only
        vocabulary = {}
    for marker, fmt in markers:
        if marker in template_text or marker in vocabulary:
            return fmt
    return None


def model_families(table: str | Path = TABLE) -> list[tuple[str, str]]:
    """(family, format) rows, for documentation."""
    return [(m["family"], m["format"]) for m in load_table(str(table))["models"]]
