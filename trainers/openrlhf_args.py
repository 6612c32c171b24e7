"""OpenRLHF's own command-line parser, for checking recipes before anything starts.

``openrlhf.cli.train_ppo_ray`` builds its ``argparse`` parser inside ``if __name__ == "__main__"``
and imports Ray, vLLM and DeepSpeed at the top, so it cannot be imported on a machine without GPUs.
The parser-building statements only need ``argparse``: they are taken from the installed module's
source (up to ``parse_args``) and run on their own. The flags, types, choices and ``nargs`` checked
are therefore exactly those of the OpenRLHF version that will run the job.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import difflib
import importlib.util
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from harness_gym.errors import HarnessGymError


class FlagError(HarnessGymError, ValueError):
    """A recipe's OpenRLHF flags do not parse with OpenRLHF's parser."""


def train_module_source() -> Path:
    spec = importlib.util.find_spec("openrlhf")
    if spec is None or not spec.submodule_search_locations:
        raise FlagError(
            "openrlhf is not installed, so its flags cannot be checked: pip install --no-deps openrlhf==0.11.2 "
            "(or pass --skip-flag-check)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "cli" / "train_ppo_ray.py"
    if not path.is_file():
        raise FlagError(f"{path} is missing; is openrlhf installed completely?")
    return path


@lru_cache(maxsize=4)
def openrlhf_parser(source: Path | None = None) -> argparse.ArgumentParser:
    """The ``train_ppo_ray`` parser of the installed OpenRLHF."""
    path = source or train_module_source()
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    mains = [
        node for node in tree.body
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test)
    ]  # fmt: skip
    if not mains:
        raise FlagError(f"{path} has no __main__ block to take the parser from")
    body = []
    for statement in mains[-1].body:
        if "parse_args" in ast.unparse(statement):
            break
        body.append(statement)
    namespace: dict[str, Any] = {"argparse": argparse, "datetime": datetime.datetime, "os": os}
    exec(compile(ast.Module(body=body, type_ignores=[]), str(path), "exec"), namespace)
    parser = namespace.get("parser")
    if not isinstance(parser, argparse.ArgumentParser):
        raise FlagError(f"could not rebuild the parser of {path}")
    parser.exit_on_error = False
    return parser


def to_argv(flags: Mapping[str, Any]) -> list[str]:
    """Recipe flags as command-line words: ``true`` is a bare switch, ``false`` is left out, a list is
    several values."""
    argv: list[str] = []
    for name, value in flags.items():
        if value is False or value is None:
            continue
        argv.append(f"--{name}")
        if value is True:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        argv += [_word(v) for v in values]
    return argv


def _word(value: Any) -> str:
    if isinstance(value, float):
        return repr(value) if abs(value) >= 1e-4 or value == 0 else f"{value:.0e}".replace("e-0", "e-")
    return str(value)


def check_flags(argv: list[str], parser: argparse.ArgumentParser | None = None) -> argparse.Namespace:
    """Parse ``argv`` with OpenRLHF's parser; a clear :class:`FlagError` on unknown or bad flags."""
    parser = parser or openrlhf_parser()
    try:
        namespace, unknown = parser.parse_known_args(argv)
    except argparse.ArgumentError as exc:
        raise FlagError(f"OpenRLHF rejects a flag: {exc}") from None
    except SystemExit:  # older argparse versions exit on errors despite exit_on_error=False
        raise FlagError(f"OpenRLHF rejects the flags {argv}") from None
    if unknown:
        known = {a for action in parser._actions for a in action.option_strings}
        hints = []
        for word in unknown:
            if word.startswith("--"):
                close = difflib.get_close_matches(word, sorted(known), n=3, cutoff=0.6)
                hints.append(word + (f" (did you mean {', '.join(close)}?)" if close else ""))
        raise FlagError("OpenRLHF has no flag " + "; ".join(hints or unknown))
    return namespace
