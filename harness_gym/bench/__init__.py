"""Benchmarking agents across harnesses: the runner, the report and the trajectory format."""

from harness_gym.bench.report import compare_results, load_records, summarize, write_report
from harness_gym.bench.runner import BenchRunner, HarnessChoice, plan_episodes, resolve_harnesses
from harness_gym.bench.trajectories import read_trajectory, render_html, render_text, write_trajectory

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
