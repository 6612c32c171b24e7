"""verifiers' ``null`` chat player, run offline (see :mod:`harness_gym.integrations.verifiers`).

verifiers runs an agent program as a PEP 723 uv script: it fetches ``uv`` and resolves the script's
dependencies from the network at first use, which fails on a machine without general internet (the
episode errored with an empty reward). In the local subprocess runtime :class:`HarnessPlayer` runs
the same program with this interpreter, whose ``verifiers`` extra installed what it imports; a
missing dependency is named. Its own module (and plugin package ``harness_gym_verifiers_player``)
so verifiers can resolve the player while the adapter module is still being imported.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import re
import sys
from typing import Any

from packaging.requirements import Requirement
from verifiers.v1.harnesses.null import NullHarness
from verifiers.v1.runtimes import SubprocessRuntime

__all__ = ["HarnessPlayer"]
PLAYER_ID = "harness-gym-verifiers-player"  # the plugin package exporting HarnessPlayer


def script_dependencies(script: str) -> list[str]:
    """The ``dependencies`` of a PEP 723 script's metadata block."""
    match = re.search(r"^# dependencies = (\[.*?\])$", script, re.MULTILINE)
    return [str(d) for d in json.loads(match.group(1))] if match else []


def missing_dependencies(requirements: list[str]) -> list[str]:
    """The requirements this interpreter does not satisfy (absent, or at another version)."""
    missing = []
    for text in requirements:
        requirement = Requirement(text)
        try:
            version = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(text)
            continue
        if requirement.specifier and not requirement.specifier.contains(version, prereleases=True):
            missing.append(f"{text} (installed: {version})")
    return missing


class _LocalScripts:
    """A subprocess runtime whose PEP 723 scripts run with this interpreter and its installed packages,
    instead of a uv environment built from the network."""

    def __init__(self, runtime: SubprocessRuntime) -> None:
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def prepare_uv_script(self, script: str | bytes, env: Any = None, *, activate: bool = True) -> list[str]:
        text = script.decode() if isinstance(script, bytes) else script
        missing = missing_dependencies(script_dependencies(text))
        if missing:
            raise RuntimeError(
                f"the verifiers player program needs {', '.join(missing)} in this environment (it runs offline, "
                'with no uv): pip install "harness-gym[verifiers]"'
            )
        name = f".vf-program-{hashlib.sha256(text.encode()).hexdigest()[:16]}.py"
        await self._runtime.write(name, text.encode())
        return [sys.executable, str(self._runtime.workdir / name)]


class HarnessPlayer(NullHarness):
    """verifiers' ``null`` chat player, run offline: in the local subprocess runtime its program runs
    with this interpreter (the ``verifiers`` extra installs what it imports); elsewhere as verifiers runs it."""

    async def setup(self, runtime: Any) -> None:
        if not isinstance(runtime, SubprocessRuntime):
            await super().setup(runtime)

    async def launch(self, ctx: Any, trace: Any, runtime: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(runtime, SubprocessRuntime):
            runtime = _LocalScripts(runtime)
        return await super().launch(ctx, trace, runtime, *args, **kwargs)
