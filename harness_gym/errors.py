"""One exception hierarchy: every error harness-gym raises on purpose is a :class:`HarnessGymError`.

Users catch the root, or one of the few families below it; the specific classes (``SpecError``,
``SandboxOptionsError``, ``WorldError``, ...) stay where they were raised and keep their old base
(``ValueError``/``RuntimeError``), so existing ``except ValueError`` code keeps working. This module
imports nothing from the package: every layer may raise these.
"""

from __future__ import annotations


class HarnessGymError(Exception):
    """The root: any error harness-gym raises deliberately, with a message that names the problem."""


class HarnessSpecError(HarnessGymError, ValueError):
    """A harness reference or spec is invalid (unknown id, bad file, schema violation, bad option)."""


class TaskError(HarnessGymError, ValueError):
    """A task or task suite is invalid or cannot be loaded."""


class SandboxError(HarnessGymError, RuntimeError):
    """The sandbox cannot run (backend missing, bad option, world not built, command protocol broken)."""


class ToolCallError(HarnessGymError, ValueError):
    """An action or tool call is malformed, or names a tool format that does not exist."""


class AgentError(HarnessGymError, RuntimeError):
    """The agent or its model endpoint failed (or its context overflowed)."""


class BenchError(HarnessGymError, RuntimeError):
    """A benchmark run cannot start or stopped early (manifest mismatch, too many errors)."""


class RolloutError(HarnessGymError, ValueError):
    """A rollout request (a dataset row's label) cannot run: bad label, unknown task or harness."""


#: The families a user catches, in the order the README lists them.
FAMILIES: tuple[type[HarnessGymError], ...] = (
    HarnessSpecError,
    TaskError,
    SandboxError,
    ToolCallError,
    AgentError,
    BenchError,
    RolloutError,
)
