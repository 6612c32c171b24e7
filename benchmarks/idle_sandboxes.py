"""Idle sandboxes at node scale: what each one costs, against the budgets ``harness-gym doctor`` sizes
a host by (issue 27: 10,000 concurrent sandboxes per node).

    python benchmarks/idle_sandboxes.py [--sandboxes 512] [--workers N] [--out benchmarks/results/idle_sandboxes.json]

Starts ``--sandboxes`` bubblewrap sandboxes from ``--workers`` threads (default: the cores), each with
its tool server primed, as a rollout node holds them between steps; checks that every one answers a
command; measures per sandbox the descriptors this owner process holds, the host processes and the
descriptors those processes hold, and memory (the sandbox's memory cgroup where there is one, the
processes' PSS, and the drop in MemAvailable: noisy, the host's other processes move it too); then
closes them all and checks that nothing is left (processes, descriptors, uid leases, registry
entries, cgroups, workspaces). Prints the figures and writes them as JSON; exit 1 when a sandbox
did not answer, a figure is over its budget, or something was left behind.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _uptime() -> str:
    try:
        return "load average " + " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _descendants() -> list[int]:
    """Every process below this one (the sandboxes' bwrap, init, shell and tool server)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
    mine: set[int] = set()
    frontier = {os.getpid()}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - mine
        mine |= frontier
    return sorted(mine)


def _count(path: str) -> int:
    try:
        return len(os.listdir(path))
    except OSError:
        return 0


def _pss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _cgroup_memory_mb(box: Any) -> float | None:
    """What the sandbox's memory cgroup is charged (pages, tmpfs, kernel memory), if it has one."""
    for group in getattr(box, "_cgroups", []):
        for name in ("memory.current", "memory.usage_in_bytes"):
            path = Path(group) / name
            if path.exists():
                try:
                    return int(path.read_text()) / (1 << 20)
                except (OSError, ValueError):
                    return None
    return None


def _leased(uid: int) -> bool:
    """Whether some process holds the uid's lease now (its lock file is locked)."""
    import fcntl

    from harness_gym.sandboxes import isolation

    try:
        handle = os.open(isolation.lock_dir() / f"{uid}.lock", os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(handle)
    return False


def _start() -> Any:
    from harness_gym.sandboxes.bubblewrap import BubblewrapSandbox

    box = BubblewrapSandbox()
    try:
        workspace = box.new_workspace()
        (workspace / "a.txt").write_text("alpha\n")
        box.start(workspace, "/workspace")
        box.prime_tool_server()
    except BaseException:
        box.close()
        raise
    return box


def _left_behind(before: set[int], uids: set[int], tokens: set[str], folders: set[str], groups: set[str]) -> list[str]:
    from harness_gym.sandboxes import isolation

    left = [f"process {pid}" for pid in set(_descendants()) - before]
    items = isolation.registry()._items
    left += [f"registry uid {token}" for token in tokens if token in items["uid"]]
    left += [f"registry dir {folder}" for folder in folders if folder in items["dir"]]
    left += [f"folder {folder}" for folder in folders if Path(folder).exists()]
    left += [f"cgroup {group}" for group in groups if Path(group).exists()]
    stray: dict[int, list[str]] = {}
    for entry in os.listdir("/proc") if uids else []:
        if entry.isdigit():
            try:
                owner = os.stat(f"/proc/{entry}").st_uid
            except OSError:
                continue
            if owner in uids:
                stray.setdefault(owner, []).append(entry)
    for uid, pids in stray.items():
        if _leased(uid):
            continue  # another process of this host leased the uid since: its processes are its own
        left += [f"process {pid} of sandbox uid {uid}" for pid in pids]
    return left


def measure(count: int, workers: int | None = None) -> dict[str, Any]:
    """Hold ``count`` idle sandboxes, measure them against the doctor's budgets, close them all."""
    from harness_gym import doctor
    from harness_gym.sandboxes import isolation

    workers = workers or os.cpu_count() or 1
    isolation.raise_descriptor_limit()
    _start().close()  # once per process (recovery pass, registry log, shared layers): not counted
    fds_before = _count("/proc/self/fd")
    processes_before = set(_descendants())
    available_before = _available_mb()
    boxes: list[Any] = []
    try:
        started = time.perf_counter()
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(_start) for _ in range(count)]
        failures = [future.exception() for future in futures if future.exception() is not None]
        boxes += [future.result() for future in futures if future.exception() is None]
        if failures:
            raise RuntimeError(f"{len(failures)} of {count} sandboxes did not start: {failures[0]!r}")
        start_s = time.perf_counter() - started
        answered = sum(box.run("cat a.txt").output == "alpha\n" for box in boxes)  # the tool servers come up meanwhile
        deadline = time.monotonic() + 60
        while len(set(_descendants()) - processes_before) < count * 4 and time.monotonic() < deadline:
            time.sleep(0.5)
        time.sleep(1.0)
        owner_fds = (_count("/proc/self/fd") - fds_before) / count
        pids = sorted(set(_descendants()) - processes_before)
        processes = len(pids) / count
        host_fds = sum(_count(f"/proc/{pid}/fd") for pid in pids) / count + owner_fds
        pss_mb = sum(_pss_kb(pid) for pid in pids) / 1024 / count
        charged = [m for m in (_cgroup_memory_mb(box) for box in boxes) if m is not None]
        cgroup_mb = sum(charged) / len(charged) if charged else None
        available_drop_mb = (available_before - _available_mb()) / count
        uids = {box.uid for box in boxes if box.uid is not None}
        tokens = {box._lease.token for box in boxes if box._lease is not None}
        folders = {str(box.workspace) for box in boxes if box.workspace is not None}
        folders |= {str(box._control) for box in boxes if box._control is not None}
        groups = {str(group) for box in boxes for group in box._cgroups}
    finally:
        closing = time.perf_counter()
        for box in boxes:
            box.close()
        close_s = time.perf_counter() - closing
    time.sleep(0.5)
    left = _left_behind(processes_before, uids, tokens, folders, groups)
    fds_after = _count("/proc/self/fd") - fds_before
    if fds_after > 0:
        left.append(f"{fds_after} descriptors of this process")
    memory_mb = cgroup_mb if cgroup_mb is not None else pss_mb
    budget = {
        "owner_fds": (owner_fds, doctor.FDS_PER_SANDBOX),
        "processes": (processes, doctor.IDLE_PROCESSES_PER_SANDBOX),
        "host_fds": (host_fds, doctor.HOST_FDS_PER_SANDBOX),
        "memory_mb": (memory_mb, doctor.IDLE_MEMORY_MB_PER_SANDBOX),
    }
    over = [f"{name} {value:.2f} > {limit}" for name, (value, limit) in budget.items() if value > limit]
    return {
        "sandboxes": count,
        "workers": workers,
        "uptime": _uptime(),
        "root": isolation.is_root(),
        "answered": answered,
        "start_rate_per_s": round(count / start_s, 1),
        "start_s": round(start_s, 1),
        "close_s": round(close_s, 1),
        "per_sandbox": {
            "owner_fds": round(owner_fds, 2),
            "processes": round(processes, 2),
            "host_fds": round(host_fds, 2),
            "pss_mb": round(pss_mb, 2),
            "cgroup_memory_mb": None if cgroup_mb is None else round(cgroup_mb, 2),
            "mem_available_drop_mb": round(available_drop_mb, 2),
        },
        "budget": {name: limit for name, (_, limit) in budget.items()},
        "over_budget": over,
        "left_behind": left[:50],
        "passed": answered == count and not over and not left,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sandboxes", type=int, default=512)
    parser.add_argument("--workers", type=int, help="threads that start sandboxes (default: the cores)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "idle_sandboxes.json")
    args = parser.parse_args(argv)
    if args.sandboxes < 1 or (args.workers is not None and args.workers < 1):
        parser.error("--sandboxes and --workers must be at least 1")
    result = measure(args.sandboxes, args.workers)
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
