"""Agents by name, so a benchmark can build them in any worker (threads, processes, Ray)."""

from __future__ import annotations

import importlib
from typing import Any

AGENT_NAMES = ("reference", "null", "hf", "openai", "python:<module>:<function>")


def make_agent(name: str, **options: Any) -> Any:
    """``reference``, ``null``, ``hf`` (options: model, gguf_file, max_new_tokens, temperature, fmt),
    ``openai`` (options: base_url, model, api_key, tool_mode, temperature, max_tokens), or
    ``python:module:function`` (a factory returning an agent, or a ``(messages, tools)`` callable)."""
    if name == "reference":
        from harness_gym.agents.reference import ReferenceAgent

        return ReferenceAgent(options.get("fmt", "hermes"))
    if name == "null":
        from harness_gym.agents.reference import NullAgent

        return NullAgent()
    if name == "hf":
        from harness_gym.agents.huggingface import HFAgent

        keys = ("model", "gguf_file", "fmt", "max_new_tokens", "temperature", "context_tokens", "seed")
        if options.get("tool_mode") not in (None, "native") and not options.get("fmt"):
            options["fmt"] = options["tool_mode"]  # bench --tool-mode: a text format or auto
        return HFAgent(**{k: v for k, v in options.items() if k in keys and v is not None})
    if name == "openai":
        from harness_gym.agents.openai_chat import OpenAIChatAgent

        if not options.get("base_url") or not options.get("model"):
            raise ValueError("the openai agent needs --base-url and --model")
        keys = ("api_key", "tool_mode", "temperature", "max_tokens", "timeout_s", "retries")
        return OpenAIChatAgent(
            options["base_url"], options["model"], **{k: v for k, v in options.items() if k in keys and v is not None}
        )
    if name.startswith("python:"):
        module_name, _, attribute = name[len("python:") :].partition(":")
        if not module_name or not attribute:
            raise ValueError(f"expected python:<module>:<function>, got {name!r}")
        target = getattr(importlib.import_module(module_name), attribute)
        from harness_gym.agents.base import as_agent

        built = target() if isinstance(target, type) or getattr(target, "is_agent_factory", False) else target
        return as_agent(built)
    raise ValueError(f"unknown agent {name!r}; choose one of {AGENT_NAMES}")
