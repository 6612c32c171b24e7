"""A small client for OpenAI-compatible chat endpoints (vLLM's server, the OpenAI API, ...).

Standard library only: summarisers, teachers and judges use it without extra dependencies.
Retries with exponential backoff on connection errors, 429 and 5xx.
"""

from __future__ import annotations

import json
import os
import re
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_gym.errors import AgentError


class LLMError(AgentError):
    """The endpoint could not give an answer (after retries)."""


# how servers word "the prompt does not fit" (vLLM, OpenAI, llama.cpp, harness-gym serve)
_OVERFLOW = re.compile(
    r"maximum context length|maximum model length|context length|context window|prompt is too long|"
    r"longer than the maximum|exceeds the context",
    re.IGNORECASE,
)


def says_context_overflow(message: str) -> bool:
    """Whether an :class:`LLMError`'s message is a 4xx saying the prompt does not fit the model's
    context: an episode outcome (``context_overflow``), not an endpoint failure."""
    return bool(re.search(r"answered 4\d\d: ", message) and _OVERFLOW.search(message))


@dataclass
class ChatClient:
    """``ChatClient("http://localhost:8000/v1", "model").complete(messages)``."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout_s: float = 120.0
    retries: int = 3
    backoff_s: float = 1.0

    def __post_init__(self) -> None:
        if self.api_key is None:
            self.api_key = os.environ.get("OPENAI_API_KEY")

    def chat(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> dict[str, Any]:
        """The raw response of one ``/chat/completions`` call."""
        body = {"model": self.model, "messages": list(messages), **options}
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = self.base_url.rstrip("/") + "/chat/completions"
        last_error: Exception | None = None
        for attempt in range(self.retries + 1):
            request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:
                last_error = exc
                if exc.code not in (408, 409, 429) and exc.code < 500:
                    detail = exc.read().decode(errors="replace")[:500]
                    raise LLMError(f"{url} answered {exc.code}: {detail}") from exc
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last_error = exc
            if attempt < self.retries:
                time.sleep(self.backoff_s * 2**attempt)
        raise LLMError(f"{url} failed after {self.retries + 1} attempts: {last_error}")

    def complete(self, messages: Sequence[Mapping[str, Any]], **options: Any) -> str:
        """The text of the first choice."""
        reply = self.chat(messages, **options)
        try:
            text = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"unexpected response shape: {str(reply)[:300]}") from exc
        if not isinstance(text, str):
            raise LLMError("the response has no text content")
        return text
