"""Packaged harness specs registered as environments: the HarnessAdapt presets (H0, H1, H2) and
out-of-space presets that imitate external harnesses' conventions."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from harness_gym.spec import load_spec

PRESETS: dict[str, str] = {
    "HarnessAdapt-H0": "harnessadapt_h0",
    "HarnessAdapt-H1": "harnessadapt_h1",
    "HarnessAdapt-H2": "harnessadapt_h2",
    "Harness-ClaudeCodeStyle": "claude_code_style",
    "Harness-OpenClawStyle": "openclaw_style",
}
OUT_OF_SPACE = ("Harness-ClaudeCodeStyle", "Harness-OpenClawStyle")


def preset_path(name: str) -> Path:
    """The YAML file of a preset, by environment id (``HarnessAdapt-H1``) or file stem."""
    stem = PRESETS.get(name, name)
    path = Path(str(resources.files("harness_gym").joinpath(f"presets/{stem}.yaml")))
    if not path.is_file():
        raise ValueError(f"unknown preset {name!r}; presets: {sorted(PRESETS)}")
    return path


def load_preset(name: str) -> dict[str, Any]:
    """A preset's resolved, validated spec."""
    return load_spec(preset_path(name))
