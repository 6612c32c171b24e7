"""A warm spare: the next episode's sandbox started in the background, the last one closed there.

Most of a reset is process start (the sandbox's namespaces, the shell's first answer) and process
end (kill, wait, unmount), not the workspace (copy-on-write makes that a few mounts). An
environment therefore keeps at most one spare: after each reset a sandbox for the same task is
started in the background, and the next reset takes it when it asks for that task again (an RL
group, a benchmark, a retry); otherwise the spare is closed and the reset starts its own. The
finished episode's sandbox is closed in the background too.

Bounded and reclaimed like any sandbox: one spare per environment, closed by ``close()``; its
workspace, uid and cgroups are in the process's registry (:mod:`.isolation`), so a killed process's
spare is reclaimed at the next start. Spares are made by a pool of as many worker threads as there
are cores (``HARNESS_GYM_SPARE_LIMIT`` sets another number): 64 environments resetting at once no
longer queue behind one thread. The sandbox processes themselves are started by the process's
launcher thread (:mod:`.launcher`), so a spare outlives the worker that made it.
``HARNESS_GYM_WARM_SPARE=0`` turns spares off.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, Protocol, TypeVar

VARIABLE = "HARNESS_GYM_WARM_SPARE"
LIMIT_VARIABLE = "HARNESS_GYM_SPARE_LIMIT"  # how many spares are made at once (default: the cores)


class Closable(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=Closable)

_starter: ThreadPoolExecutor | None = None
_starter_lock = threading.Lock()


def worker_limit() -> int:
    """How many spares are made at once: ``HARNESS_GYM_SPARE_LIMIT``, else the cores this process
    may run on."""
    text = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not text:
        return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{LIMIT_VARIABLE} must be a whole number of worker threads, got {text!r}") from None
    if value < 1:
        raise ValueError(f"{LIMIT_VARIABLE} must be at least 1, got {text!r}")
    return value


def _start_in_background(make: Callable[[], S]) -> Future[S]:
    """Run ``make`` on the process's spare pool (made at first use with :func:`worker_limit`
    workers; a forked child makes its own)."""
    global _starter
    with _starter_lock:
        if _starter is None or getattr(_starter, "_owner_pid", None) != os.getpid():
            _starter = ThreadPoolExecutor(max_workers=worker_limit(), thread_name_prefix="harness-gym-spare")
            _starter._owner_pid = os.getpid()  # type: ignore[attr-defined]
        return _starter.submit(make)


def enabled() -> bool:
    """Whether spares are on (``HARNESS_GYM_WARM_SPARE``: 0/false/no/off turn them off)."""
    return os.environ.get(VARIABLE, "1").strip().lower() not in ("0", "false", "no", "off")


class WarmSpare(Generic[S]):
    """At most one sandbox made in the background for a key, and sandboxes closing in the background."""

    def __init__(self) -> None:
        self._pending: tuple[Hashable, Future[S]] | None = None
        self._closing: list[threading.Thread] = []

    def prepare(self, key: Hashable, make: Callable[[], S]) -> None:
        """Make the spare for ``key`` in the background (a spare for another key is closed)."""
        self.discard()
        self._pending = (key, _start_in_background(make))

    def take(self, key: Hashable) -> S | None:
        """The spare for ``key`` (waiting for it to be ready), or None: none, another key's (closed
        now), or making it failed (the caller makes its own and meets the error itself)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return None
        spare_key, future = pending
        try:
            spare = future.result()
        except Exception:
            return None
        if spare_key != key:
            self.retire(spare)
            return None
        return spare

    def holds(self) -> S | None:
        """The spare if it is ready (for measurements), without taking it."""
        if self._pending is None or not self._pending[1].done() or self._pending[1].exception() is not None:
            return None
        return self._pending[1].result()

    def idle(self) -> bool:
        """Whether every sandbox handed to :meth:`retire` is closed (for measurements)."""
        return not any(t.is_alive() for t in self._closing)

    def retire(self, sandbox: S) -> None:
        """Close ``sandbox`` in the background (its processes, workspace and leases)."""
        self._closing = [t for t in self._closing if t.is_alive()]
        thread = threading.Thread(target=_close_quietly, args=(sandbox,), name="harness-gym-retire", daemon=True)
        thread.start()
        self._closing.append(thread)

    def discard(self) -> None:
        """Close the spare, if any (one still waiting for the worker is not made at all)."""
        if self._pending is not None and self._pending[1].cancel():
            self._pending = None
        if self._pending is not None:
            key = self._pending[0]
            spare = self.take(key)
            if spare is not None:
                self.retire(spare)

    def close(self) -> None:
        """Close the spare and wait until every sandbox handed to :meth:`retire` is closed."""
        self.discard()
        for thread in self._closing:
            thread.join()
        self._closing = []


def _close_quietly(sandbox: Closable) -> None:
    with contextlib.suppress(Exception):  # a close that fails leaves what the registry reclaims
        sandbox.close()
