"""What the proxy records: one :class:`ProxyRecord` per request, kept by the rollout's :class:`RolloutChannel`."""

from __future__ import annotations

import re
import secrets
import threading
from dataclasses import dataclass, field
from typing import Any

from harness_gym.external.policies import Policy, PolicyReply, PolicyRequest


@dataclass
class ProxyRecord:
    """One request and the response sent back, verbatim (the response is the body as sent, SSE included)."""

    dialect: str  # anthropic | chat | responses | gemini | models
    path: str
    request: dict[str, Any] | None
    response: str
    status: int
    policy_request: PolicyRequest | None = None
    policy_reply: PolicyReply | None = None
    side: bool = False
    started: float = 0.0
    ended: float = 0.0
    error: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # the request's headers, secrets redacted

    def to_json(self) -> dict[str, Any]:
        return {
            "dialect": self.dialect,
            "path": self.path,
            "headers": self.headers,
            "request": self.request,
            "response": self.response,
            "status": self.status,
            "policy_request": self.policy_request.to_json() if self.policy_request else None,
            "policy_reply": self.policy_reply.to_json() if self.policy_reply else None,
            "side": self.side,
            "started": self.started,
            "ended": self.ended,
            "error": self.error,
        }


# Claude Code's first system block carries a per-request billing header: not part of the prompt
_VOLATILE = re.compile(r"^x-anthropic-billing-header:.*$", re.MULTILINE)


def system_key(request: PolicyRequest) -> str:
    """The system prompt as compared for side-request tagging."""
    return _VOLATILE.sub("", request.system).strip()


class RolloutChannel:
    """One rollout's view of the proxy: its secret, policy, budgets and records.

    ``max_requests`` bounds every authenticated request (a flood is refused with 429 and recorded);
    ``max_tokens`` bounds the completion tokens the policy reports over the rollout. When either is
    exceeded, ``exceeded`` says why and every later request is refused: the runner kills the sandbox.
    """

    def __init__(
        self,
        policy: Policy,
        *,
        max_requests: int | None = None,
        max_tokens: int | None = None,
        models: tuple[str, ...] = (),
        on_close: Any = None,
    ) -> None:
        self.secret = "hg-" + secrets.token_urlsafe(24)
        self.policy = policy
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.models = models
        self.records: list[ProxyRecord] = []
        self.agent_turns = 0
        self.requests = 0
        self.completion_tokens = 0
        self.exceeded: str | None = None
        self.connections = 0  # connections open now that sent this channel's secret
        self.first_system: str | None = None
        self.closed = False
        self.lock = threading.Lock()
        self.policy_lock = threading.Lock()  # a rollout's policy answers one request at a time
        self._on_close = on_close

    def admit(self) -> str | None:
        """Count one request; the reason it is refused, if a budget forbids it."""
        with self.lock:
            self.requests += 1
            if self.exceeded is None and self.max_requests is not None and self.requests > self.max_requests:
                self.exceeded = f"more than {self.max_requests} requests"
            return self.exceeded

    def connect(self, limit: int | None) -> bool:
        """Count one more open connection for this rollout; False (not counted) past ``limit``."""
        with self.lock:
            if limit is not None and self.connections >= limit:
                return False
            self.connections += 1
            return True

    def disconnect(self) -> None:
        with self.lock:
            self.connections = max(self.connections - 1, 0)

    def tag(self, request: PolicyRequest) -> PolicyRequest:
        """Mark a side request: no tools, or another system prompt than the rollout's first agent turn."""
        key = system_key(request)
        with self.lock:
            side = not request.tools or (self.first_system is not None and key != self.first_system)
            if not side and self.first_system is None:
                self.first_system = key
            if not side:
                self.agent_turns += 1
        request.side = side
        return request

    def spent(self, reply: PolicyReply) -> None:
        with self.lock:
            self.completion_tokens += reply.completion_tokens
            if self.exceeded is None and self.max_tokens is not None and self.completion_tokens > self.max_tokens:
                self.exceeded = f"more than {self.max_tokens} completion tokens ({self.completion_tokens})"

    def add(self, record: ProxyRecord) -> None:
        with self.lock:
            self.records.append(record)

    @property
    def failed(self) -> str | None:
        """The first policy failure (an exception answered 500), if any: such a rollout is an error."""
        with self.lock:
            return next((r.error for r in self.records if r.status == 500 and r.error), None)

    def close(self) -> None:
        """Forget the secret: later requests with it get 401."""
        self.closed = True
        if self._on_close is not None:
            self._on_close(self)
