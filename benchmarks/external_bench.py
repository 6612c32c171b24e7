"""README's external bench figures from one bench run: a plot of per-CLI Pass@1 (95% bootstrap
intervals over episodes) beside the imitation preset each CLI file names (``imitation:``), and the
imitation-fidelity table (preset vs its real CLI, per agent: Pass@1, errors by kind, agent turns,
tool-call attempts, valid calls as the records count them, tokens per episode).

    harness-gym bench --agent reference --calibration null --tasks builtin --task-count 2 --runs 1 \\
      --configs external:claude-code,external:claude-code-bare,external:codex,Harness-ClaudeCodeStyle \\
      --out /tmp/bench
    python benchmarks/external_bench.py /tmp/bench [--png benchmarks/results/external_bench.png]

Errors count as failures (reward 0) and are counted; the tables print as markdown on stdout.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness_gym.external.catalog import load_cli, shipped_clis
from harness_gym.metrics import Interval, bootstrap_ci

OUTCOME_COLORS = {"passed": "tab:green", "failed": "lightgray", "context_overflow": "tab:purple", "error": "tab:red"}


def imitations() -> dict[str, str]:
    """CLI id -> the imitation preset its file names."""
    found = {}
    for name in shipped_clis():
        cli = load_cli(name)
        if cli.data.get("imitation"):
            found[cli.id] = str(cli.data["imitation"])
    return found


def summarize(records: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """(harness, agent role) -> Pass@1 interval, episodes, errors by kind, agent turns, tool-call
    attempts and valid calls (as the records count them), tokens per episode."""
    grouped: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    for record in records:
        grouped[(str(record["harness"]), str(record.get("role", "model")))].append(record)
    summary = {}
    for key, group in grouped.items():
        calls = sum(int(r.get("tool_calls") or 0) for r in group)
        valid = sum(int(r.get("valid_tool_calls") or 0) for r in group)
        kinds: dict[str, int] = defaultdict(int)
        for r in group:
            if r.get("outcome") == "error":
                kinds[str(r.get("error_kind") or "unknown")] += 1
        summary[key] = {
            "pass": bootstrap_ci([1.0 if r.get("passed") else 0.0 for r in group]),
            "agent": next((str(r["agent"]) for r in group if r.get("agent")), key[1]),
            "episodes": len(group),
            "errors": sum(kinds.values()),
            "errors_by_kind": dict(sorted(kinds.items())),
            "context_overflows": sum(1 for r in group if r.get("outcome") == "context_overflow"),
            "outcomes": dict(Counter(str(r.get("outcome")) for r in group)),
            "turns_per_episode": sum(int(r.get("steps") or 0) for r in group) / len(group),
            "calls": calls,
            "valid": valid,
            "calls_per_episode": calls / len(group),
            "valid_rate": valid / calls if calls else float("nan"),
            "prompt_per_episode": sum(int((r.get("tokens") or {}).get("prompt") or 0) for r in group) / len(group),
            "completion_per_episode": sum(int((r.get("tokens") or {}).get("completion") or 0) for r in group)
            / len(group),
        }
    return summary


def _pct(interval: Interval) -> str:
    return f"{interval.estimate:.0%} [{interval.low:.0%}, {interval.high:.0%}]"


def _errors(row: Mapping[str, Any]) -> str:
    if not row["errors"]:
        return "0"
    return f"{row['errors']} (" + ", ".join(f"{k} {v}" for k, v in row["errors_by_kind"].items()) + ")"


def tables(summary: Mapping[tuple[str, str], Mapping[str, Any]], pairs: Mapping[str, str]) -> str:
    """The per-harness table and the fidelity table (each real CLI beside its imitation, per agent), markdown."""
    roles = sorted({role for _, role in summary})
    lines = ["| harness | " + " | ".join(f"{r} Pass@1 [95% CI]" for r in roles) + " | errors | episodes |"]
    lines.append("|---|" + "---|" * (len(roles) + 2))
    for harness in sorted({h for h, _ in summary}):
        cells = [_pct(summary[(harness, r)]["pass"]) if (harness, r) in summary else "–" for r in roles]
        errors = sum(summary[(harness, r)]["errors"] for r in roles if (harness, r) in summary)
        episodes = sum(summary[(harness, r)]["episodes"] for r in roles if (harness, r) in summary)
        lines.append(f"| `{harness}` | " + " | ".join(cells) + f" | {errors} | {episodes} |")
    lines += [
        "",
        "| real CLI vs its imitation | agent | Pass@1 [95% CI] | errors | context overflows | agent turns / episode "
        "| tool-call attempts / episode | valid calls | prompt / completion tokens / episode |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cli, preset in sorted(pairs.items()):
        for role in roles:
            if (cli, role) not in summary:
                continue  # its CLI was not in the run with this agent: no comparison
            for harness in (cli, preset):
                row = summary.get((harness, role))
                if row is None:
                    continue
                rate = "–" if row["valid_rate"] != row["valid_rate"] else f"{row['valid_rate']:.0%}"
                lines.append(
                    f"| `{harness}` | {row['agent'] if role == 'model' else role} | {_pct(row['pass'])} "
                    f"| {_errors(row)} | {row['context_overflows']} | {row['turns_per_episode']:.1f} "
                    f"| {row['calls_per_episode']:.1f} "
                    f"| {row['valid']} / {row['calls']} ({rate}) "
                    f"| {row['prompt_per_episode']:,.0f} / {row['completion_per_episode']:,.0f} |"
                )
    return "\n".join(lines)


def plot(summary: Mapping[tuple[str, str], Mapping[str, Any]], pairs: Mapping[str, str], path: Path) -> None:
    """Per-CLI Pass@1 (model role) with intervals, each beside its imitation preset; and how their
    episodes ended (passed, failed, past the model's context, error)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    clis = sorted(h for h, role in summary if role == "model" and h.startswith("external:"))
    figure, (axis, outcomes_axis) = plt.subplots(1, 2, figsize=(max(9.0, 2.4 * len(clis)), 3.6))
    for index, cli in enumerate(clis):
        bars = [(cli, "tab:blue", -0.2)]
        if (pairs.get(cli, ""), "model") in summary:
            bars.append((pairs[cli], "tab:orange", 0.2))
        for harness, color, offset in bars:
            row = summary[(harness, "model")]
            interval = row["pass"]
            axis.bar(index + offset, interval.estimate, width=0.38, color=color)
            axis.errorbar(
                index + offset,
                interval.estimate,
                yerr=[[interval.estimate - interval.low], [interval.high - interval.estimate]],
                color="black",
                capsize=3,
            )
            bottom = 0.0
            for outcome, shade in OUTCOME_COLORS.items():
                share = row["outcomes"].get(outcome, 0) / row["episodes"]
                outcomes_axis.bar(index + offset, share, width=0.38, bottom=bottom, color=shade, edgecolor=color)
                bottom += share
    names = [c.removeprefix("external:") for c in clis]
    axis.set_xticks(range(len(clis)), names, rotation=20)
    axis.set_ylim(0, 1.05)
    axis.set_ylabel("Pass@1 (95% CI)")
    axis.bar(0, 0, color="tab:blue", label="real CLI")
    axis.bar(0, 0, color="tab:orange", label="its imitation preset")
    axis.legend(loc="upper right", fontsize=8)
    outcomes_axis.set_xticks(range(len(clis)), names, rotation=20)
    outcomes_axis.set_ylim(0, 1.35)
    outcomes_axis.set_ylabel("share of episodes (left bar: real CLI)")
    for outcome, shade in OUTCOME_COLORS.items():
        outcomes_axis.bar(0, 0, color=shade, label=outcome.replace("_", " "))
    outcomes_axis.legend(loc="upper center", fontsize=7, ncol=4)
    agents = sorted({str(summary[(c, "model")]["agent"]) for c in clis})
    figure.suptitle(f"agent: {', '.join(agents)}", fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bench_out", type=Path, help="a bench --out folder (its results.jsonl)")
    parser.add_argument("--png", type=Path, default=Path("benchmarks/results/external_bench.png"))
    args = parser.parse_args()
    results = args.bench_out / "results.jsonl"
    if not results.exists():
        parser.error(f"{results} does not exist: give a bench --out folder")
    records = [json.loads(line) for line in results.read_text(encoding="utf-8").splitlines() if line.strip()]
    summary = summarize(records)
    pairs = imitations()
    plot(summary, pairs, args.png)
    print(tables(summary, pairs))
    print(f"\nplot: {args.png}")


if __name__ == "__main__":
    main()
