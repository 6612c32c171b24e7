"""The policies behind the model proxy: what answers a CLI's requests.

Every dialect the proxy speaks is translated to one canonical :class:`PolicyRequest` (OpenAI Chat
messages and function tools), so a policy is written once for all CLIs. :class:`ScriptedPolicy` and
:class:`DoNothingPolicy` make end-to-end tests deterministic; :class:`OpenAICompatiblePolicy` routes to
vLLM or any ``/v1/chat/completions`` endpoint, cleaning the request of what such servers refuse.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from harness_gym.llm_client import ChatClient, LLMError

if TYPE_CHECKING:
    from harness_gym.external.catalog import ExternalCli


# JSON objects: a decoded body's are dicts, matched first without the ABC's slower instance check
OBJECT = (dict, Mapping)


@dataclass
class PolicyRequest:
    """One model request in canonical form (OpenAI Chat), whatever dialect the CLI spoke."""

    model: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int | None = None
    temperature: float | None = None
    side: bool = False

    @property
    def system(self) -> str:
        """The system prompt: every system message's text, joined."""
        return "\n\n".join(text_of(m.get("content")) for m in self.messages if m.get("role") == "system")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class PolicyReply:
    """The policy's answer; the proxy renders it in the CLI's dialect."""

    content: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"id", "name", "arguments": JSON str}
    finish_reason: str = "stop"  # stop | tool_calls | length
    prompt_tokens: int = 0
    completion_tokens: int = 0
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    # cut at the policy's own cap on max_tokens, below what the CLI asked: the CLI is told the model
    # stopped (a "max_tokens" stop would be false: its limit was not reached, and Claude Code retries
    # such a reply as truncated, then fails the run); ``finish_reason`` keeps the truth
    capped: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class Policy(Protocol):
    """Anything that answers a canonical request."""

    def complete(self, request: PolicyRequest) -> PolicyReply: ...


def text_of(content: Any) -> str:
    """The text of a message content (a string or a list of text parts); other parts are skipped."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, OBJECT) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return str(content)


def estimate_tokens(value: Any) -> int:
    """A rough token count (4 characters a token) for policies and routes that have no tokenizer."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return max(1, (len(text) + 3) // 4)


def _estimated(request: PolicyRequest, reply: PolicyReply) -> PolicyReply:
    if not reply.prompt_tokens:
        reply.prompt_tokens = estimate_tokens([request.messages, request.tools])
    if not reply.completion_tokens:
        reply.completion_tokens = estimate_tokens([reply.content, reply.tool_calls])
    return reply


ScriptStep = PolicyReply | Callable[[PolicyRequest], PolicyReply]


class ScriptedPolicy:
    """Replies in order, then ``final`` as text for every later agent turn.

    Side requests (titles, quota probes, summaries) get ``side_answer`` and do not consume the script,
    so a CLI's side traffic cannot shift which reply answers which agent turn.
    """

    def __init__(self, replies: Sequence[ScriptStep], final: str = "Done.", side_answer: str = "OK") -> None:
        self.replies = list(replies)
        self.final = final
        self.side_answer = side_answer
        self.position = 0

    @classmethod
    def shell(cls, commands: Sequence[str], *, tool: str, argument: str, final: str = "Done.") -> ScriptedPolicy:
        """One call of the CLI's shell tool (its name and argument key come from the CLI's YAML) per command."""
        replies: list[ScriptStep] = [
            PolicyReply(
                tool_calls=[{"id": f"call_{i}", "name": tool, "arguments": json.dumps({argument: command})}],
                finish_reason="tool_calls",
            )
            for i, command in enumerate(commands)
        ]
        return cls(replies, final=final)

    @classmethod
    def cli_shell(cls, cli: ExternalCli, commands: Sequence[str], *, final: str = "Done.") -> ScriptedPolicy:
        """``commands`` through ``cli``'s own shell tool, then its submit command where it needs one
        (mini-swe-agent ends an episode only on it)."""
        tool, argument = cli.shell_tool
        submit = cli.data.get("submit_command")
        return cls.shell([*commands, *([str(submit)] if submit else [])], tool=tool, argument=argument, final=final)

    def complete(self, request: PolicyRequest) -> PolicyReply:
        if request.side:
            return _estimated(request, PolicyReply(content=self.side_answer))
        if self.position >= len(self.replies):
            return _estimated(request, PolicyReply(content=self.final))
        step = self.replies[self.position]
        self.position += 1
        reply = step(request) if callable(step) else PolicyReply(**asdict(step))
        return _estimated(request, reply)


class DoNothingPolicy:
    """Answers text at once and never calls a tool: the floor a grader must score 0."""

    def __init__(self, answer: str = "I will not do anything.") -> None:
        self.answer = answer

    def complete(self, request: PolicyRequest) -> PolicyReply:
        return _estimated(request, PolicyReply(content=self.answer))


_FINISH = {"stop": "stop", "tool_calls": "tool_calls", "function_call": "tool_calls", "length": "length"}


