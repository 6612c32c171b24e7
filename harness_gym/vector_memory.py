"""Shared memory for the chat observation spaces, so ``gym.make_vec(..., vectorization_mode="async")``
works with its default ``shared_memory=True``.

Gymnasium's ``AsyncVectorEnv`` moves observations through fixed-size shared arrays, which text of
unbounded length cannot use. Each sub-environment's observation part is instead written as JSON to
a slot file in a private directory (in ``/dev/shm`` where there is one, so it stays in memory),
replaced atomically, with a shared version counter per slot; the parent reads a slot only when its
version changed. Registered with Gymnasium's ``create_shared_memory`` / ``write_to_shared_memory``
/ ``read_from_shared_memory`` for :class:`MessagesSpace` and :class:`ToolSchemasSpace`.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import shutil
import weakref
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any

from gymnasium.vector.utils import create_shared_memory, read_from_shared_memory, write_to_shared_memory

from harness_gym.paths import forget_folder, temporary_folder
from harness_gym.spaces import MessagesSpace, ToolSchemasSpace


def _remove_directory(directory: str, owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # a forked worker inherits the finalizer; only the creator removes
        shutil.rmtree(directory, ignore_errors=True)
        forget_folder(directory)


class JsonSlots:
    """``n`` slots holding one JSON value each, shared between a parent and its worker processes."""

    def __init__(self, n: int, ctx: ModuleType = mp) -> None:
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        # registered: a kill -9 of the parent leaves nothing in /dev/shm after the next start
        self.directory = str(temporary_folder("harness-gym-vector-", base))
        self.n = n
        self.versions = ctx.Array("q", n)
        self._cache: dict[int, tuple[int, str, Any]] = {}  # index -> (version, its JSON text, decoded)
        weakref.finalize(self, _remove_directory, self.directory, os.getpid())

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "n": self.n, "versions": self.versions}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _cache={})

    def _path(self, index: int) -> str:
        return os.path.join(self.directory, f"{index}.json")

    def write(self, index: int, value: Any) -> None:
        if not 0 <= index < self.n:
            raise IndexError(f"slot {index} out of range for {self.n} sub-environments")
        temporary = f"{self._path(index)}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(value, handle, ensure_ascii=False)
        os.replace(temporary, self._path(index))
        with self.versions.get_lock():
            self.versions[index] += 1

    def _current(self, index: int) -> tuple[int, str, Any] | None:
        version = self.versions[index]
        cached = self._cache.get(index)
        if cached is not None and cached[0] == version:
            return cached
        if version == 0:
            return None
        with open(self._path(index), encoding="utf-8") as handle:
            text = handle.read()
        self._cache[index] = cached = (version, text, json.loads(text))
        return cached

    def read(self, index: int) -> Any:
        """The slot's current value (``None`` before the first write); the same object until the slot
        is written again, so callers must not change it (see :meth:`fresh`)."""
        current = self._current(index)
        return None if current is None else current[2]

    def fresh(self, index: int) -> Any:
        """A new copy of the slot's current value, decoded again from its JSON text: a C decode of a
        few kB, where ``copy.deepcopy`` of the decoded history (what ``AsyncVectorEnv`` did every
        step) walked it in Python and grew with the episode (10 of 18 ms of a 4-env step)."""
        current = self._current(index)
        return None if current is None else json.loads(current[1])


class JsonSlotsView(Sequence[Any]):
    """The batch of current values, as Gymnasium expects from ``read_from_shared_memory``: it
    reflects every later write, and ``deepcopy`` (what ``AsyncVectorEnv`` returns by default)
    freezes it into a tuple."""

    def __init__(self, slots: JsonSlots) -> None:
        self.slots = slots

    def __len__(self) -> int:
        return self.slots.n

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self.slots.n
        if not 0 <= index < self.slots.n:
            raise IndexError(index)
        return self.slots.read(index)

    def __iter__(self) -> Iterator[Any]:
        return (self.slots.read(i) for i in range(self.slots.n))

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[Any, ...]:
        return tuple(self.slots.fresh(i) for i in range(self.slots.n))

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (JsonSlotsView, list)) else other)

    def __repr__(self) -> str:
        return f"JsonSlotsView({tuple(self)!r})"


@create_shared_memory.register(MessagesSpace)
@create_shared_memory.register(ToolSchemasSpace)
def _create_json_slots(space: Any, n: int = 1, ctx: ModuleType = mp) -> JsonSlots:
    return JsonSlots(n, ctx)


@write_to_shared_memory.register(MessagesSpace)
@write_to_shared_memory.register(ToolSchemasSpace)
def _write_json_slot(space: Any, index: int, value: Any, shared_memory: JsonSlots) -> None:
    shared_memory.write(index, value)


@read_from_shared_memory.register(MessagesSpace)
@read_from_shared_memory.register(ToolSchemasSpace)
def _read_json_slots(space: Any, shared_memory: JsonSlots, n: int = 1) -> JsonSlotsView:
    if shared_memory.n != n:
        raise ValueError(f"shared memory holds {shared_memory.n} slots, {n} were asked for")
    return JsonSlotsView(shared_memory)
