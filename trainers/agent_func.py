"""The file to pass as OpenRLHF's ``--train.agent_func_path``.

OpenRLHF loads this file by path and instantiates ``AgentExecutor()`` in every vLLM rollout actor.
harness_gym must be installed on every Ray node (``pip install -e .``); the repository root is added
to ``sys.path`` here so that ``trainers`` imports wherever the file is loaded from.
"""

from __future__ import annotations

import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parent.parent)
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

from trainers.rollout import HarnessAgentExecutor  # noqa: E402


class AgentExecutor(HarnessAgentExecutor):
    """harness_gym episodes as OpenRLHF samples; settings from ``HARNESS_GYM_EXECUTOR``."""
