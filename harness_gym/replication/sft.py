"""Supervised fine-tuning on CPU with a loss mask: a plain torch loop, readable top to bottom.

A trajectory row (from :func:`harness_gym.export.sft_row`) is rendered with the model's chat
template exactly as the Hugging Face agent renders it at evaluation time; the loss covers only
the tokens of messages flagged ``train`` (the policy's own turns, up to and including their
end-of-turn token), never the system prompt, the task, tool results or hook/workflow messages.

Only the top ``trainable_layers`` decoder layers (and the final norm) are trained: on two cores
the backward pass through all 30 layers of SmolLM2-135M is what a laptop cannot afford, and the
frozen lower layers keep the model's language ability. Logits are computed at trained positions
only (the 49k-token output layer over a 1.5k-token prompt is a large share of the forward pass).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Example:
    """One tokenised trajectory: token ids and, per token, whether the loss covers it."""

    input_ids: tuple[int, ...]
    trained: tuple[bool, ...]
    harness: str = ""
    task_id: str = ""

    @property
    def trained_tokens(self) -> int:
        return sum(self.trained)

    def trimmed(self, count: int) -> Example:
        """The same example with the loss taken off its last ``count`` trained tokens."""
        if not 0 <= count <= self.trained_tokens:
            raise ValueError(f"cannot trim {count} of {self.trained_tokens} trained tokens")
        positions = [i for i, t in enumerate(self.trained) if t]
        trained = list(self.trained)
        for i in positions[len(positions) - count :]:
            trained[i] = False
        return replace(self, trained=tuple(trained))


def tokenize_row(row: Mapping[str, Any], tokenizer: Any) -> Example:
    """An SFT row as token ids with the train mask of its messages carried over to tokens."""
    messages = [{"role": m["role"], "content": m["content"]} for m in row["messages"]]

    def text(upto: int, generation_prompt: bool = False) -> str:
        return tokenizer.apply_chat_template(messages[:upto], tokenize=False, add_generation_prompt=generation_prompt)

    full = text(len(messages))
    spans = []
    for index, message in enumerate(row["messages"]):
        if not message.get("train"):
            continue
        start, end = len(text(index, True)), len(text(index + 1).rstrip("\n"))
        if not full.startswith(text(index + 1)) or start >= end:
            raise ValueError(f"the chat template does not render message {index} as a prefix; cannot mask it")
        spans.append((start, end))
    if not spans:
        raise ValueError(f"row {row.get('task_id')} in {row.get('harness')} has no trained message")
    encoded = tokenizer(full, add_special_tokens=False, return_offsets_mapping=True)
    trained = tuple(any(s <= a and b <= e for s, e in spans) for a, b in encoded["offset_mapping"])
    return Example(tuple(encoded["input_ids"]), trained, str(row.get("harness") or ""), str(row.get("task_id") or ""))


def default_threads() -> int:
    """The cores idle now (at least one). torch's threads wait for each other at every operation,
    so a thread per core on a loaded machine is far slower than fewer: measured here at load 12 on
    two cores, one thread decoded 5x faster than two."""
    cores = os.cpu_count() or 1
    return max(1, min(cores, cores - round(os.getloadavg()[0])))


@dataclass(frozen=True)
class TrainConfig:
    """What fixes a training run (saved beside the checkpoint)."""

    epochs: int = 1
    learning_rate: float = 1e-4
    warmup_steps: int = 4
    trainable_layers: int = 10
    max_grad_norm: float = 1.0
    seed: int = 0
    threads: int = 0  # 0: default_threads()


def masked_loss(model: Any, example: Example) -> Any:
    """Mean cross-entropy of the next-token predictions at the trained positions only."""
    import torch

    ids = torch.tensor([example.input_ids])
    targets = torch.tensor([i for i in range(1, len(example.input_ids)) if example.trained[i]])
    hidden = model.model(input_ids=ids).last_hidden_state[0]
    logits = model.lm_head(hidden[targets - 1])
    return torch.nn.functional.cross_entropy(logits, ids[0, targets])


def train(
    base_model: str | Path,
    examples: Sequence[Example],
    out_dir: str | Path,
    config: TrainConfig = TrainConfig(),
    on_step: Callable[[int, int, float], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``base_model`` (a transformers folder) on ``examples`` in their order, once per
    epoch; save the model and tokenizer in transformers format to ``out_dir``. Returns the log."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not examples:
        raise ValueError("no training examples")
    torch.manual_seed(config.seed)
    torch.set_num_threads(config.threads or default_threads())
    model = AutoModelForCausalLM.from_pretrained(str(base_model), dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(base_model))
    layers = model.model.layers
    if not 1 <= config.trainable_layers <= len(layers):
        raise ValueError(f"trainable_layers must be 1..{len(layers)}, got {config.trainable_layers}")
    model.requires_grad_(False)
    for module in [*layers[-config.trainable_layers :], model.model.norm]:
        module.requires_grad_(True)
    parameters = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=config.learning_rate, weight_decay=0.0)
    total = config.epochs * len(examples)

    def schedule(step: int) -> float:  # linear warm-up, then cosine decay to zero
        if step < config.warmup_steps:
            return (step + 1) / config.warmup_steps
        progress = (step - config.warmup_steps) / max(1, total - config.warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * progress))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    model.train()
    losses: list[float] = []
    started = time.perf_counter()
    for _epoch in range(config.epochs):
        for example in examples:
            loss = masked_loss(model, example)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            losses.append(loss.item())
            if on_step is not None:
                on_step(len(losses), total, losses[-1])
    model.eval()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    log = {
        "config": asdict(config),
        "examples": len(examples),
        "trained_tokens": sum(e.trained_tokens for e in examples),
        "steps": len(losses),
        "losses": losses,
        "first_loss": losses[0],
        "final_loss": sum(losses[-len(examples) :]) / min(len(losses), len(examples)),
        "seconds": time.perf_counter() - started,
    }
    (out / "train_log.json").write_text(json.dumps(log, indent=2) + "\n", encoding="utf-8")
    (out / ".gitignore").write_text("# checkpoint written by harness-gym's replication: weights stay out of git\n*\n")
    return log
