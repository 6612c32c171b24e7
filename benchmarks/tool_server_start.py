"""What a warm spare's tool server costs: its start's CPU and the episode's first tool call, this
tree's tool scripts against a git revision's, interleaved in one run.

    python benchmarks/tool_server_start.py [--baseline 5e387ca] [--starts 60] [--calls 12]
                                           [--out benchmarks/results/tool_server_start.json]

``start``: ``/usr/bin/python3 -I -S server.py --announce`` with stdin at end of file, up to its
exit (it announces itself, reads nothing and ends), CPU from ``wait4``; the two trees alternate,
``--starts`` each. ``first call``: a :class:`BubblewrapSandbox` started with one tree's scripts at
its tools folder, its server primed and up, 0.3 s later (a model's first reply) one ``file_editor
view``, timed; alternating, ``--calls`` each. Every episode's warm spare primes a server, and an
episode that calls no tool pays its start and nothing else. Prints the figures and writes them as
JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = "harness_gym/tools/scripts"


def baseline_scripts(revision: str, folder: Path) -> Path:
    """The tool scripts as they were at ``revision`` (extracted from git into ``folder``)."""
    names = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{revision}:{SCRIPTS}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for name in names:
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{revision}:{SCRIPTS}/{name}"], capture_output=True, check=True
        ).stdout
        (folder / name).write_bytes(text)
    return folder


def start_cpu_ms(server: Path) -> float:
    """CPU milliseconds of one server start, announcement to exit."""
    proc = subprocess.Popen(
        ["/usr/bin/python3", "-I", "-S", str(server), "--announce"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE
    )
    assert proc.stdout is not None
    announced = proc.stdout.read()
    _, _, usage = os.wait4(proc.pid, 0)
    proc.returncode = 0
    if announced != b"S":
        raise SystemExit(f"{server} did not announce itself: {announced!r}")
    return (usage.ru_utime + usage.ru_stime) * 1000


def first_call_ms(scripts: Path) -> float:
    """A primed sandbox's first ``file_editor`` call with ``scripts`` as its tools (ms)."""
    from harness_gym.sandboxes import bubblewrap
    from harness_gym.sandboxes.base import published_copy

    tools = published_copy("tools", sorted(scripts.glob("*.py")))
    original = bubblewrap.tool_scripts_dir
    bubblewrap.tool_scripts_dir = lambda: tools  # type: ignore[assignment]
    box = bubblewrap.BubblewrapSandbox()
    try:
        workspace = box.new_workspace()
        (workspace / "a.txt").write_text("alpha\n")
        box.start(workspace, "/workspace")
        if not box.prime_tool_server(wait_s=10.0):
            raise SystemExit("the tool server did not come up")
        time.sleep(0.3)
        started = time.perf_counter()
        viewed = box.run_tool("file_editor.py", {"command": "view", "path": "/workspace/a.txt", "root": "/workspace"})
        spent = (time.perf_counter() - started) * 1000
        if "alpha" not in viewed.output:
            raise SystemExit(f"file_editor failed: {viewed}")
        return spent
    finally:
        box.close()
        bubblewrap.tool_scripts_dir = original


def _summary(values: list[float]) -> dict[str, float]:
    return {"p50": round(statistics.median(values), 2), "max": round(max(values), 2), "n": len(values)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", default="5e387ca", help="git revision of the tool scripts to compare with")
    parser.add_argument("--starts", type=int, default=60)
    parser.add_argument("--calls", type=int, default=12)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/tool_server_start.json"))
    args = parser.parse_args()
    if args.starts < 1 or args.calls < 0:
        raise SystemExit("--starts must be >= 1 and --calls >= 0")
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="hg-tools-") as folder:
        trees = {
            "this tree": ROOT / SCRIPTS,
            f"baseline {args.baseline}": baseline_scripts(args.baseline, Path(folder)),
        }
        order = list(trees.items())
        starts: dict[str, list[float]] = {name: [] for name in trees}
        calls: dict[str, list[float]] = {name: [] for name in trees}
        for index in range(max(args.starts, args.calls)):
            for name, scripts in order if index % 2 == 0 else order[::-1]:
                if index < args.starts:
                    starts[name].append(start_cpu_ms(scripts / "server.py"))
                if index < args.calls:
                    calls[name].append(first_call_ms(scripts))
        loads.append(os.getloadavg()[0])
    result: dict[str, Any] = {
        "server_start_cpu_ms": {name: _summary(values) for name, values in starts.items()},
        "first_file_editor_call_ms": {name: _summary(values) for name, values in calls.items() if values},
        "load_average_1min": loads,
        "python": sys.version.split()[0],
    }
    for name in trees:
        call = result["first_file_editor_call_ms"].get(name, {})
        print(f"{name}: server start CPU p50 {result['server_start_cpu_ms'][name]['p50']} ms; first call {call}")
    print(f"load average (1 min) before and after: {loads}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
