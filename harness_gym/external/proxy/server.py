"""The recording model proxy: one host-side HTTP/1.1 server, many rollouts, four wire APIs.

Each rollout gets a :class:`RolloutChannel` whose secret is the API key its CLI sends
(``x-api-key``, ``Authorization: Bearer``, ``x-goog-api-key`` or ``?key=``); an unknown secret gets
401. A request is translated to a canonical :class:`PolicyRequest`, answered by the rollout's policy
and rendered back in the CLI's dialect, streamed (SSE, chunked) or not; the request and the response
are recorded verbatim. A sandbox reaches it only through its own port: :meth:`ModelProxy.serve_sandbox`
serves a listening socket that :mod:`harness_gym.external.forwarder` opened inside the sandbox's
network namespace (the sandbox itself keeps no network, and nothing of the proxy runs in it). The
proxy may also listen on a private unix socket (mode 0o600: host-side tools) or on loopback TCP
(``port=``: tests, benchmarks, CLIs run outside a sandbox).

Every connection must send a complete request head (request line and headers) within
``head_deadline_s`` of being accepted or of its last answer (keep-alive), or it is closed; when
every slot of a server is taken, the connection that has waited longest for a head (never-served
ones first) is closed to make room. So idle or trickling connections cannot hold the slots. A
request's body must then arrive within ``body_deadline_s`` of its head (408, and the connection is
closed): a body trickled a byte at a time would hold the handler and its rollout's body lock.

Standard library (``http.server``; orjson decodes and encodes JSON where it is installed): about
1 ms a request over a direct backend, measured by ``benchmarks/proxy_overhead.py``, and no
framework is needed for five routes.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import socket
import socketserver
import stat
import threading
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import ModuleType, TracebackType
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from harness_gym.external.policies import Policy
from harness_gym.external.proxy import chat_completions, gemini
from harness_gym.external.proxy.masking import ToolOutputMasking
from harness_gym.external.proxy.recording import DIALECTS, ProxyRecord, RolloutChannel
from harness_gym.external.proxy.wire import DialectError, loads

MAX_BODY = 64 * 1024 * 1024
MAX_UNAUTHENTICATED = 64 * 1024  # the most body bytes read (and dropped) for a refused unknown key
MAX_CONNECTIONS = 256
MAX_CONNECTIONS_PER_ROLLOUT = 32  # one rollout cannot hold every slot of a proxy shared by many
MAX_CONNECTIONS_PER_SANDBOX = 16  # connections one sandbox's port serves at once
HEAD_DEADLINE_S = 10.0  # a request line and headers must arrive within this (also between keep-alive requests)
BODY_DEADLINE_S = 60.0  # a body must arrive within this of its head (a 64 MiB body over loopback: < 1 s)
EVICTION_WAIT_S = 2.0  # how long a new connection waits for the slot of the one closed to make room
POLL_INTERVAL_S = 0.25  # how often a server looks for connections past their head deadline
_CHUNK_SIZE = re.compile(rb"[0-9a-fA-F]{1,8}")
_SECRET_HEADERS = ("x-api-key", "authorization", "x-goog-api-key")


class ProxyError(Exception):
    """An HTTP error answer: status and message, rendered in the request's dialect."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _decode_body(raw: bytes, encoding: str) -> bytes:
    """Undo ``Content-Encoding`` (Codex compresses its requests with zstd)."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return raw
    try:
        if encoding in ("gzip", "deflate"):
            # bounded: a 64 KiB gzip of zeros inflates to 64 MiB, a 64 MiB one to 64 GiB
            inflater = zlib.decompressobj(wbits=31 if encoding == "gzip" else 15)
            data = inflater.decompress(raw, MAX_BODY + 1)
            if len(data) > MAX_BODY or inflater.unconsumed_tail:
                raise ProxyError(413, f"request body over {MAX_BODY} bytes once decompressed")
            return data
        if encoding == "zstd":
            try:
                import zstandard
            except ImportError as exc:
                raise ProxyError(415, "zstd request bodies need `pip install harness-gym[external]`") from exc
            with zstandard.ZstdDecompressor().stream_reader(raw) as reader:
                data = reader.read(MAX_BODY + 1)
            if len(data) > MAX_BODY:
                raise ProxyError(413, f"request body over {MAX_BODY} bytes once decompressed")
            return data
    except ProxyError:
        raise
    except Exception as exc:  # a corrupt body is the client's error, never a crash
        raise ProxyError(400, f"cannot decode a {encoding} body: {exc}") from exc
    raise ProxyError(415, f"unsupported Content-Encoding {encoding!r}")


def _route(method: str, path: str) -> tuple[str, str, str | None]:
    """(dialect, action, model) of a request path; ProxyError 404/405 where none fits."""
    if path.startswith("/v1beta/") or path.startswith("/v1alpha/") or ":" in path:
        rest = path.split("/", 2)[2] if path.count("/") >= 2 else ""
        if rest in ("models", "models/"):
            return "gemini", "models", None
        if rest.startswith("models/"):
            name, _, verb = rest[len("models/") :].partition(":")
            if not verb:
                return "gemini", "model", unquote(name)
            if verb in ("generateContent", "streamGenerateContent", "countTokens") and method == "POST":
                return "gemini", verb, unquote(name)
        raise ProxyError(404, f"no route {method} {path}")
    short = path[3:] if path.startswith("/v1/") else path
    if short in ("/models", "/models/") or short.startswith("/models/"):
        if method != "GET":
            raise ProxyError(405, f"{path} takes GET")
        return "models", "models", None
    routes = {
        "/messages": ("anthropic", "generate"),
        "/messages/count_tokens": ("anthropic", "count_tokens"),
        "/chat/completions": ("chat", "generate"),
        "/responses": ("responses", "generate"),
    }
    if short not in routes:
        raise ProxyError(404, f"no route {method} {path}")
    if method != "POST":
        raise ProxyError(
            405, f"{path} takes POST" + (" (no WebSocket transport here)" if short == "/responses" else "")
        )
    dialect, action = routes[short]
    return dialect, action, None


class ModelProxy:
    """``with ModelProxy(socket_path) as proxy: channel = proxy.open_rollout(policy)``."""

    DIALECTS: Mapping[str, ModuleType] = DIALECTS

    def __init__(
        self,
        socket_path: Path | str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        max_connections_per_rollout: int | None = MAX_CONNECTIONS_PER_ROLLOUT,
        head_deadline_s: float = HEAD_DEADLINE_S,
        body_deadline_s: float = BODY_DEADLINE_S,
    ) -> None:
        """``socket_path`` or ``port``: where host-side clients connect (neither: only sandboxes'
        ports, :meth:`serve_sandbox`). ``max_connections_per_rollout``: open connections one secret
        may hold (None: no cap); a connection past it is answered 503 and closed.
        ``head_deadline_s``: the time a connection has to send each request's head;
        ``body_deadline_s``: the time it then has to send that request's body."""
        if socket_path is not None and port is not None:
            raise ValueError("give a socket_path or a port, not both")
        for name, value in (("head_deadline_s", head_deadline_s), ("body_deadline_s", body_deadline_s)):
            if not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        self.max_connections_per_rollout = max_connections_per_rollout
        self.head_deadline_s = float(head_deadline_s)
        self.body_deadline_s = float(body_deadline_s)
        self.socket_path = Path(socket_path) if socket_path is not None else None
        self.host = host
        self.port = port
        self.channels: dict[str, RolloutChannel] = {}
        self.unauthorized = 0
        self._lock = threading.Lock()
        self._server: _Limited | None = None
        self._thread: threading.Thread | None = None
        self._ports: set[SandboxPort] = set()

    # lifecycle ---------------------------------------------------------------------------------
    def start(self) -> None:
        handler = _handler(self)
        server: _Limited
        if self.socket_path is not None:
            path = self.socket_path
            if len(os.fsencode(path)) > 107:
                raise ValueError(f"unix socket path longer than 107 bytes: {path}")
            if not path.parent.exists():
                path.parent.mkdir(parents=True, mode=0o700)  # no sandbox reaches it: private
            if path.is_symlink() or (path.exists() and not stat.S_ISSOCK(path.lstat().st_mode)):
                raise ValueError(f"{path} exists and is not a socket")
            if path.exists():
                if _answers(path):
                    raise ValueError(f"{path} is the socket of a running proxy")
                path.unlink()  # a stale socket from a dead proxy
            server = _UnixServer(str(path), handler, self._deadlines)
            os.chmod(path, 0o600)
        elif self.port is not None:
            server = _TCPServer((self.host, self.port or 0), handler, self._deadlines)
            self.port = int(server.server_address[1])
        else:
            return  # only sandboxes' ports
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": POLL_INTERVAL_S}, name="model-proxy", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop serving: the socket, every sandbox's port, and every open connection."""
        with self._lock:
            ports = list(self._ports)
        for port in ports:
            port.close()
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self.socket_path is not None and self.socket_path.exists():
            self.socket_path.unlink()

    def serve_sandbox(
        self,
        listener: socket.socket,
        max_connections: int = MAX_CONNECTIONS_PER_SANDBOX,
        rollout: RolloutChannel | None = None,
    ) -> SandboxPort:
        """Serve the CLI's connections on ``listener`` (a listening socket opened inside a sandbox's
        network namespace, :func:`harness_gym.external.forwarder.listen_in_sandbox`) in this process's
        threads, at most ``max_connections`` at once; the proxy now owns the socket. ``close()`` the
        result when the episode ends (closing the proxy closes it too). ``rollout``: the one rollout
        this port serves; any other secret sent on it gets 401, so an agent that learned another
        sandbox's key could not spend that rollout's budget or write into its records."""
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        server = _SandboxServer(listener, _handler(self), self._deadlines, max_connections)
        server.rollout = rollout
        port = SandboxPort(self, server)
        with self._lock:
            self._ports.add(port)
        port.start()
        return port

    @property
    def _deadlines(self) -> tuple[float, float]:
        return (self.head_deadline_s, self.body_deadline_s)

    def _drop_port(self, port: SandboxPort) -> None:
        with self._lock:
            self._ports.discard(port)

    def __enter__(self) -> ModelProxy:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @property
    def url(self) -> str:
        """The TCP base URL (``port=`` proxies only)."""
        if self.port is None:
            raise ValueError(
                "only a port= proxy has a URL (a sandbox reaches the proxy through its own port, serve_sandbox)"
            )
        return f"http://{self.host}:{self.port}"

    # rollouts ----------------------------------------------------------------------------------
    def open_rollout(
        self,
        policy: Policy,
        *,
        max_requests: int | None = None,
        max_tokens: int | None = None,
        models: Sequence[str] = (),
        renamed_calls: Sequence[str] = (),
        masking: ToolOutputMasking | None = None,
    ) -> RolloutChannel:
        """A channel with a fresh secret; ``models`` are what the model-list routes answer;
        ``renamed_calls``: names the CLI gives a refused call in its history (not a forged call);
        ``masking``: the CLI's own rewrite of old tool results (its file's ``masked_results``)."""
        channel = RolloutChannel(
            policy,
            max_requests=max_requests,
            max_tokens=max_tokens,
            models=tuple(models),
            on_close=self._forget,
            renamed_calls=tuple(renamed_calls),
            masking=masking,
        )
        with self._lock:
            self.channels[channel.secret] = channel
        return channel

    def _forget(self, channel: RolloutChannel) -> None:
        with self._lock:
            self.channels.pop(channel.secret, None)

    def channel_for(self, headers: Mapping[str, str], query: Mapping[str, str]) -> RolloutChannel | None:
        candidates = [headers.get("x-api-key"), headers.get("x-goog-api-key"), query.get("key")]
        auth = headers.get("authorization") or ""
        if auth.lower().startswith("bearer "):
            candidates.append(auth[7:].strip())
        with self._lock:
            for secret in candidates:
                if secret and secret in self.channels:
                    return self.channels[secret]
        return None


