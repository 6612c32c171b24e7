"""The recording model proxy (issue 26): one host-side server that speaks Anthropic Messages, OpenAI
Chat Completions, OpenAI Responses and the Gemini API to unmodified CLIs, and one canonical request
(:class:`~harness_gym.external.policies.PolicyRequest`) to the policy. See :mod:`.server`.

Why the translation is hand-written (evaluated 2026-12-02): litellm 1.110.2's
``LiteLLMAnthropicMessagesAdapter.translate_anthropic_to_openai``, the maintained Anthropic -> OpenAI
adapter, was run on Claude Code 2.1.197's two recorded requests. It maps the messages correctly
(system blocks, tool_use/tool_result, cache_control dropped) but passes ``context_management``
through and adds ``reasoning_effort`` (from ``thinking``) and ``user`` (from ``metadata``), fields a
strict OpenAI-compatible server may refuse, so its output needs the same cleaning as ours
(:func:`~harness_gym.external.policies.chat_messages_for_server`). It took 1.4-3.8 ms a request on
this 2-core machine at load ~9 against 0.05-0.07 ms for :func:`.anthropic.parse` on the same
requests (the whole per-request budget is 1 ms), its import 6.5-11 s, its install 200 MB (it is
mini-swe-agent's dependency, not ours), and it covers one of the four dialects in this direction
(no Gemini-API server side). Each module here is 125-250 lines, tested against the CLIs' real
requests both ways (``tests/test_external_proxy.py``); the recordings are refreshed by
``tests/data/external/record_clis.py``.
"""

from harness_gym.external.proxy.recording import ProxyRecord, RolloutChannel
from harness_gym.external.proxy.server import ModelProxy, UnixHTTPConnection

__all__ = ["ModelProxy", "ProxyRecord", "RolloutChannel", "UnixHTTPConnection"]
