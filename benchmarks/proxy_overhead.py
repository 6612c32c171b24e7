"""Per-request overhead of the recording model proxy over the backend's own latency, per dialect.

Each CLI's recorded requests (``tests/data/external/recordings``: Claude Code on Anthropic Messages,
Codex on Responses, Gemini CLI on the Gemini API, Qwen Code and mini-swe-agent on Chat Completions;
real sizes, 25-70 KB bodies) are replayed in the CLI's own mode (streamed or not) by a client in
another process (as deployed: the CLI is not in the proxy's interpreter) over the unix socket, one
keep-alive connection, sequentially. The policy sleeps ``--backend-ms`` and times itself; overhead =
the client's round trip minus the policy's own time (p50, p90); ``work`` is the proxy's own
handling, from the request line read to the answer ready, minus the policy (p50). It covers HTTP parsing, JSON decoding of the
whole request, the translation both ways, SSE framing, the record and the socket hops; not the
in-sandbox forwarder.

    python benchmarks/proxy_overhead.py [--requests 200] [--backend-ms 5] [--out benchmarks/results/proxy_overhead.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RECORDINGS = ROOT / "tests" / "data" / "external" / "recordings"
CLIS = {
    "claude-code": "anthropic",
    "codex": "responses",
    "gemini-cli": "gemini",
    "qwen-code": "chat",
    "mini-swe-agent": "chat",
}
TARGET_P50_MS = 1.0


def client(socket_path: str, secret: str, plan_file: str, count: int) -> None:
    """Child process: send the plan's requests round-robin, print each round trip in ms."""
    sys.path.insert(0, str(ROOT))
    from harness_gym.external.proxy import UnixHTTPConnection

    plan = json.loads(Path(plan_file).read_text())
    connection = UnixHTTPConnection(socket_path, timeout=60)
    encoded = [(path, json.dumps(body).encode()) for path, body in plan]
    times = []
    for i in range(count):
        path, data = encoded[i % len(encoded)]
        started = time.perf_counter()
        connection.request(
            "POST", path, data, {"Content-Type": "application/json", "x-api-key": secret, "x-goog-api-key": secret}
        )
        response = connection.getresponse()
        response.read()
        times.append((time.perf_counter() - started) * 1000)
        if response.status != 200:
            raise SystemExit(f"{path}: {response.status}")
    print(json.dumps(times))


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(cli: str, requests: int, backend_ms: float, warmup: int) -> dict[str, Any]:
    from harness_gym.external.policies import PolicyReply, PolicyRequest
    from harness_gym.external.proxy import ModelProxy

    records = json.loads((RECORDINGS / f"{cli}.json").read_text())["records"]
    plan = [(r["path"] + ("?alt=sse" if "streamGenerateContent" in r["path"] else ""), r["request"]) for r in records]
    spent: list[float] = []

    class TimedPolicy:
        """A backend with a fixed latency that measures itself."""

        def complete(self, request: PolicyRequest) -> PolicyReply:
            started = time.perf_counter()
            time.sleep(backend_ms / 1000)
            reply = PolicyReply(
                tool_calls=[{"id": "call_1", "name": "shell", "arguments": '{"command": "ls -la"}'}],
                finish_reason="tool_calls",
                prompt_tokens=5000,
                completion_tokens=12,
            )
            spent.append((time.perf_counter() - started) * 1000)
            return reply

    with tempfile.TemporaryDirectory(prefix="hg-proxy-bench-") as tmp, ModelProxy(Path(tmp) / "p.sock") as proxy:
        channel = proxy.open_rollout(TimedPolicy())
        plan_file = Path(tmp) / "plan.json"
        plan_file.write_text(json.dumps(plan))
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--client",
                str(proxy.socket_path),
                channel.secret,
                str(plan_file),
                str(requests + warmup),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        round_trips = json.loads(done.stdout)
        assert len(spent) == len(round_trips) == len(channel.records)
        inside = [(r.ended - r.started) * 1000 for r in channel.records]
    overhead = [rt - own for rt, own in zip(round_trips[warmup:], spent[warmup:], strict=True)]
    work = [total - own for total, own in zip(inside[warmup:], spent[warmup:], strict=True)]
    return {
        "cli": cli,
        "dialect": CLIS[cli],
        "streamed": bool(records[0]["request"].get("stream") or "stream" in records[0]["path"]),
        "request_bytes": [len(json.dumps(r["request"])) for r in records],
        "requests": len(overhead),
        "backend_p50_ms": round(statistics.median(spent[warmup:]), 3),
        "overhead_p50_ms": round(percentile(overhead, 0.5), 3),
        "overhead_p90_ms": round(percentile(overhead, 0.9), 3),
        "server_work_p50_ms": round(percentile(work, 0.5), 3),
    }


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        client(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--backend-ms", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "proxy_overhead.json")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    rows = [
        measure(cli, args.requests, args.backend_ms, args.warmup)
        for cli in CLIS
        if (RECORDINGS / f"{cli}.json").exists()
    ]
    print(
        f"{'CLI':<16}{'dialect':<11}{'stream':<8}{'p50 ms':>8}{'p90 ms':>8}{'work ms':>9}   (backend {args.backend_ms} ms, target p50 <= {TARGET_P50_MS} ms)"
    )
    for row in rows:
        print(
            f"{row['cli']:<16}{row['dialect']:<11}{row['streamed']!s:<8}{row['overhead_p50_ms']:>8.3f}{row['overhead_p90_ms']:>8.3f}{row['server_work_p50_ms']:>9.3f}"
        )
    result = {
        "benchmark": "proxy_overhead",
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_1min": round(__import__("os").getloadavg()[0], 2),
        },
        "backend_ms": args.backend_ms,
        "target_p50_ms": TARGET_P50_MS,
        "rows": rows,
        "meets_target": all(r["overhead_p50_ms"] <= TARGET_P50_MS for r in rows),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
