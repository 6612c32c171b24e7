"""An agent over any OpenAI-compatible chat endpoint: vLLM's server, the OpenAI API, ..."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness_gym.agents.prompting import TEXT_FORMATS, openai_messages, text_messages
from harness_gym.llm_client import ChatClient
from harness_gym.tool_formats import format_for_model


class OpenAIChatAgent:
    """Calls ``/chat/completions`` once per step.

    ``tool_mode="native"`` passes the harness's tools as OpenAI function schemas and returns the
    model's ``tool_calls``; ``"hermes"`` or ``"xml"`` describe the tools in the system prompt and
    return the model's text for the harness to parse. Retries with backoff come from
    :class:`~harness_gym.llm_client.ChatClient`; token usage per episode is in ``usage``.
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
        if tool_mode not in ("native", "auto", *TEXT_FORMATS):
            raise ValueError(f"tool_mode must be 'native', 'auto' or one of {TEXT_FORMATS}, got {tool_mode!r}")
        if tool_mode == "auto":  # the text format the model's family was trained on
            tool_mode = format_for_model(model)
        self.client = ChatClient(base_url, model, api_key=api_key, timeout_s=timeout_s, retries=retries)
        self.name = f"openai:{model}"
        self.tool_mode = tool_mode
        self.options = {"temperature": temperature, "max_tokens": max_tokens, **dict(extra or {})}
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}

    def reset(self, env: Any) -> None:
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}

    def act(self, observation: Mapping[str, Any]) -> str | dict[str, Any]:
        if self.tool_mode == "native":
            reply = self.client.chat(
                openai_messages(observation["messages"]), tools=observation["tools"], **self.options
            )
        else:
            reply = self.client.chat(
                text_messages(observation["messages"], observation["tools"], self.tool_mode), **self.options
            )
        usage = reply.get("usage") or {}
        self.usage["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
        self.usage["completion_tokens"] += int(usage.get("completion_tokens") or 0)
        self.usage["calls"] += 1
        message = (reply.get("choices") or [{}])[0].get("message") or {}
        content = message.get("content") or ""
        if self.tool_mode == "native" and message.get("tool_calls"):
            return {"role": "assistant", "content": content, "tool_calls": message["tool_calls"]}
        return content