class SandboxPort:
    """One sandbox's port served by the proxy (:meth:`ModelProxy.serve_sandbox`)."""

    def __init__(self, proxy: ModelProxy, server: _SandboxServer) -> None:
        self.proxy, self.server = proxy, server
        self.address = server.server_address
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": POLL_INTERVAL_S},
            name="model-proxy-sandbox",
            daemon=True,
        )
        self._closed = False

    def start(self) -> None:
        self._thread.start()

    @property
    def open_connections(self) -> int:
        with self.server.open_lock:
            return len(self.server.open)

    def close(self) -> None:
        """Stop accepting, close the listening socket and every connection of this sandbox. Safe twice."""
        if self._closed:
            return
        self._closed = True
        self.server.stop()
        self.proxy._drop_port(self)


class _Limited(socketserver.ThreadingMixIn):
    """Bounds concurrent connections and the time each may take to send a request head: a
    connection past the bound closes the one that has waited longest for a head (never-served ones
    first) or, when none is waiting, is answered 503 at once."""

    daemon_threads = True
    request_queue_size = MAX_CONNECTIONS  # a burst of connects queues instead of failing with EAGAIN

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hangs up mid-answer is its own failure; the proxy serves on

    def __init__(self, deadlines: tuple[float, float], max_connections: int = MAX_CONNECTIONS) -> None:
        self.head_deadline_s, self.body_deadline_s = deadlines
        self.rollout: RolloutChannel | None = None  # the only rollout served here (a sandbox's port)
        self.bodies: dict[Any, float] = {}  # connections reading a request's body -> since when
        self.late: set[Any] = set()  # connections whose body missed its deadline (answered 408)
        self.slots = threading.BoundedSemaphore(max_connections)
        self.open: set[Any] = set()  # accepted connections, shut down by ``end_connections``
        self.open_lock = threading.Lock()
        # connections waiting for a request head -> (served one before, since when): deadline and eviction
        self.waiting: dict[Any, tuple[bool, float]] = {}

    def stop(self) -> None:
        self.shutdown()  # type: ignore[attr-defined]
        self.server_close()
        self.end_connections()

    def awaiting_head(self, connection: Any, served: bool) -> None:
        with self.open_lock:
            if connection in self.open:
                self.waiting[connection] = (served, time.monotonic())

    def got_head(self, connection: Any) -> None:
        with self.open_lock:
            self.waiting.pop(connection, None)

    def awaiting_body(self, connection: Any) -> None:
        with self.open_lock:
            if connection in self.open:
                self.bodies[connection] = time.monotonic()

    def got_body(self, connection: Any) -> bool:
        """The body phase is over; whether it missed its deadline."""
        with self.open_lock:
            self.bodies.pop(connection, None)
            late = connection in self.late
            self.late.discard(connection)
            return late

    def service_actions(self) -> None:
        """Between accepts (every poll interval): close the connections past their head deadline, and
        end the reading side of those past their body deadline (their handler reads EOF, answers 408)."""
        now = time.monotonic()
        with self.open_lock:
            late = [c for c, (_, since) in self.waiting.items() if since < now - self.head_deadline_s]
            for connection in late:
                del self.waiting[connection]
            slow = [c for c, since in self.bodies.items() if since < now - self.body_deadline_s]
            for connection in slow:
                del self.bodies[connection]
                self.late.add(connection)
        for connection in late:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        for connection in slow:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RD)

    def _evict(self) -> bool:
        """Close the connection that has waited longest for a head (never served before first)."""
        with self.open_lock:
            if not self.waiting:
                return False
            victim = min(self.waiting, key=self.waiting.__getitem__)
            del self.waiting[victim]
        with contextlib.suppress(OSError):
            victim.shutdown(socket.SHUT_RDWR)
        return True

    def end_connections(self) -> None:
        """Shut every accepted connection down: their handler threads read EOF and end (an idle or
        trickling agent connection would otherwise hold a host thread for minutes after the episode)."""
        with self.open_lock:
            connections = list(self.open)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def _refuse(self, request: Any) -> None:
        try:
            request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        except OSError:
            pass
        finally:
            self.shutdown_request(request)  # type: ignore[attr-defined]

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.slots.acquire(blocking=False) and not (
            self._evict() and self.slots.acquire(timeout=EVICTION_WAIT_S)
        ):
            self._refuse(request)
            return
        if getattr(request, "family", None) in (socket.AF_INET, socket.AF_INET6):
            with contextlib.suppress(OSError):  # answers are one write each: send them at once
                request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        with self.open_lock:  # in the accept thread: every connection is known once shutdown() returns
            self.open.add(request)
            self.waiting[request] = (False, time.monotonic())  # its first head is due from now
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self.open_lock:
                self.open.discard(request)
                self.waiting.pop(request, None)
                self.bodies.pop(request, None)
                self.late.discard(request)
            self.slots.release()


