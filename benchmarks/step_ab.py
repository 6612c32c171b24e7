"""The per-step path of two source trees side by side: env.step and sandbox.run against the floor.

    python benchmarks/step_ab.py OLD_TREE [--blocks 8] [--rounds 60] [--out benchmarks/results/step_ab.json]
    python benchmarks/step_ab.py OLD_TREE --syscalls [--steps 60]

Timing: one worker process per tree (this checkout and ``OLD_TREE``, e.g. a ``git worktree`` of an
older commit), each holding compare.py's contenders (the floor, ``sandbox.run('true')``, env.step
S0T0O0C0W0 and S2T2O2C2W2); a block calls every contender once per round in a shuffled order, and
the workers alternate blocks, so load that varies slows both alike. Ratios are against each
worker's own floor. ``--syscalls``: syscalls per env.step of ``true`` (``strace -f -c``) on the host's
threads and on the sandbox's shell and tool server, for each tree in turn. Prints and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent

TIMING_WORKER = r"""
import json, random, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "benchmarks")
from compare import FloorShell, Stepper, make_task, make_workspace
from harness_gym.sandboxes import BubblewrapSandbox
task = make_task(make_workspace(Path(tempfile.mkdtemp(prefix="hg-step-ab-", dir="/var/tmp")) / "small", 64 << 10, 8))
floor = FloorShell(own_session=True)
box = BubblewrapSandbox(); box.start(box.new_workspace(), "/workspace")
base, full = Stepper("S0T0O0C0W0", task), Stepper("S2T2O2C2W2", task)
calls = {"floor": lambda: floor.run("true"), "sandbox.run": lambda: box.run("true"),
         "env.step S0T0O0C0W0": base, "env.step S2T2O2C2W2": full}
for call in calls.values():
    call()
order, shuffler = list(calls.items()), random.Random(0)
print("ready", flush=True)
for line in sys.stdin:
    out = {name: [] for name in calls}
    for _ in range(int(line)):
        shuffler.shuffle(order)
        for name, call in order:
            started = time.perf_counter(); value = call(); elapsed = time.perf_counter() - started
            out[name].append(value if getattr(call, "self_timed", False) else elapsed)
    print(json.dumps(out), flush=True)
floor.close(); box.close(); base.env.close(); full.env.close()
"""

SYSCALL_WORKER = r"""
import json, os, re, subprocess, sys, tempfile, time
from pathlib import Path
sys.path.insert(0, "benchmarks")
from compare import make_task, make_workspace, step_action
from harness_gym import HarnessEnv
config, steps = sys.argv[1], int(sys.argv[2])
task = make_task(make_workspace(Path(tempfile.mkdtemp(prefix="hg-step-ab-", dir="/var/tmp")) / "small", 64 << 10, 8))
env = HarnessEnv(config, tasks=[task], max_steps=10_000)
env.reset(seed=0); time.sleep(0.5)
action = step_action(env, "true")
for _ in range(6):
    env.step(action)
def descendants(pid):
    try:
        children = [int(c) for c in open(f"/proc/{pid}/task/{pid}/children").read().split()]
    except OSError:
        return []
    return [p for c in children for p in (c, *descendants(c))]
inside = [p for p in descendants(env.sandbox._proc.pid) if open(f"/proc/{p}/comm").read().strip() in ("bash", "python3")]
result = {}
for side, pids in (("host", [os.getpid()]), ("sandbox", inside)):
    log = tempfile.mktemp(prefix="hg-strace-")
    tracer = subprocess.Popen(["strace", "-f", "-c", "-o", log, *[a for p in pids for a in ("-p", str(p))]],
                              stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    for _ in range(steps):
        env.step(action)
    time.sleep(0.3); tracer.terminate(); tracer.wait()
    rows = {}
    for line in open(log).read().splitlines():
        fields = line.split()
        if len(fields) >= 5 and fields[3].isdigit() and fields[-1] != "total":
            rows[fields[-1]] = round(int(fields[3]) / steps, 1)
    os.unlink(log)
    result[side] = {"total": round(sum(rows.values()), 1), "by_call": rows}
print(json.dumps(result))
env.close()
"""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(len(ordered) * q), len(ordered) - 1)] * 1000


def worker(tree: Path, code: str, *args: str, stdin: int | None = subprocess.PIPE) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    return subprocess.Popen(
        [sys.executable, "-c", code, *args], stdin=stdin, stdout=subprocess.PIPE, text=True, env=env, cwd=tree
    )


def timing(trees: dict[str, Path], blocks: int, rounds: int) -> dict[str, Any]:
    procs = {name: worker(tree, TIMING_WORKER) for name, tree in trees.items()}
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    try:
        for proc in procs.values():
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        for block in range(blocks):
            for name in list(trees) if block % 2 == 0 else list(trees)[::-1]:
                proc = procs[name]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"{rounds}\n")
                proc.stdin.flush()
                for contender, values in json.loads(proc.stdout.readline()).items():
                    samples[name].setdefault(contender, []).extend(values)
    finally:
        for proc in procs.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait()
    result: dict[str, Any] = {}
    for name, rows in samples.items():
        floor50, floor90 = percentile(rows["floor"], 0.5), percentile(rows["floor"], 0.9)
        result[name] = {
            contender: {
                "p50_ms": round(percentile(values, 0.5), 3),
                "p90_ms": round(percentile(values, 0.9), 3),
                "p50_vs_floor": round(percentile(values, 0.5) / floor50, 2),
                "p90_vs_floor": round(percentile(values, 0.9) / floor90, 2),
            }
            for contender, values in rows.items()
        }
    return result


def syscalls(trees: dict[str, Path], steps: int) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, tree in trees.items():
        for config in ("S0T0O0C0W0", "S2T2O2C2W2"):
            proc = worker(tree, SYSCALL_WORKER, config, str(steps), stdin=subprocess.DEVNULL)
            output, _ = proc.communicate(timeout=300)
            result.setdefault(name, {})[config] = json.loads(output.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("old_tree", type=Path, help="the other source tree (a git worktree of an older commit)")
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=60, help="rounds per block")
    parser.add_argument("--syscalls", action="store_true", help="count syscalls per step instead of timing")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if not (args.old_tree / "harness_gym").is_dir():
        parser.error(f"{args.old_tree} is not a harness-gym source tree")
    trees = {"old": args.old_tree.resolve(), "new": HERE}
    load = os.getloadavg()
    figures = syscalls(trees, args.steps) if args.syscalls else timing(trees, args.blocks, args.rounds)
    result = {
        "benchmark": "step_ab",
        "command": " ".join(["python", "benchmarks/step_ab.py", *sys.argv[1:]]),
        "load_average_start": load,
        "load_average_end": os.getloadavg(),
        "cores": os.cpu_count(),
        "figures": figures,
    }
    print(json.dumps(result, indent=1))
    out = args.out or Path(f"benchmarks/results/step_ab{'_syscalls' if args.syscalls else ''}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written to {out}")


if __name__ == "__main__":
    main()
