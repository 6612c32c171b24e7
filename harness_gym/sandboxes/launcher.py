"""One long-lived thread per process starts every sandbox process.

``bwrap --die-with-parent`` (and any ``PR_SET_PDEATHSIG``) fires when the *thread* that forked the
process exits, not the process: a sandbox started by a ``ThreadPoolExecutor`` worker was SIGKILLed
when that pool shut down. Every sandbox launch is therefore handed to this module's thread, which
lives as long as the process (a forked child makes its own at its first launch), so a sandbox dies
with the process that owns it and with nothing shorter.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_requests: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] | None = None
_thread: threading.Thread | None = None
_owner_pid = 0


def _serve(requests: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]]) -> None:
    while True:
        function, future = requests.get()
        if not future.set_running_or_notify_cancel():
            continue
        try:
            future.set_result(function())
        except BaseException as exc:  # handed to the caller, which raises it in its own thread
            future.set_exception(exc)


def _queue() -> queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]]:
    """The launcher thread's request queue (the thread made at first use, again in a forked child)."""
    global _requests, _thread, _owner_pid
    requests = _requests
    if requests is not None and _owner_pid == os.getpid():  # no lock once made: spares launch at once
        return requests
    with _lock:
        if _requests is None or _owner_pid != os.getpid():
            _requests = queue.SimpleQueue()
            _thread = threading.Thread(target=_serve, args=(_requests,), name="harness-gym-launcher", daemon=True)
            _thread.start()
            _owner_pid = os.getpid()
        return _requests


def launch(function: Callable[[], T]) -> T:
    """Run ``function`` (a ``subprocess.Popen``, say) on the process's launcher thread and return its
    result, or raise its exception, in the caller's thread."""
    if threading.current_thread() is _thread and _owner_pid == os.getpid():
        return function()
    future: Future[T] = Future()
    _queue().put((function, future))
    return future.result()


def thread_id() -> int | None:
    """The launcher thread's native id in this process (None before the first launch), for tests."""
    return _thread.native_id if _thread is not None and _owner_pid == os.getpid() else None
