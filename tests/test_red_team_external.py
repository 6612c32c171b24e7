"""Red team over the real agent CLIs path (issue 26): each test plays one attack on the recording
proxy or a real CLI episode and asserts it is contained. A test marked ``xfail(strict=True)`` is an
attack that still works; its reason names the effect and a suggested fix."""

from __future__ import annotations

import gzip
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import requires_bwrap

from harness_gym.external.catalog import load_cli
from harness_gym.external.install import installed
from harness_gym.external.policies import PolicyReply, ScriptedPolicy
from harness_gym.external.proxy import ModelProxy
from harness_gym.external.proxy.server import MAX_BODY, MAX_CONNECTIONS
from harness_gym.external.runner import run_external_episode
from harness_gym.tasks import load_tasks
from harness_gym.tasks.base import Task

TASK_ID = "workspace-sort-unique"


@pytest.fixture
def proxy() -> Iterator[ModelProxy]:
    with ModelProxy(port=0) as running:
        yield running


def _connect(proxy: ModelProxy, timeout: float = 10.0) -> socket.socket:
    return socket.create_connection((proxy.host, int(proxy.port or 0)), timeout=timeout)


def _status(sock: socket.socket) -> int:
    """The status code of the first answer on ``sock`` (0 when the proxy closed without one)."""
    line = sock.makefile("rb").readline()
    return int(line.split()[1]) if line.startswith(b"HTTP/") else 0


def _post_head(secret: str, extra: str) -> bytes:
    return (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {secret}\r\n"
        f"Content-Type: application/json\r\n{extra}\r\n"
    ).encode()


# ------------------------------------------------------------------------------ proxy, host memory


@pytest.mark.xfail(
    strict=True,
    reason=(
        "gzip/deflate bomb: _decode_body calls gzip.decompress/zlib.decompress with no output bound (only zstd "
        "is bounded), so a rollout sending a 64 MiB body of compressed zeros makes the host process (the bench, "
        "every other rollout) allocate ~64 GiB and die of OOM. Fix: decompress with zlib.decompressobj("
        "wbits=31/15).decompress(raw, MAX_BODY + 1) and answer 413 when unconsumed_tail is non-empty."
    ),
)
def test_a_gzip_bomb_is_refused_before_it_is_inflated(proxy: ModelProxy) -> None:
    channel = proxy.open_rollout(ScriptedPolicy([]))
    bomb = gzip.compress(b"\0" * (MAX_BODY + 1024 * 1024), compresslevel=9)  # ~64 KiB on the wire
    assert len(bomb) < MAX_BODY // 100
    with _connect(proxy) as sock:
        sock.sendall(_post_head(channel.secret, f"Content-Encoding: gzip\r\nContent-Length: {len(bomb)}\r\n") + bomb)
        status = _status(sock)
    # today: 400 "not JSON" after inflating 65 MiB in host memory (a 64 MiB bomb inflates 64 GiB)
    assert status == 413


@pytest.mark.xfail(
    strict=True,
    reason=(
        "chunked body with a negative chunk size: _read_chunked parses '-1' with int(..., 16), then "
        "rfile.read(-1) reads until EOF with no bound (host memory) and the handler hangs as long as the "
        "client keeps sending (total also goes down, defeating MAX_BODY). Fix: reject any chunk-size that is "
        "not plain hex digits (re.fullmatch(rb'[0-9a-fA-F]{1,8}', ...)) with 400 and close."
    ),
)
def test_a_negative_chunk_size_is_refused_at_once(proxy: ModelProxy) -> None:
    channel = proxy.open_rollout(ScriptedPolicy([]))
    with _connect(proxy, timeout=5) as sock:
        sock.sendall(_post_head(channel.secret, "Transfer-Encoding: chunked\r\n") + b"-1\r\n" + b"x" * 4096)
        try:
            status = _status(sock)
        except TimeoutError:
            status = -1  # the handler is still reading, until this client closes
    assert status == 400


# ------------------------------------------------------------------------------ proxy, other rollouts


@pytest.mark.xfail(
    strict=True,
    reason=(
        "connection-slot exhaustion on a shared proxy (run_external_episode(proxy=...), the documented "
        "multiplexed mode): a slot is taken at accept, before any byte or the secret is read, and an idle "
        "handler holds it for up to 300 s (per read: a byte every 299 s holds it forever). One sandbox "
        "opening MAX_CONNECTIONS idle connections to the bind-mounted socket makes every other rollout get "
        "503. Fix: a per-request header deadline (e.g. 10 s for the request line and headers), per-secret "
        "connection quotas counted after auth, and unauthenticated connections closed first."
    ),
)
def test_idle_connections_of_one_rollout_do_not_lock_out_another(proxy: ModelProxy) -> None:
    victim = proxy.open_rollout(ScriptedPolicy([], final="hello"))
    hogs = [_connect(proxy) for _ in range(MAX_CONNECTIONS)]
    try:
        time.sleep(1.0)  # let the server accept them all
        body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
        with _connect(proxy) as sock:
            sock.sendall(_post_head(victim.secret, f"Content-Length: {len(body)}\r\n") + body)
            status = _status(sock)
    finally:
        for hog in hogs:
            hog.close()
    assert status == 200