class _UnixServer(_Limited, socketserver.UnixStreamServer):
    def __init__(self, path: str, handler: type[BaseHTTPRequestHandler], deadlines: tuple[float, float]) -> None:
        _Limited.__init__(self, deadlines)
        socketserver.UnixStreamServer.__init__(self, path, handler)


class _TCPServer(_Limited, socketserver.TCPServer):
    allow_reuse_address = True

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], deadlines: tuple[float, float]
    ) -> None:
        _Limited.__init__(self, deadlines)
        socketserver.TCPServer.__init__(self, address, handler)


class _SandboxServer(_Limited, socketserver.TCPServer):
    """Serves a listening socket made elsewhere (inside a sandbox's network namespace)."""

    def __init__(
        self,
        listener: socket.socket,
        handler: type[BaseHTTPRequestHandler],
        deadlines: tuple[float, float],
        max_connections: int,
    ) -> None:
        _Limited.__init__(self, deadlines, max_connections)
        socketserver.TCPServer.__init__(self, listener.getsockname(), handler, bind_and_activate=False)
        self.socket.close()
        self.socket = listener


def _handler(proxy: ModelProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(_ProxyHandler):
        pass

    Handler.proxy = proxy
    return Handler


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "harness-gym-proxy"
    timeout = 300  # an idle keep-alive connection is closed after this
    proxy: ModelProxy
    _outgoing: tuple[int, list[tuple[str, str]], bytes, bool]
    _consumed: bool
    _bound: RolloutChannel | None = None  # the rollout this connection counts against

    server: _Limited  # type: ignore[assignment]
    _served = False  # whether this connection was answered before (keep-alive)
    raw_requestline: bytes  # set by BaseHTTPRequestHandler.handle_one_request

    def handle_one_request(self) -> None:
        # the head deadline runs from now: from the accept, or from the last answer (keep-alive)
        if self._served:
            self.server.awaiting_head(self.connection, True)
        self._served = True
        super().handle_one_request()

    def parse_request(self) -> bool:
        """The request line and the headers, as ``BaseHTTPRequestHandler.parse_request`` reads them
        but without the ``email`` parser (a fifth of the proxy's own time per request)."""
        self.command = ""
        self.request_version = self.default_request_version
        self.close_connection = True
        self.requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        words = self.requestline.split()
        version = words[2] if len(words) == 3 else ""
        numbers = version[5:].split(".") if version.startswith("HTTP/") else []
        if len(numbers) != 2 or not all(n.isdigit() and len(n) <= 10 for n in numbers):
            self.request_version = "HTTP/1.0"  # an answer with a status line, then the connection closes
            self.send_error(400, f"Bad request {self.requestline[:200]!r}")
            return False
        if int(numbers[0]) >= 2:
            self.request_version = "HTTP/1.0"
            self.send_error(505, f"Invalid HTTP version ({version})")
            return False
        self.command, self.path, self.request_version = words[0], words[1], version
        if version >= "HTTP/1.1":
            self.close_connection = False
        if self.path.startswith("//"):
            self.path = "/" + self.path.lstrip("/")  # gh-87389: no open redirect through //host
        fields: list[tuple[str, str]] = []
        size = 0
        while True:
            line = self.rfile.readline(_MAX_HEADER_LINE + 1)
            size += len(line)
            if len(line) > _MAX_HEADER_LINE:
                self.send_error(431, "Line too long")
                return False
            if size > _MAX_HEAD_BYTES:  # folded lines are not fields: without this, one grew without bound
                self.send_error(431, f"Request header fields over {_MAX_HEAD_BYTES} bytes")
                return False
            if line in (b"\r\n", b"\n", b""):
                break
            if len(fields) >= _MAX_HEADERS:
                self.send_error(431, "Too many headers")
                return False
            name, _, value = line.decode("iso-8859-1").partition(":")
            if line[:1] in (b" ", b"\t") and fields:  # an obsolete folded continuation line
                fields[-1] = (fields[-1][0], fields[-1][1] + " " + line.decode("iso-8859-1").strip())
            else:
                fields.append((name.strip(), value.strip()))
        self.headers = _Headers(fields)  # type: ignore[assignment]
        self.server.got_head(self.connection)
        connection = self.headers.get("Connection", "").lower()
        if connection == "close":
            self.close_connection = True
        elif connection == "keep-alive" and version >= "HTTP/1.1":
            self.close_connection = False
        if self.headers.get("Expect", "").lower() == "100-continue" and version >= "HTTP/1.1":
            return self.handle_expect_100()
        return True

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            if self._bound is not None:
                self._bound.disconnect()
                self._bound = None

    def log_message(self, format: str, *args: Any) -> None:
        pass  # records are the log; the unix socket has no client address to print

    def address_string(self) -> str:
        return "unix" if not self.client_address else str(self.client_address[0])

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    # -------------------------------------------------------------------------------------------
    def _serve(self, method: str) -> None:
        started = time.time()
        split = urlsplit(self.path)
        query = dict(parse_qsl(split.query))
        headers = {k.lower(): v for k, v in self.headers.items()}
        dialect = "chat"
        self._consumed = False  # until the body is read, its bytes are still in the connection
        channel: RolloutChannel | None = None
        record = ProxyRecord(dialect, split.path, None, "", 0, started=started, headers=_redacted(headers))
        self.server.awaiting_body(self.connection)  # the body deadline runs from the head
        try:
            if headers.get("upgrade", "").lower() == "websocket":
                raise ProxyError(426, "WebSocket transport is not served here: use HTTP POST with SSE")
            dialect, action, model = _route(method, split.path)
            record.dialect = dialect if action not in ("models", "model") else "models"
            channel = self.proxy.channel_for(headers, query)
            if channel is not None and self.server.rollout not in (None, channel):
                channel = None  # another sandbox's secret, sent on this sandbox's port
            if channel is None:
                with self.proxy._lock:
                    self.proxy.unauthorized += 1
                raise ProxyError(401, "unknown API key: this proxy serves only the rollouts it opened")
            self._bind(channel)
            body = None
            # one body read at a time per rollout: parallel requests all passing admit() before any body
            # was counted would pin (connections x MAX_BODY) bytes past the recorded-bytes budget
            with channel.body_lock if method == "POST" else contextlib.nullcontext():
                refused = channel.admit()  # before the body: a refused request's body is never parsed
                if refused:
                    raise ProxyError(429, f"harness-gym budget exceeded: {refused}")
                if method == "POST":
                    record.raw, body = self._read_body(headers)
                    channel.recorded(len(record.raw))
            self.server.got_body(self.connection)  # the policy's time is not the client's
            self._answer(channel, record, dialect, action, model, body, query)
        except ProxyError as exc:
            record.status = exc.status
            record.error = exc.message
            payload = self._module(dialect).error(exc.status, exc.message)
            # only a rollout's own client may make the proxy read (and drop) a long body
            unusable = not self._consumed and not self._drain(headers, MAX_BODY if channel else MAX_UNAUTHENTICATED)
            unusable = self.server.got_body(self.connection) or unusable  # a drain past the deadline: EOF
            close = unusable or exc.status in (400, 408, 413, 415, 426, 503)
            record.response = self._send_json(exc.status, payload, close=close)
        except DialectError as exc:
            record.status, record.error = 400, str(exc)
            record.response = self._send_json(400, self._module(dialect).error(400, str(exc)))
        record.ended = time.time()
        if channel is not None:
            channel.add(record)  # complete before the client can read the answer
        try:
            self._write_answer()
        except (BrokenPipeError, ConnectionResetError) as exc:
            record.error = f"client disconnected: {exc}"
            self.close_connection = True

    def _bind(self, channel: RolloutChannel) -> None:
        """Count this connection against its rollout's cap (once per connection and secret)."""
        if self._bound is channel:
            return
        limit = self.proxy.max_connections_per_rollout
        if not channel.connect(limit):
            raise ProxyError(503, f"this rollout already holds {limit} open connections to the proxy")
        if self._bound is not None:
            self._bound.disconnect()
        self._bound = channel

    def _module(self, dialect: str) -> ModuleType:
        return ModelProxy.DIALECTS.get(dialect, chat_completions)

    def _drain(self, headers: Mapping[str, str], limit: int) -> bool:
        """Read and drop the body of a refused request (so the connection stays usable and the client
        can finish sending); False when it cannot be (chunked, too long, bad length)."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return False
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            return False
        if not 0 <= length <= limit:
            return False
        self.rfile.read(length)
        return True

    def _read_body(self, headers: Mapping[str, str]) -> tuple[bytes, dict[str, Any]]:
        """The decoded body's bytes (what the record keeps) and its parsed object (dropped after the answer)."""
        if "chunked" in headers.get("transfer-encoding", "").lower():
            raw = self._read_chunked()
        else:
            try:
                length = int(headers.get("content-length", "0"))
            except ValueError as exc:
                raise ProxyError(400, "bad Content-Length") from exc
            if length < 0 or length > MAX_BODY:
                raise ProxyError(413, f"request body over {MAX_BODY} bytes")
            raw = self.rfile.read(length)
        self._consumed = True
        if self.server.got_body(self.connection):
            raise ProxyError(408, f"the request body did not arrive within {self.server.body_deadline_s:g} s")
        raw = _decode_body(raw, headers.get("content-encoding", ""))
        try:
            body = loads(raw)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: nested too deep
            raise ProxyError(400, f"the request body is not JSON: {type(exc).__name__}: {exc}") from exc
        if not isinstance(body, dict):
            raise ProxyError(400, "the request body must be a JSON object")
        return raw, body

    def _read_chunked(self) -> bytes:
        parts: list[bytes] = []
        total = 0
        while True:
            line = self.rfile.readline(1024)
            if not line and self.server.got_body(self.connection):
                raise ProxyError(408, f"the request body did not arrive within {self.server.body_deadline_s:g} s")
            digits = line.split(b";")[0].strip()
            # int(..., 16) takes "-1", "+0x10", "1_0": a negative size would read to EOF unbounded
            if not _CHUNK_SIZE.fullmatch(digits):
                raise ProxyError(400, "bad chunked request body: a chunk size is 1-8 hex digits")
            size = int(digits, 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                return b"".join(parts)
            total += size
            if total > MAX_BODY:
                raise ProxyError(413, f"request body over {MAX_BODY} bytes")
            parts.append(self.rfile.read(size))
            self.rfile.readline(8)

    def _answer(
        self,
        channel: RolloutChannel,
        record: ProxyRecord,
        dialect: str,
        action: str,
        model: str | None,
        body: dict[str, Any] | None,
        query: Mapping[str, str],
    ) -> None:
        if action in ("models", "model"):
            payload = gemini.models(channel.models, model) if dialect == "gemini" else _models(channel.models)
            record.status, record.response = 200, self._send_json(200, payload)
            return
        assert body is not None
        module = ModelProxy.DIALECTS[dialect]
        try:  # translating recurses into schemas: a body nested too deep is the client's error
            if action in ("count_tokens", "countTokens"):
                record.status, record.response = 200, self._send_json(200, module.count_tokens(body))
                return
            request = channel.tag(module.parse(body, model))
        except RecursionError as exc:
            raise DialectError("the request body is nested too deep to translate") from exc
        record.model, record.side = model, request.side
        record.policy_request = request  # kept as the body's bytes only (parsed again on demand)
        # a forged history is flagged, not answered differently: the agent learns nothing
        channel.verify(request, body, record)
        try:
            with channel.policy_lock:
                reply = channel.policy.complete(request)
        except Exception as exc:  # the policy failed: a recorded 500, the rollout is an error
            raise ProxyError(500, f"the policy failed: {type(exc).__name__}: {exc}") from exc
        record.policy_reply = reply
        channel.spent(reply)
        name = model or str(body.get("model") or request.model)
        if dialect == "gemini" and action == "streamGenerateContent" and query.get("alt") != "sse":
            record.status, record.response = 200, self._send_json(200, [module.render(reply, body, name)])
        elif module.wants_stream(body, query) or action == "streamGenerateContent":
            record.status, record.response = 200, self._send_stream(module.render_stream(reply, body, name))
        else:
            record.status, record.response = 200, self._send_json(200, module.render(reply, body, name))

    def _send_json(self, status: int, payload: Any, close: bool = False) -> str:
        """Prepare a JSON answer (written once the record is complete, see ``_serve``)."""
        text = json.dumps(payload, ensure_ascii=False)
        data = text.encode()
        headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
        if close:
            headers.append(("Connection", "close"))
        self._outgoing = (status, headers, data, close)
        return text

    def _send_stream(self, events: Iterable[bytes]) -> str:
        """Prepare an SSE answer, one HTTP chunk per event: the reply is complete before the first
        byte goes out, so one write sends it all."""
        sent = list(events)
        framed = b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in sent) + b"0\r\n\r\n"
        headers = [
            ("Content-Type", "text/event-stream"),
            ("Cache-Control", "no-cache"),
            ("Transfer-Encoding", "chunked"),
        ]
        self._outgoing = (200, headers, framed, False)
        return b"".join(sent).decode()

    def _write_answer(self) -> None:
        """The status line, headers and body in one write: one syscall and one wake-up of the client
        (split writes on TCP also meet Nagle's algorithm and the client's delayed ACK)."""
        status, headers, data, close = self._outgoing
        phrase = self.responses[status][0] if status in self.responses else ""
        head = [f"HTTP/1.1 {status} {phrase}", f"Server: {self.server_version}", f"Date: {_date()}"]
        head += [f"{key}: {value}" for key, value in headers]
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)
        if close:
            self.close_connection = True


