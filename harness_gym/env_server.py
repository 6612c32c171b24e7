"""harness-gym environments served over OpenEnv's HTTP/WebSocket protocol (``harness-gym serve-env``).

Rollouts can then run where the sandboxes are (CPU nodes) while generation runs elsewhere: any
OpenEnv client, the unmodified ``openenv.core.GenericEnvClient`` included, drives an episode::

    from openenv.core import GenericEnvClient
    with GenericEnvClient(base_url="http://127.0.0.1:8000").sync() as env:
        result = env.reset(seed=0, task_id="workspace-organize-logs")
        result = env.step({"text": "<tool_call>...</tool_call>"})
        result.observation["messages"], result.reward, result.done

The protocol layer is openenv-core's own (``HTTPEnvServer``): one environment per WebSocket
session, a concurrency limit, idle sessions reaped. This module adds what it leaves out: an optional
bearer token on every route but ``/health``, closing every session's sandbox when the server stops,
and observations that carry everything a client needs (OpenEnv does not send
``Observation.metadata``): the messages, the tool schemas, ``terminated``/``truncated`` and the
step's ``info``. The stateless HTTP ``/reset`` and ``/step`` routes are not served (an episode lives
in a sandbox, which needs a session); ``/health``, ``/schema``, ``/metadata`` and ``/ws`` are.

A client passes the token as ``Authorization: Bearer TOKEN``, or, since OpenEnv's client sets no
headers, in the URL (``http://token:TOKEN@host:port``), which WebSocket clients send as HTTP Basic
credentials whose password is the token.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import functools
import hmac
import ipaddress
import json
import logging
import socket
import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

try:
    import uvicorn
    from fastapi import FastAPI
    from openenv.core.env_server import Action, ConcurrencyConfig, Environment, HTTPEnvServer, Observation, State
    from openenv.core.env_server.types import EnvironmentMetadata, ServerMode
    from pydantic import Field
    from starlette.websockets import WebSocketDisconnect
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "harness-gym serve-env needs the [serve] extra and openenv-core: "
        "pip install 'harness-gym[serve]' && pip install --no-deps openenv-core==0.3.0"
    ) from exc

import gymnasium as gym

import harness_gym  # registers the environments; its version names the server

logger = logging.getLogger(__name__)


class _DeniedHandshakeFilter(logging.Filter):
    """uvicorn's WebSocket implementation sends a handshake denial (an HTTP response instead of the
    upgrade) correctly, then logs it as an error; a denial is this server's answer, not a fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing handshake" not in record.getMessage()


logging.getLogger("uvicorn.error").addFilter(_DeniedHandshakeFilter())
UNAUTHENTICATED_PATHS = frozenset({"/health"})


class HarnessAction(Action):
    """One assistant turn: its text (tool calls inside, in the harness's format), or an
    OpenAI-style assistant message with ``tool_calls``."""

    text: str | None = Field(default=None, description="the assistant's reply as text")
    message: dict[str, Any] | None = Field(default=None, description="an OpenAI-style assistant message")

    def as_gym_action(self) -> str | dict[str, Any]:
        """The action for ``env.step``. Checked here rather than by a pydantic validator: openenv-core
        cannot serialise a validator's error and would end the whole session over one bad action."""
        if (self.text is None) == (self.message is None):
            raise ValueError("an action has exactly one of 'text' (the reply) or 'message' (an assistant message)")
        return self.text if self.text is not None else dict(self.message or {})


class HarnessObservation(Observation):
    """What the policy sees next, and everything else a client needs (``metadata`` is not sent)."""

    messages: list[dict[str, Any]] = Field(default_factory=list, description="the context the policy sees next")
    tools: list[dict[str, Any]] = Field(default_factory=list, description="OpenAI function schemas")
    terminated: bool = Field(default=False, description="the episode ended (finish tool, or a reply without a call)")
    truncated: bool = Field(default=False, description="the episode was cut (step budget, time limit, hook)")
    info: dict[str, Any] = Field(default_factory=dict, description="the step's info (JSON), reward breakdown included")


