"""The recording model proxy (issue 26): one host-side server that speaks Anthropic Messages, OpenAI
Chat Completions, OpenAI Responses and the Gemini API to unmodified CLIs, and one canonical request to
the policy. See :mod:`harness_gym.external.proxy.server`."""

from harness_gym.external.proxy.recording import ProxyRecord, RolloutChannel
from harness_gym.external.proxy.server import ModelProxy, UnixHTTPConnection

__all__ = ["ModelProxy", "ProxyRecord", "RolloutChannel", "UnixHTTPConnection"]
