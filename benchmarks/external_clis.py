"""What does each real agent CLI cost? Install size, startup to first request, wall time, memory.

    python benchmarks/external_clis.py [--clis claude-code,codex] [--runs 2]
                                       [--out benchmarks/results/external_clis.json]

For every installed CLI (``harness-gym external list``): its install size (from the install's
manifest), then ``--runs`` scripted episodes on a built-in task (one shell call, then a final
answer), each giving the startup to the first model request, the CLI's wall time, the requests
sent, and the peak resident memory of the processes running from its install tree (sampled every
50 ms from /proc: an approximation that misses short-lived children). The proxy's own overhead per
request is measured by the proxy's benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import threading
from pathlib import Path
from typing import Any

from harness_gym.external.catalog import load_cli, shipped_clis
from harness_gym.external.install import install_path, installed
from harness_gym.external.policies import ScriptedPolicy
from harness_gym.external.runner import run_external_episode
from harness_gym.tasks import load_tasks

TASK_ID = "workspace-sort-unique"


class PeakRss:
    """Peak summed RSS (MB) of the processes whose command line names ``marker``, sampled in a thread."""

    def __init__(self, marker: str) -> None:
        self.marker = marker.encode()
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        page_kb = os.sysconf("SC_PAGE_SIZE") / 1024
        while not self._stop.wait(0.05):
            total_kb = 0.0
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    if self.marker not in Path(f"/proc/{pid}/cmdline").read_bytes():
                        continue
                    total_kb += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * page_kb
                except (OSError, ValueError, IndexError):
                    continue
            self.peak_mb = max(self.peak_mb, total_kb / 1024)


def measure(name: str, runs: int) -> dict[str, Any]:
    cli = load_cli(name)
    manifest = installed(cli)
    if manifest is None:
        return {"id": cli.id, "installed": False}
    task = next(t for t in load_tasks("builtin") if t.id == TASK_ID)
    policy_commands = [f"cd {task.mount_path} && ls"]
    episodes = []
    for _ in range(runs):
        with PeakRss(str(install_path(cli))) as memory:
            episode = run_external_episode(cli, task, ScriptedPolicy.cli_shell(cli, policy_commands))
        record = episode.record
        episodes.append(
            {
                "outcome": record["outcome"],
                "error": record["error"],
                "startup_s": record["durations"]["startup_s"],
                "cli_s": record["durations"]["cli_s"],
                "requests": record["external"]["requests"],
                "peak_rss_mb": round(memory.peak_mb, 1),
            }
        )
    good = [e for e in episodes if e["startup_s"] is not None]

    def median(key: str) -> float | None:
        return round(statistics.median(e[key] for e in good), 2) if good else None

    return {
        "id": cli.id,
        "installed": True,
        "version": cli.version,
        "install_mb": manifest.get("size_mb"),
        "startup_s": median("startup_s"),
        "cli_s": median("cli_s"),
        "peak_rss_mb": median("peak_rss_mb"),
        "requests": median("requests"),
        "errors": sum(1 for e in episodes if e["outcome"] == "error"),
        "episodes": episodes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clis", default=",".join(shipped_clis()), help="comma-separated CLI names")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--out", default="benchmarks/results/external_clis.json")
    args = parser.parse_args()
    rows = [measure(name.strip(), args.runs) for name in args.clis.split(",") if name.strip()]
    print(f"{'CLI':<27} {'install MB':>10} {'startup s':>9} {'wall s':>7} {'peak RSS MB':>11} {'errors':>6}")
    for row in rows:
        if not row["installed"]:
            print(f"{row['id']:<27} not installed")
            continue
        print(
            f"{row['id']:<27} {row['install_mb']:>10} {row['startup_s']!s:>9} {row['cli_s']!s:>7} "
            f"{row['peak_rss_mb']!s:>11} {row['errors']:>6}"
        )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    load = os.getloadavg()[0]
    out.write_text(
        json.dumps({"machine": platform.node(), "cpus": os.cpu_count(), "load": load, "rows": rows}, indent=2)
    )
    print(f"written to {out} (load {load:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