class HarnessState(State):
    """The session's episode: a minted ``episode_id`` (or the client's), the step count, the
    environment id and the task."""

    env_id: str | None = Field(default=None, description="the served environment id")
    task_id: str | None = Field(default=None, description="the episode's task")


def _json_safe(value: Any) -> Any:
    """Info as JSON would carry it (numpy numbers and other objects as their plain form or text)."""
    return json.loads(json.dumps(value, default=lambda o: o.item() if hasattr(o, "item") else str(o)))


class SessionRegistry:
    """The environments alive in this server, so a shutdown can close every sandbox."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: set[HarnessServedEnv] = set()

    def add(self, env: HarnessServedEnv) -> None:
        with self._lock:
            self._live.add(env)

    def discard(self, env: HarnessServedEnv) -> None:
        with self._lock:
            self._live.discard(env)

    def live(self) -> list[HarnessServedEnv]:
        with self._lock:
            return list(self._live)

    def close_all(self) -> int:
        """Close every live environment (and so its sandbox); returns how many were open."""
        envs = self.live()
        for env in envs:
            try:
                env.close()
            except Exception:  # one broken sandbox must not keep the others open
                logger.exception("closing a session's environment failed")
        return len(envs)


class HarnessServedEnv(Environment[HarnessAction, HarnessObservation, HarnessState]):
    """One session's environment: a ``gym.make``-made harness environment behind OpenEnv's interface.

    The Gymnasium environment (and its sandbox) is created by the first ``reset``, so requests
    that only read metadata cost nothing; ``close`` waits for a running step (up to a bound) so a
    reaped or shut-down session never pulls a sandbox from under a command.
    """

    SUPPORTS_CONCURRENT_SESSIONS = True
    CLOSE_WAIT_S = 30.0

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], registry: SessionRegistry) -> None:
        super().__init__()
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs)
        self.registry = registry
        self.gym_env: gym.Env[Any, Any] | None = None
        self._state = HarnessState(episode_id=None, step_count=0, env_id=env_id)
        self._lock = threading.Lock()
        self._closed = False
        self.last_activity = time.monotonic()

    # -------------------------------------------------------------- OpenEnv interface

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        task_id: str | None = None,
        options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> HarnessObservation:
        if kwargs:
            raise ValueError(f"unknown reset arguments {sorted(kwargs)}; known: seed, episode_id, task_id, options")
        with self._lock:
            self._check_open()
            if self.gym_env is None:
                self.gym_env = gym.make(self.env_id, **self.env_kwargs)
                self.registry.add(self)
            episode_options = dict(options or {})
            if task_id is not None:
                episode_options["task_id"] = task_id
            observation, info = self.gym_env.reset(seed=seed, options=episode_options or None)
            # an episode id names the episode in the client's logs and the server's: minted when not given
            self._state = HarnessState(
                episode_id=episode_id or uuid.uuid4().hex, step_count=0, env_id=self.env_id, task_id=info.get("task_id")
            )
            info["episode_id"] = self._state.episode_id
            self.last_activity = time.monotonic()
            return HarnessObservation(
                messages=observation["messages"], tools=observation["tools"], info=_json_safe(info), reward=None
            )

    def step(self, action: HarnessAction, timeout_s: float | None = None, **kwargs: Any) -> HarnessObservation:
        with self._lock:
            self._check_open()
            if self.gym_env is None:
                raise RuntimeError("no episode is running: send a reset first")
            observation, reward, terminated, truncated, info = self.gym_env.step(action.as_gym_action())
            self._state.step_count += 1
            self.last_activity = time.monotonic()
            return HarnessObservation(
                messages=observation["messages"],
                tools=observation["tools"],
                terminated=bool(terminated),
                truncated=bool(truncated),
                info=_json_safe(info),
                reward=float(reward),
                done=bool(terminated or truncated),
            )

    @property
    def state(self) -> HarnessState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(
            name=self.env_id,
            description=f"harness-gym environment {self.env_id}: a task-solving episode under one agent harness",
            version=harness_gym.__version__,
        )

    def close(self) -> None:
        """Close the environment and its sandbox; idempotent, safe from any thread."""
        acquired = self._lock.acquire(timeout=self.CLOSE_WAIT_S)
        try:
            if self._closed:
                return
            self._closed = True
            if self.gym_env is not None:
                self.gym_env.close()
            self.registry.discard(self)
        finally:
            if acquired:
                self._lock.release()

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this session was closed (idle too long, or the server is stopping); reconnect")


class SessionGate:
    """The ASGI layer in front of openenv-core's routes.

    - With a token, refuses requests without it: HTTP 401, and a WebSocket handshake is denied
      with 401 too. The token is accepted as ``Authorization: Bearer TOKEN`` or as the password of
      HTTP Basic credentials (what a WebSocket client sends for ``ws://user:TOKEN@host``).
    - Denies a WebSocket handshake with 503 when every session is taken (openenv-core would accept
      the connection and close it at once, which its client reports as a bare closed connection).
    - Keeps out of the log the ``WebSocketDisconnect`` that openenv-core lets escape when it closes
      a session whose client already went away (the session is closed by then).
    - Answers a WebSocket message that is not a JSON object with a type (``[]``, ``5``, a binary
      frame) with an error message, and keeps the session: openenv-core ended the whole session
      (and its episode) on one.
    """

    def __init__(self, app: Any, server: HTTPEnvServer, token: str | None) -> None:
        if token is not None and not token:
            raise ValueError("the bearer token must not be empty")
        self.app = app
        self.server = server
        self.token = token.encode() if token else None

    def _authorized(self, header: bytes | None) -> bool:
        if self.token is None:
            return True
        if not header:
            return False
        scheme, _, value = header.partition(b" ")
        if scheme.lower() == b"bearer":
            return hmac.compare_digest(value.strip(), self.token)
        if scheme.lower() == b"basic":
            try:
                _, _, password = base64.b64decode(value.strip(), validate=True).partition(b":")
            except (binascii.Error, ValueError):
                return False
            return hmac.compare_digest(password, self.token)
        return False

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        kind = scope["type"]
        guarded = kind in ("http", "websocket") and scope.get("path") not in UNAUTHENTICATED_PATHS
        if guarded and not self._authorized(dict(scope.get("headers") or []).get(b"authorization")):
            await _deny(scope, send, 401, "missing or wrong bearer token")
            return
        if kind == "websocket" and self.server.active_sessions >= self.server.max_concurrent_envs:
            await _deny(scope, send, 503, f"all {self.server.max_concurrent_envs} sessions are taken; retry later")
            return
        if kind == "websocket":
            receive = _answering_malformed(receive, send)
        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if kind != "websocket":
                raise


def _answering_malformed(receive: Any, send: Any) -> Any:
    """``receive`` that answers, itself, a message openenv-core would end the session on (one that
    is JSON but no object, JSON nested too deeply to parse, or a binary frame), and hands the application the next one. The
    application only sends after a receive returns, so the answer never interleaves with its own."""

    async def filtered() -> dict[str, Any]:
        while True:
            message = await receive()
            if message.get("type") != "websocket.receive":
                return message
            text = message.get("text")
            if text is None:
                problem = "binary frames are not understood; send JSON text"
            else:
                try:
                    value = json.loads(text)
                except ValueError:
                    return message  # openenv-core answers invalid JSON itself
                except RecursionError:  # openenv-core's own parse would raise it too, ending the session
                    problem = "the message is nested too deeply to parse; send a JSON object with a 'type'"
                else:
                    if isinstance(value, dict):
                        return message
                    problem = f"a message must be a JSON object with a 'type', not {type(value).__name__}"
            answer = {"type": "error", "data": {"message": problem, "code": "INVALID_MESSAGE"}}
            await send({"type": "websocket.send", "text": json.dumps(answer)})

    return filtered


async def _deny(scope: dict[str, Any], send: Any, status: int, detail: str) -> None:
    """An HTTP error response, or the denial of a WebSocket handshake (as an HTTP response where the
    server supports it, else a close before accept, which clients see as HTTP 403)."""
    body = json.dumps({"detail": detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b"Bearer"))
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
    elif "websocket.http.response" in (scope.get("extensions") or {}):
        await send({"type": "websocket.http.response.start", "status": status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})


def create_env_app(
    env_id: str,
    env_kwargs: Mapping[str, Any] | None = None,
    *,
    max_sessions: int = 32,
    idle_timeout_s: float | None = 600.0,
    token: str | None = None,
) -> tuple[Any, SessionRegistry]:
    """The ASGI application serving ``env_id`` (one environment per WebSocket session), and the
    registry of its live environments."""
    if env_id not in gym.registry:
        raise ValueError(f"unknown environment id {env_id!r}; see `harness-gym configs` and the presets")
    if max_sessions < 1:
        raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
    if idle_timeout_s is not None and idle_timeout_s <= 0:
        raise ValueError(f"idle_timeout_s must be positive (or None for no timeout), got {idle_timeout_s}")
    registry = SessionRegistry()
    factory = functools.partial(HarnessServedEnv, env_id, dict(env_kwargs or {}), registry)
    server = HTTPEnvServer(
        factory,
        HarnessAction,
        HarnessObservation,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=idle_timeout_s),
    )
    app = FastAPI(title=f"harness-gym {env_id}", version=harness_gym.__version__)
    server.register_routes(app, mode=ServerMode.PRODUCTION)  # no stateless /reset, /step, /state

    async def close_every_session() -> None:
        closed = await asyncio.to_thread(registry.close_all)
        if closed:
            logger.info("closed %d open session(s) at shutdown", closed)

    app.router.on_shutdown.append(close_every_session)
    return SessionGate(app, server, token), registry


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable from this machine only."""
    if host.lower() in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


class EnvServer:
    """``create_env_app`` under uvicorn: ``start()`` runs it in a thread (tests, benchmarks, notebooks),
    ``serve()`` in the foreground (the CLI; SIGINT/SIGTERM stop it gracefully)."""

    def __init__(
        self,
        env_id: str,
        env_kwargs: Mapping[str, Any] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        max_sessions: int = 32,
        idle_timeout_s: float | None = 600.0,
        token: str | None = None,
        graceful_timeout_s: float = 30.0,
        ws_compression: bool = False,
        allow_no_token: bool = False,
    ) -> None:
        if not token and not allow_no_token and not is_loopback(host):
            raise ValueError(
                f"refusing to serve on {host!r} without a token: anyone who reaches it could run code in its "
                "sandboxes; set a token (serve-env reads $HARNESS_GYM_ENV_TOKEN), bind 127.0.0.1, or pass "
                "--no-token-ok (allow_no_token=True) to serve openly on purpose"
            )
        self.app, self.registry = create_env_app(
            env_id, env_kwargs, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s, token=token
        )
        self.socket = socket.create_server((host, port), reuse_port=False)
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            timeout_graceful_shutdown=round(graceful_timeout_s),
            ws_max_size=64 * 1024 * 1024,
            # compressing every observation costs CPU on both ends for no gain on loopback or a
            # datacenter network; worth it only on slow links between machines
            ws_per_message_deflate=ws_compression,
            lifespan="on",
        )
        self.server = uvicorn.Server(config)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def serve(self) -> None:
        try:
            self.server.run(sockets=[self.socket])
        finally:
            self.registry.close_all()  # also when uvicorn failed before its own shutdown ran

    def start(self, timeout_s: float = 30.0) -> EnvServer:
        self.thread = threading.Thread(target=self.serve, daemon=True, name="harness-gym-env-server")
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the environment server did not start")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        """Stop accepting, close every session (and its sandbox), and wait for the server thread."""
        self.server.should_exit = True
        if self.thread is not None:
            self.thread.join()
        self.registry.close_all()
        self.socket.close()
