"""C: context management. Level 0 keeps the full history. Levels 1 and 2 fold older turns into a
summary once more than ``trigger_turns`` turns are in the context, keeping the last
``keep_last_turns`` verbatim; level 2 writes the summary to a file in the workspace and leaves a
pointer to it in the context.

A turn is one assistant message and the messages that answer it. Each environment step adds one
turn, so turn i of the episode is step i. When the context is rewritten the step's ``info`` says
``context_reset: True``: the next prompt is not the previous one plus an appended suffix, and a
trainer must not treat the episode as one token sequence across that point.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness_gym.factors.levels import level_fragment
from harness_gym.summarizers import DeterministicSummarizer, Summarizer


def fragment(level: int) -> dict[str, Any]:
    return level_fragment("C", level)


@dataclass
class TurnRecord:
    """What happened in one step, in structured form for summarisers."""

    step: int
    text: str
    calls: list[dict[str, Any]] = field(default_factory=list)  # name, arguments, exit_code, output
    feedback: list[str] = field(default_factory=list)


class ContextManager:
    """Decides, after each step, what the policy sees next."""

    def __init__(
        self,
        spec: Mapping[str, Any],
        summarizer: Summarizer | None = None,
        write_file: Callable[[str, str], Any] | None = None,
        mount_path: str = "/workspace",
    ) -> None:
        self.config = spec["context"]
        self.summarizer: Summarizer = summarizer or DeterministicSummarizer()
        self.write_file = write_file
        self.summary: str | None = None
        self.summarized_turns = 0
        self.summary_path = None
        if self.config.get("summary_location") == "file":
            self.summary_path = f"{mount_path.rstrip('/')}/{self.config['summary_file']}"

    @property
    def compresses(self) -> bool:
        return self.config["strategy"] == "summary"

    def manage(
        self, messages: list[dict[str, Any]], records: Sequence[TurnRecord]
    ) -> tuple[list[dict[str, Any]], bool]:
        """The context for the next step, and whether it was rewritten rather than appended to."""
        if not self.compresses:
            return messages, False
        first_turn = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
        head = [m for m in messages[:first_turn] if m.get("source") != "summary"]
        turns: list[list[dict[str, Any]]] = []
        for message in messages[first_turn:]:
            if message["role"] == "assistant" or not turns:
                turns.append([])
            turns[-1].append(message)
        if len(turns) <= self.config["trigger_turns"]:
            return messages, False
        keep = self.config["keep_last_turns"]
        dropped = len(turns) - keep
        folded = records[self.summarized_turns : self.summarized_turns + dropped]
        self.summary = self.summarizer(self.summary, folded)
        self.summarized_turns += dropped
        header: str = self.config["summary_header"]
        if self.summary_path is not None:
            if self.write_file is not None:
                self.write_file(self.summary_path, self.summary + "\n")
            content = header.replace("{summary_path}", self.summary_path)
        else:
            content = f"{header}\n{self.summary}"
        summary_message = {"role": "user", "content": content, "source": "summary"}
        return head + [summary_message] + [m for turn in turns[dropped:] for m in turn], True
