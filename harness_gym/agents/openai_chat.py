"""An agent over any OpenAI-compatible chat endpoint: vLLM's server, the OpenAI API, ..."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from harness_gym.agents.base import ContextOverflow
from harness_gym.llm_client import ChatClient, LLMError, says_context_overflow
from harness_gym.prompting import (
    PROBE_MESSAGES,
    PROBE_TOOL,
    TEXT_FORMATS,
    TOOL_MODES,
    openai_messages,
    resolve_tool_mode,
    text_messages,
)
from harness_gym.tool_formats import format_for_model


class OpenAIChatAgent:
    """Calls ``/chat/completions`` once per step.

    ``tool_mode="native"`` passes the harness's tools as OpenAI function schemas and returns the
    model's ``tool_calls``; ``"hermes"`` or ``"xml"`` describe the tools in the system prompt and
    return the model's text for the harness to parse. :meth:`probe` checks once whether the served
    chat template renders the tools and resolves ``native`` to a text format when it does not
    (``native-strict`` refuses). Retries with backoff come from
    :class:`~harness_gym.llm_client.ChatClient`; token usage per episode is in ``usage``. A prompt
    the server rejects as too long raises :class:`ContextOverflow` (an episode outcome).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        tool_mode: str = "native",
        temperature: float = 0.0,
        max_tokens: int = 1024,
        timeout_s: float = 300.0,
        retries: int = 3,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        if tool_mode not in TOOL_MODES:
            raise ValueError(f"tool_mode must be one of {TOOL_MODES}, got {tool_mode!r}")
        if tool_mode == "auto":  # the text format the model's family was trained on
            tool_mode = format_for_model(model)
        self.client = ChatClient(base_url, model, api_key=api_key, timeout_s=timeout_s, retries=retries)
        self.name = f"openai:{model}"
        self.tool_mode = tool_mode
        self.options = {"temperature": temperature, "max_tokens": max_tokens, **dict(extra or {})}
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}

    def reset(self, env: Any) -> None:
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}

    def probe(self) -> tuple[str, str | None]:
        """Check the endpoint with one request (no retries) and whether the served chat template
        renders tools (the same request with a probe tool: more prompt tokens if it does).
        Returns (the tool mode to use, a notice or None); raises :class:`LLMError` when the
        endpoint cannot answer."""
        client = dataclasses.replace(self.client, retries=0)
        plain = client.chat(PROBE_MESSAGES, max_tokens=1, temperature=0.0)
        if not isinstance(plain, Mapping) or not plain.get("choices"):
            raise LLMError(f"{client.base_url} answered without choices: {str(plain)[:300]}")
        if self.tool_mode in TEXT_FORMATS:
            return self.tool_mode, None
        try:
            with_tools = client.chat(PROBE_MESSAGES, tools=[PROBE_TOOL], max_tokens=1, temperature=0.0)
        except LLMError as exc:  # e.g. vLLM without --enable-auto-tool-choice
            if self.tool_mode == "native-strict":
                raise ValueError(f"the endpoint refuses native tool calling: {exc}") from exc
            mode, _ = resolve_tool_mode("native", False, self.client.model)
            return mode, f"the endpoint refuses native tool calling ({exc}); using the {mode} text format"
        before = (plain.get("usage") or {}).get("prompt_tokens")
        after = (with_tools.get("usage") or {}).get("prompt_tokens")
        renders = None if before is None or after is None else int(after) > int(before)
        return resolve_tool_mode(self.tool_mode, renders, self.client.model)

    def act(self, observation: Mapping[str, Any]) -> str | dict[str, Any]:
        native = self.tool_mode in ("native", "native-strict")
        try:
            if native:
                reply = self.client.chat(
                    openai_messages(observation["messages"]), tools=observation["tools"], **self.options
                )
            else:
                reply = self.client.chat(
                    text_messages(observation["messages"], observation["tools"], self.tool_mode), **self.options
                )
        except LLMError as exc:
            if says_context_overflow(str(exc)):
                raise ContextOverflow(str(exc)) from exc
            raise
        usage = reply.get("usage") or {}
        self.usage["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        self.usage["completion_tokens"] += int(usage.get("completion_tokens") or 0)
        self.usage["calls"] += 1
        message = (reply.get("choices") or [{}])[0].get("message") or {}
        content = message.get("content") or ""
        if native and message.get("tool_calls"):
            return {"role": "assistant", "content": content, "tool_calls": message["tool_calls"]}
        return content
