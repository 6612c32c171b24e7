"""A warm spare: the next episode's sandbox started in the background, the last one closed there.

Most of a reset is process start (the sandbox's namespaces, the shell's first answer) and process
end (kill, wait, unmount), not the workspace (copy-on-write makes that a few mounts). An
environment therefore keeps at most one spare: after each reset a sandbox for the same task is
started in the background, and the next reset takes it when it asks for that task again (an RL
group, a benchmark, a retry); otherwise the spare is closed and the reset starts its own. The
finished episode's sandbox is closed in the background too.

Bounded and reclaimed like any sandbox: one spare per environment, closed by ``close()``; its
workspace, uid and cgroups are in the process's registry (:mod:`.isolation`), so a killed process's
spare is reclaimed at the next start. Spares are made, and finished sandboxes closed, by a pool of as many worker threads as there
are cores (``HARNESS_GYM_SPARE_LIMIT`` sets another number): 64 environments resetting at once no
longer queue behind one thread. The sandbox processes themselves are started by the process's
launcher thread (:mod:`.launcher`), so a spare outlives the worker that made it.
``HARNESS_GYM_WARM_SPARE=0`` turns spares off.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import queue
import threading
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any, Generic, Protocol, TypeVar

VARIABLE = "HARNESS_GYM_WARM_SPARE"
LIMIT_VARIABLE = "HARNESS_GYM_SPARE_LIMIT"  # how many spares are made at once (default: the cores)


class Closable(Protocol):
    def close(self) -> None: ...


S = TypeVar("S", bound=Closable)
T = TypeVar("T")


class _Workers:
    """The spare pool: worker threads reading one queue. Handing a job over takes no lock here
    (``ThreadPoolExecutor.submit`` takes two: 64 resets at once each waited p50 194 ms for them,
    a thread preempted while holding one making every other wait for the scheduler in turn).
    At exit, what is queued is still done (finished sandboxes closed) before the workers stop."""

    def __init__(self, count: int) -> None:
        self.pid = os.getpid()
        self.jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self.stopped = False
        self.threads = [
            threading.Thread(target=self._serve, name=f"harness-gym-spare-{index}", daemon=True)
            for index in range(count)
        ]
        for thread in self.threads:
            thread.start()
        atexit.register(self.stop)

    def submit(self, function: Callable[[], T]) -> Future[T]:
        if self.stopped:
            raise RuntimeError("the spare pool has stopped (the interpreter is exiting)")
        future: Future[T] = Future()
        self.jobs.put((function, future))
        return future

    def _serve(self) -> None:
        while (item := self.jobs.get()) is not None:
            function, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function())
            except BaseException as exc:  # handed to whoever waits for it
                future.set_exception(exc)

    def stop(self, timeout_s: float = 60.0) -> None:
        """Let the workers finish what is queued, then end them (at exit; a forked child's own)."""
        if self.stopped or self.pid != os.getpid():
            return
        self.stopped = True
        for _ in self.threads:
            self.jobs.put(None)
        for thread in self.threads:
            thread.join(timeout_s)


_starter: _Workers | None = None
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


def _start_in_background(make: Callable[[], T]) -> Future[T]:
    """Run ``make`` on the process's spare pool (made at first use with :func:`worker_limit`
    workers; a forked child makes its own). The lock is taken only to make the pool."""
    global _starter
    workers = _starter
    if workers is None or workers.pid != os.getpid():
        with _starter_lock:
            if _starter is None or _starter.pid != os.getpid():
                _starter = _Workers(worker_limit())
            workers = _starter
    return workers.submit(make)


def enabled() -> bool:
    """Whether spares are on (``HARNESS_GYM_WARM_SPARE``: 0/false/no/off turn them off)."""
    return os.environ.get(VARIABLE, "1").strip().lower() not in ("0", "false", "no", "off")


class WarmSpare(Generic[S]):
    """At most one sandbox made in the background for a key, and sandboxes closing in the background."""

    def __init__(self) -> None:
        self._pending: tuple[Hashable, Future[S]] | None = None
        self._closing: list[Future[None]] = []

    def prepare(
        self,
        key: Hashable,
        make: Callable[[], S],
        then_close: S | None = None,
        warm: Callable[[S], object] | None = None,
    ) -> None:
        """Make the spare for ``key`` in the background (a spare for another key is closed), then
        close ``then_close`` (the finished episode's sandbox) in the same job: one worker woken per
        reset, and the close never competes with the spare a reset right after may be waiting for.
        ``warm``: then wait for what the spare started to be ready (its tool server), after the
        close, before the spare is handed out (a reset that takes it meanwhile waits for it)."""
        self.discard()
        made: Future[S] = Future()

        def job() -> None:
            closed = False
            try:
                if made.set_running_or_notify_cancel():  # (not discarded meanwhile)
                    try:
                        spare = make()
                    except BaseException as exc:  # the reset that takes it makes its own
                        made.set_exception(exc)
                    else:
                        if then_close is not None:
                            closed = True
                            _close_quietly(then_close)
                        if warm is not None:
                            with contextlib.suppress(Exception):  # (best effort: a request finds out)
                                warm(spare)
                        made.set_result(spare)
            finally:
                if then_close is not None and not closed:
                    _close_quietly(then_close)

        self._pending = (key, made)
        self._closing = [future for future in self._closing if not future.done()]
        try:
            self._closing.append(_start_in_background(job))
        except RuntimeError:  # the interpreter is shutting down: no new background work
            self._pending = None
            if then_close is not None:
                _close_quietly(then_close)

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
        return all(future.done() for future in self._closing)

    def retire(self, sandbox: S) -> None:
        """Close ``sandbox`` in the background, on the spare pool: the caller starts no thread (64
        resets at once each waited for a thread of its own to start, among 64 others closing)."""
        self._closing = [future for future in self._closing if not future.done()]
        try:
            self._closing.append(_start_in_background(functools.partial(_close_quietly, sandbox)))
        except RuntimeError:  # the interpreter is shutting down: no new background work
            _close_quietly(sandbox)

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
        for future in self._closing:
            future.result()
        self._closing = []


def _close_quietly(sandbox: Closable) -> None:
    with contextlib.suppress(Exception):  # a close that fails leaves what the registry reclaims
        sandbox.close()
