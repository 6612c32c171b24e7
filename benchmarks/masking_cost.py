"""What Gemini CLI's masking rule (``masked_results``, harness_gym/external/proxy/masking.py) adds to
the proxy's history check, per request: ``RolloutChannel.verify`` on a rollout of the masking tests'
shape (12 agent turns, each adding a ~40 KB result: shell output with sections, file reads, plain
shell text; the last request carries the CLI's own masks of the oldest results, made by the bundle's
code through its Node), with the rule and without it, interleaved, ``--rounds`` times. Without the
rule the masked request is flagged (the finding); with it, it is accepted. Needs Gemini CLI installed.

    python benchmarks/masking_cost.py [--rounds 5] [--out benchmarks/results/masking_cost.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the masking tests' rollout shape and Node driver

import test_external_masking as shape  # noqa: E402

from harness_gym.external.proxy import gemini  # noqa: E402
from harness_gym.external.proxy.masking import ToolOutputMasking  # noqa: E402
from harness_gym.external.proxy.recording import ProxyRecord, RolloutChannel  # noqa: E402


def bodies(home: Path) -> list[dict[str, Any]]:
    """The rollout's request bodies: TURNS honest ones, then the one with the CLI's masks."""
    contents = [c for i in range(shape.TURNS) for c in (shape._model(i), shape._result(i))]
    masked = shape._mask([*contents, shape._model(shape.TURNS)], home)
    honest = [shape._body(contents[: 2 * n]) for n in range(shape.TURNS + 1)]
    return [*honest, shape._body([*masked, shape._result(shape.TURNS)])]


def rollout(requests: list[dict[str, Any]], rule: bool) -> tuple[list[float], str | None]:
    """Each request's verify() time (seconds), as the proxy runs it, and the rollout's verdict."""
    masking = ToolOutputMasking.from_data(shape.SPEC.data["masked_results"]) if rule else None
    channel = RolloutChannel(shape._policy(), masking=masking)
    times = []
    for body in requests:
        request = channel.tag(gemini.parse(body, "m"))
        started = time.perf_counter()
        channel.verify(request, body, None)
        times.append(time.perf_counter() - started)
        reply = channel.policy.complete(request)
        channel.add(ProxyRecord("gemini", "/v1beta", None, "", 200, policy_request=request, policy_reply=reply))
    return times, channel.tampered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/masking_cost.json"))
    args = parser.parse_args()
    requests = bodies(Path(tempfile.mkdtemp(prefix="hg-masking-")))
    runs: dict[str, list[list[float]]] = {"without": [], "with": []}
    verdicts: dict[str, str | None] = {}
    load = [os.getloadavg()[0]]
    for _ in range(args.rounds):
        for name in ("without", "with"):
            times, verdicts[name] = rollout(requests, name == "with")
            runs[name].append(times)
    load.append(os.getloadavg()[0])
    summary = {}
    for name, rounds in runs.items():
        honest = [t * 1e3 for times in rounds for t in times[:-1]]
        masked = [times[-1] * 1e3 for times in rounds]
        summary[name] = {
            "honest_p50_ms": round(statistics.median(honest), 3),
            "honest_max_ms": round(max(honest), 3),
            "masked_request_p50_ms": round(statistics.median(masked), 3),
            "tampered": verdicts[name],
        }
        print(
            f"{name:8} rule: honest p50 {summary[name]['honest_p50_ms']:.3f} ms (max {summary[name]['honest_max_ms']:.3f}), "
            f"masked request p50 {summary[name]['masked_request_p50_ms']:.3f} ms, tampered: {bool(verdicts[name])}"
        )
    print(f"load average {load[0]:.2f} -> {load[1]:.2f}")
    result = {
        "benchmark": "masking_cost",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_average": load},
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "requests": len(requests),
        "body_kb": [len(json.dumps(b)) // 1024 for b in requests],
        "rounds": args.rounds,
        "summary": summary,
    }
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
