"""Sandboxes: where the agent's commands and the harness's tool scripts run.

A sandbox owns one episode's execution context: a persistent shell whose working directory and
environment variables carry from one command to the next, over a workspace directory mounted at
the path the task expects. The harness never runs agent-controlled code on the host.
"""

from harness_gym.sandboxes.base import (
    HARNESS_DIR,
    TOOLS_DIR,
    CommandResult,
    Sandbox,
    SandboxError,
    SandboxFactory,
    choose_backend,
    create_sandbox,
    register_backend,
)
from harness_gym.sandboxes.bubblewrap import BubblewrapSandbox, bubblewrap_available
from harness_gym.sandboxes.docker import DockerSandbox
from harness_gym.sandboxes.options import SandboxOptions, SandboxOptionsError
from harness_gym.sandboxes.unsafe import UnsafeHostSandbox

__all__ = [
    "HARNESS_DIR",
    "TOOLS_DIR",
    "BubblewrapSandbox",
    "CommandResult",
    "DockerSandbox",
    "Sandbox",
    "SandboxError",
    "SandboxFactory",
    "SandboxOptions",
    "SandboxOptionsError",
    "UnsafeHostSandbox",
    "bubblewrap_available",
    "choose_backend",
    "create_sandbox",
    "register_backend",
]
