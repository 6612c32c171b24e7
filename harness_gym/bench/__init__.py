"""Benchmarking agents across harnesses: the runner, the report and the trajectory viewer (the
records they share, re-exported here, live in :mod:`harness_gym.records`)."""

from harness_gym.bench.report import compare_results, summarize, write_report
from harness_gym.bench.runner import BenchRunner
from harness_gym.bench.trajectories import render_html, render_text
from harness_gym.records import (
    HarnessChoice,
    load_records,
    plan_episodes,
    read_trajectory,
    resolve_harnesses,
    write_trajectory,
)

__all__ = [
    "BenchRunner",
    "HarnessChoice",
    "compare_results",
    "load_records",
    "plan_episodes",
    "read_trajectory",
    "render_html",
    "render_text",
    "resolve_harnesses",
    "summarize",
    "write_report",
    "write_trajectory",
]
