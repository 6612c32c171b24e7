"""Where a command's round trip goes: CPU and syscalls per command, the floor against the sandbox.

    python benchmarks/shell_cost.py [--commands 3000] [--blocks 6] [--out benchmarks/results/shell_cost.json]

For the floor (a persistent bash in bubblewrap reading a pipe, in its own session, as in
``compare.py``) and harness-gym's bubblewrap sandbox, each running ``true`` (and, for the sandbox, a
command long enough to take the ``read -N`` path), in alternating blocks: wall time per command, the
shell's and this process's CPU time per command (``/proc/<pid>/schedstat``), the shell's read/write
syscalls per command (``/proc/<pid>/io``, as root) and its context switches. The wall time is
roughly host CPU + shell CPU + two wake-ups: a round trip the floor's ratio target allows (2x) has
to fit in the shell and host CPU this shows. Medians over blocks; the machine may be loaded, so
compare figures within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import FloorShell

from harness_gym.sandboxes import BubblewrapSandbox

LONG_COMMAND = "true " + "x" * 120  # over the inline limit: header and text as `read -N` blocks


def schedstat_ns(pid: int) -> int:
    """CPU time a process (its main thread) has run, in ns."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def io_syscalls(pid: int) -> int | None:
    """read(2)- and write(2)-family calls so far (None where /proc/<pid>/io is not readable)."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    except OSError:
        return None
    return int(fields["syscr"]) + int(fields["syscw"])


def context_switches(pid: int) -> int:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["voluntary_ctxt_switches"]) + int(fields["nonvoluntary_ctxt_switches"])


def descendants(pid: int) -> list[int]:
    try:
        children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []
    return [p for child in children for p in (child, *descendants(child))]


def floor_shell_pid(floor: FloorShell) -> int:
    """The floor's bash (bwrap's child)."""
    for pid in descendants(floor.proc.pid):
        if Path(f"/proc/{pid}/comm").read_text().strip() == "bash":
            return pid
    raise RuntimeError("the floor's bash was not found")


def block(run: Callable[[], Any], shell: int, commands: int) -> dict[str, float | None]:
    """One block of ``commands`` calls; per-command figures."""
    me = os.getpid()
    shell_cpu, host_cpu, calls, switches = (
        schedstat_ns(shell),
        schedstat_ns(me),
        io_syscalls(shell),
        context_switches(shell),
    )
    started = time.perf_counter()
    for _ in range(commands):
        run()
    wall = time.perf_counter() - started
    time.sleep(0.02)  # let the shell finish what it does after its status (restoring fds 0-2)
    calls_after = io_syscalls(shell)
    return {
        "wall_us": wall / commands * 1e6,
        "shell_cpu_us": (schedstat_ns(shell) - shell_cpu) / commands / 1e3,
        "host_cpu_us": (schedstat_ns(me) - host_cpu) / commands / 1e3,
        "shell_read_write_syscalls": (calls_after - calls) / commands if calls is not None and calls_after else None,
        "shell_context_switches": (context_switches(shell) - switches) / commands,
    }


def median_of(blocks: list[dict[str, float | None]]) -> dict[str, float | None]:
    keys = blocks[0].keys()
    return {
        key: statistics.median(values) if (values := [v for b in blocks if (v := b[key]) is not None]) else None
        for key in keys
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commands", type=int, default=3000, help="commands per block")
    parser.add_argument("--blocks", type=int, default=6, help="blocks per contender, alternating")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/shell_cost.json"))
    args = parser.parse_args()

    floor = FloorShell(own_session=True)
    floor.run("true")
    box = BubblewrapSandbox()
    box.start(box.new_workspace(), "/workspace")
    box.run("true")
    assert box._shell_host_pid is not None  # the shell's host pid, from its first status record's credentials
    contenders: dict[str, tuple[Callable[[], Any], int]] = {
        "floor: persistent bash in bwrap, pipe (own session)": (lambda: floor.run("true"), floor_shell_pid(floor)),
        "harness-gym sandbox run('true')": (lambda: box.run("true"), box._shell_host_pid),
        f"harness-gym sandbox, a {len(LONG_COMMAND)}-character command": (
            lambda: box.run(LONG_COMMAND),
            box._shell_host_pid,
        ),
    }
    samples: dict[str, list[dict[str, float | None]]] = {name: [] for name in contenders}
    try:
        for run, shell in contenders.values():  # warm-up
            block(run, shell, 200)
        for _ in range(args.blocks):
            for name, (run, shell) in contenders.items():
                samples[name].append(block(run, shell, args.commands))
    finally:
        floor.close()
        box.close()
    rows = {name: median_of(blocks) for name, blocks in samples.items()}
    print(f"{'per command':<56}{'wall us':>9}{'shell CPU':>10}{'host CPU':>9}{'shell r/w':>10}{'switches':>9}")
    for name, row in rows.items():
        calls = row["shell_read_write_syscalls"]
        print(
            f"{name:<56}{row['wall_us']:>9.1f}{row['shell_cpu_us']:>10.1f}{row['host_cpu_us']:>9.1f}"
            f"{calls if calls is None else round(calls, 1):>10}{row['shell_context_switches']:>9.2f}"
        )
    floor_row, box_row = rows[next(iter(rows))], rows["harness-gym sandbox run('true')"]
    result = {
        "benchmark": "shell_cost",
        "command": " ".join(["python", "benchmarks/shell_cost.py", *sys.argv[1:]]),
        "machine": {"platform": platform.platform(), "cores": os.cpu_count(), "load_average": os.getloadavg()},
        "commands_per_block": args.commands,
        "blocks": args.blocks,
        "rows": rows,
        "sandbox_over_floor": {
            key: box_row[key] / floor_row[key]  # type: ignore[operator]
            for key in ("wall_us", "shell_cpu_us", "host_cpu_us")
            if floor_row[key]
        },
    }
    print("sandbox / floor:", {k: round(v, 2) for k, v in result["sandbox_over_floor"].items()})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
