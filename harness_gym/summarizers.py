"""Summarisers for context compression (factor C): a deterministic default that needs no model,
and one that asks any OpenAI-compatible chat endpoint."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from harness_gym.llm_client import ChatClient, LLMError

if TYPE_CHECKING:
    from harness_gym.factors.context import TurnRecord


class Summarizer(Protocol):
    """Folds turns into a running summary: ``summary = summarizer(previous_summary, turns)``."""

    def __call__(self, previous: str | None, turns: Sequence[TurnRecord]) -> str: ...


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), "")


def render_turn(turn: TurnRecord, arg_limit: int = 120, output_limit: int = 160) -> str:
    """One line per turn: what the agent said, which tools it called, how they ended."""
    parts = [f"Step {turn.step}:"]
    if turn.text:
        parts.append(f'said "{_clip(_first_line(turn.text), 160)}";')
    for call in turn.calls:
        args = _clip(json.dumps(call.get("arguments", {}), ensure_ascii=False), arg_limit)
        status = call.get("exit_code")
        output = call.get("output", "")
        tail = _clip(_last_line(output), output_limit) if output else "no output"
        parts.append(f"called {call.get('canonical') or call.get('name')} {args} -> exit {status}, last line: {tail};")
    for note in turn.feedback:
        parts.append(f"harness said: {_clip(_first_line(note), 120)};")
    return " ".join(parts).rstrip(";")


class DeterministicSummarizer:
    """A running log, one line per folded turn. Reproducible, no model needed."""

    def __init__(self, max_lines: int = 200) -> None:
        self.max_lines = max_lines

    def __call__(self, previous: str | None, turns: Sequence[TurnRecord]) -> str:
        lines = previous.splitlines() if previous else []
        lines.extend(render_turn(t) for t in turns)
        if len(lines) > self.max_lines:
            lines = ["(earliest steps omitted)", *lines[-self.max_lines :]]
        return "\n".join(lines)


SUMMARY_PROMPT = (
    "You maintain the working memory of a software agent whose older turns are being removed from its context. "
    "Update the summary so the agent can continue without the removed turns. Keep: the goal, files inspected or "
    "changed and how, commands run and what they showed, errors met, what is verified, and what remains to do. "
    "Be factual and brief (at most 200 words). Reply with the summary only."
)


class OpenAISummarizer:
    """Asks an OpenAI-compatible ``/chat/completions`` endpoint (vLLM, any OpenAI API) for the summary.

    If the request fails, it falls back to the deterministic summary and warns, so an episode never
    dies for a summariser outage.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        max_tokens: int = 512,
        retries: int = 1,
    ) -> None:
        self.client = ChatClient(base_url, model, api_key=api_key, timeout_s=timeout_s, retries=retries, backoff_s=0.5)
        self.max_tokens = max_tokens
        self.fallback = DeterministicSummarizer()

    def __call__(self, previous: str | None, turns: Sequence[TurnRecord]) -> str:
        removed = "\n".join(render_turn(t, arg_limit=400, output_limit=400) for t in turns)
        user = f"Current summary:\n{previous or '(none yet)'}\n\nTurns being removed:\n{removed}"
        messages = [{"role": "system", "content": SUMMARY_PROMPT}, {"role": "user", "content": user}]
        try:
            text = self.client.complete(messages, max_tokens=self.max_tokens, temperature=0.0).strip()
            if not text:
                raise LLMError("empty summary")
            return text
        except LLMError as exc:
            warnings.warn(f"summariser failed ({exc}); using the deterministic summary", stacklevel=2)
            return self.fallback(previous, turns)