def chat_messages_for_server(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Canonical messages cleaned for a strict OpenAI-compatible server (vLLM).

    vLLM's chat templates refuse a system message after the first turn (Claude Code puts one inside
    ``messages``) and non-text content parts; tool results must be strings and every key it does not
    know (``cache_control``, ``reasoning_content``, ...) is dropped.
    """
    system: list[str] = []
    cleaned: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            text = text_of(message.get("content"))
            if text:
                system.append(text)
            continue
        if role == "assistant":
            out: dict[str, Any] = {"role": "assistant", "content": text_of(message.get("content")) or None}
            calls = []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                arguments = function.get("arguments")
                calls.append(
                    {
                        "id": str(call.get("id") or ""),
                        "type": "function",
                        "function": {
                            "name": str(function.get("name") or ""),
                            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
                        },
                    }
                )
            if calls:
                out["tool_calls"] = calls
            elif out["content"] is None:
                out["content"] = ""
            cleaned.append(out)
        elif role == "tool":
            cleaned.append(
                {
                    "role": "tool",
                    "tool_call_id": str(message.get("tool_call_id") or ""),
                    "content": text_of(message.get("content")),
                }
            )
        else:
            cleaned.append({"role": "user", "content": text_of(message.get("content"))})
    if system:
        cleaned.insert(0, {"role": "system", "content": "\n\n".join(system)})
    return cleaned


def tools_for_server(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Function tools with only ``name``, ``description`` and ``parameters`` (``strict`` and others dropped)."""
    cleaned = []
    for tool in tools:
        function = tool.get("function") or {}
        if tool.get("type", "function") != "function" or not function.get("name"):
            continue
        parameters = function.get("parameters")
        entry: dict[str, Any] = {"name": function["name"], "description": str(function.get("description") or "")}
        entry["parameters"] = parameters if isinstance(parameters, Mapping) else {"type": "object", "properties": {}}
        cleaned.append({"type": "function", "function": entry})
    return cleaned


class OpenAICompatiblePolicy:
    """Routes every request to an OpenAI-compatible ``/v1/chat/completions`` server (vLLM, ...).

    The request is rebuilt from the canonical fields only, so the CLI's extras (``reasoning_effort``,
    ``prompt_cache_key``, ``thinking``, ``store``, ...) never reach the server. ``logprobs=True`` asks for
    per-token logprobs and vLLM's ``return_token_ids``; both are recorded in the reply. ``max_tokens``
    caps what each request asks for: CLIs ask 32k-64k, which a server whose context is smaller
    refuses outright (vLLM: prompt + max_tokens must fit ``max_model_len``).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        logprobs: bool = False,
        max_tokens: int | None = None,
        timeout_s: float = 600.0,
        retries: int = 2,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        self.client = ChatClient(base_url, model, api_key=api_key or "EMPTY", timeout_s=timeout_s, retries=retries)
        self.logprobs = logprobs
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})

    def body(self, request: PolicyRequest) -> dict[str, Any]:
        """The options sent beside ``model`` and ``messages``."""
        options: dict[str, Any] = dict(self.extra_body)
        tools = tools_for_server(request.tools)
        if tools:
            options["tools"] = tools
        limits = [n for n in (request.max_tokens, self.max_tokens) if n is not None]
        if limits:
            options["max_tokens"] = min(limits)
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if self.logprobs:
            options["logprobs"] = True
            options["return_token_ids"] = True
        return options

    def complete(self, request: PolicyRequest) -> PolicyReply:
        raw = self.client.chat(chat_messages_for_server(request.messages), **self.body(request))
        reply = reply_from_chat(raw)
        asked = request.max_tokens
        if (
            reply.finish_reason == "length"
            and self.max_tokens is not None
            and (asked is None or self.max_tokens < asked)
        ):
            reply.capped = True
        return reply


def reply_from_chat(raw: Mapping[str, Any]) -> PolicyReply:
    """A :class:`PolicyReply` from a ``chat.completion`` response (LLMError on another shape)."""
    try:
        choice = raw["choices"][0]
        message = choice["message"]
    except (KeyError, IndexError, TypeError) as exc:
        raise LLMError(f"unexpected response shape: {str(raw)[:300]}") from exc
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        calls.append(
            {
                "id": str(call.get("id") or ""),
                "name": str(function.get("name") or ""),
                "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
            }
        )
    usage = raw.get("usage") or {}
    logprobs = None
    content_logprobs = (
        (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
    )
    if content_logprobs:
        logprobs = [float(entry.get("logprob", 0.0)) for entry in content_logprobs]
    token_ids = choice.get("token_ids")
    finish = _FINISH.get(str(choice.get("finish_reason")), "stop")
    if calls and finish == "stop":
        finish = "tool_calls"
    return PolicyReply(
        content=text_of(message.get("content")),
        tool_calls=calls,
        finish_reason=finish,
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        completion_tokens=int(usage.get("completion_tokens") or 0),
        token_ids=[int(t) for t in token_ids] if isinstance(token_ids, list) else None,
        logprobs=logprobs,
    )
