"""Keep harness-gym prompt datasets in file order inside OpenRLHF.

OpenRLHF shuffles its prompt dataloader (``setup_dataloader(..., shuffle=True)``), which would undo
the locality-aware schedule: a task's K configurations must land in K consecutive steps. Set as
Ray's ``worker_process_setup_hook`` (the launcher does), :func:`keep_prompt_order` wraps
``DeepspeedStrategy.setup_dataloader`` in every worker so that a dataset whose labels are
harness-gym rollout requests is read in order. Other datasets (replay buffers, anything else) are
left as they were.
"""

from __future__ import annotations

import functools
import json
from typing import Any


def is_schedule_dataset(dataset: Any) -> bool:
    """Whether a dataset holds harness-gym rollout requests (its labels say so)."""
    labels = getattr(dataset, "labels", None)
    if not labels:
        return False
    try:
        first = json.loads(labels[0]) if isinstance(labels[0], str) else labels[0]
    except (TypeError, ValueError):
        return False
    return isinstance(first, dict) and "harness_gym" in first


def ordered(setup_dataloader: Any) -> Any:
    """Wrap a ``setup_dataloader(self, dataset, batch_size, pin_memory, shuffle, ...)`` method."""
    if getattr(setup_dataloader, "__harness_gym_ordered__", False):
        return setup_dataloader

    @functools.wraps(setup_dataloader)
    def setup(self: Any, dataset: Any, batch_size: int, pin_memory: bool = False, shuffle: bool = True,
              *args: Any, **kwargs: Any) -> Any:  # fmt: skip
        if is_schedule_dataset(dataset):
            shuffle = False
        return setup_dataloader(self, dataset, batch_size, pin_memory, shuffle, *args, **kwargs)

    setup.__harness_gym_ordered__ = True  # type: ignore[attr-defined]
    return setup


def keep_prompt_order() -> None:
    """Ray worker setup hook. A no-op where OpenRLHF's DeepSpeed strategy cannot be imported."""
    try:
        from openrlhf.utils.deepspeed import deepspeed as strategy_module  # OpenRLHF workers only
    except ImportError:
        return
    strategy = strategy_module.DeepspeedStrategy
    strategy.setup_dataloader = ordered(strategy.setup_dataloader)