_date_now: tuple[int, str] = (0, "")  # the second and its Date header value (rebound whole: thread-safe)


def _date() -> str:
    """The ``Date`` header's value (``BaseHTTPRequestHandler.date_time_string``), made once a second."""
    global _date_now
    now = int(time.time())
    if _date_now[0] != now:
        _date_now = (now, formatdate(now, usegmt=True))
    return _date_now[1]


_MAX_HEADER_LINE = 65536  # as http.client
_MAX_HEADERS = 100
_MAX_HEAD_BYTES = 128 * 1024  # all header lines of one request (CLIs send ~2 kB; each record keeps them)


class _Headers:
    """A request's header fields: case-insensitive ``get`` (the first of a name) and ``items``."""

    def __init__(self, fields: list[tuple[str, str]]) -> None:
        self._fields = fields
        self._first: dict[str, str] = {}
        for name, value in fields:
            self._first.setdefault(name.lower(), value)

    def get(self, name: str, default: str | None = None) -> str | None:
        return self._first.get(name.lower(), default)

    def __getitem__(self, name: str) -> str | None:
        return self._first.get(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._first

    def items(self) -> list[tuple[str, str]]:
        return list(self._fields)


def _answers(path: Path) -> bool:
    """Whether something listens on the unix socket at ``path``."""
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(2)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    finally:
        probe.close()
    return True


def _redacted(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: ("<redacted>" if k in _SECRET_HEADERS else v) for k, v in headers.items()}


def _models(models: Sequence[str]) -> dict[str, Any]:
    """One list both OpenAI (``object``, ``owned_by``) and Anthropic (``type``, ``display_name``) clients read."""
    names = list(models) or ["harness-gym"]
    data = [
        {
            "id": m,
            "object": "model",
            "type": "model",
            "created": 0,
            "created_at": "1970-01-01T00:00:00Z",
            "display_name": m,
            "owned_by": "harness-gym",
        }
        for m in names
    ]
    return {"object": "list", "data": data, "has_more": False, "first_id": names[0], "last_id": names[-1]}


class UnixHTTPConnection(http.client.HTTPConnection):
    """``http.client`` over a unix socket: tests and host-side tools talking to a socket proxy."""

    def __init__(self, socket_path: Path | str, timeout: float = 60.0) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = str(socket_path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.socket_path)
