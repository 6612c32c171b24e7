"""Token-exact chat turns for multi-turn RL.

The policy's token stream for one context segment is built by appending, never by re-rendering:

    prompt  = tokens(template(messages, add_generation_prompt=True))
    then, per turn:  action tokens (exactly what the engine generated, its stop token included)
                     + feedback tokens (masked): the rest of the template's end-of-turn text, then
                       the new messages rendered the way the template renders them, ending with the
                       generation prompt of the next assistant turn.

The template's end-of-turn text ("closing", e.g. ``<|im_end|>\\n`` for ChatML) is learned once, by
rendering a probe conversation whose assistant message is a sentinel. If the policy stopped on the
token that begins the closing, only the rest (``\\n``) is added; if it stopped for length, the whole
closing is added. So the end-of-turn token and the separator appear exactly once per turn, and the
stream equals what the chat template renders for the same conversation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness_gym.errors import HarnessGymError

_SENTINEL = "\u2063HARNESS-GYM-SENTINEL\u2063"
_PROBE: list[dict[str, str]] = [
    {"role": "system", "content": "probe system"},
    {"role": "user", "content": "probe user"},
    {"role": "assistant", "content": _SENTINEL},
]


class TemplateError(HarnessGymError, ValueError):
    """The tokenizer's chat template cannot give an append-only token stream."""


class ChatTurns:
    """Renders chat messages into the policy's token stream, turn by turn (see the module doc)."""

    def __init__(self, tokenizer: Any) -> None:
        if not getattr(tokenizer, "chat_template", None):
            raise TemplateError("the tokenizer has no chat template; multi-turn training needs one")
        self.tokenizer = tokenizer
        self._probe_text = self.render(_PROBE, add_generation_prompt=False)
        at = self._probe_text.rfind(_SENTINEL)
        if at < 0:
            raise TemplateError("the chat template drops assistant content; cannot locate turn boundaries")
        self.closing = self._probe_text[at + len(_SENTINEL) :]
        extended = self.render([*_PROBE, {"role": "user", "content": "probe"}], add_generation_prompt=True)
        if not extended.startswith(self._probe_text):
            raise TemplateError(
                "the chat template re-renders earlier turns when a message is added; an append-only token "
                "stream (what the policy saw = what is trained on) is impossible with it"
            )
        self.stop_token_ids = self._stop_tokens()

    def _stop_tokens(self) -> frozenset[int]:
        """Tokens that end a turn: the tokenizer's EOS ids and the token the closing text begins with."""
        ids: set[int] = set()
        eos = getattr(self.tokenizer, "eos_token_id", None)
        ids.update(eos if isinstance(eos, (list, tuple)) else [eos] if eos is not None else [])
        closing_ids = self.encode(self.closing)
        first = self.tokenizer.decode(closing_ids[:1], skip_special_tokens=False) if closing_ids else ""
        if first.strip() and self.closing.startswith(first):
            ids.add(closing_ids[0])
        return frozenset(ids)

    # ------------------------------------------------------------------ rendering

    def render(self, messages: Sequence[Mapping[str, Any]], *, add_generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(
            [{"role": m["role"], "content": m["content"]} for m in messages],
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        """The tokens of a fresh context: the whole conversation, ready for the next assistant turn."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    # ------------------------------------------------------------------ turns

    def ended_turn(self, action_ids: Sequence[int]) -> bool:
        """Whether the action stopped on an end-of-turn token (rather than for length)."""
        return bool(action_ids) and action_ids[-1] in self.stop_token_ids

    def action_text(self, action_ids: Sequence[int]) -> str:
        """What the policy said, as the environment should read it: the stop token left out."""
        body = list(action_ids[:-1]) if self.ended_turn(action_ids) else list(action_ids)
        return self.tokenizer.decode(body, skip_special_tokens=False)

    def closing_rest(self, action_ids: Sequence[int]) -> str:
        """The end-of-turn text the policy did not write itself."""
        if self.ended_turn(action_ids):
            stop_text = self.tokenizer.decode(list(action_ids[-1:]), skip_special_tokens=False)
            if stop_text and self.closing.startswith(stop_text):
                return self.closing[len(stop_text) :]
        return self.closing

    def messages_text(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """New messages (after an assistant turn) as the template renders them, plus the next
        generation prompt."""
        if not messages:
            raise ValueError("an environment step must answer with at least one message")
        full = self.render([*_PROBE, *messages], add_generation_prompt=True)
        if not full.startswith(self._probe_text):
            raise TemplateError("the chat template re-rendered earlier turns; cannot append the new messages")
        return full[len(self._probe_text) :]

    def feedback_text(self, action_ids: Sequence[int], messages: Sequence[Mapping[str, Any]]) -> str:
        """Everything between the policy's action and its next turn, as text."""
        return self.closing_rest(action_ids) + self.messages_text(messages)
