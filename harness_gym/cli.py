"""The ``harness-gym`` command line.

    harness-gym configs [--set training|heldout|all] [--neighbours ID]
    harness-gym schedule --tasks N [--tasks-per-step B] [--k 2] [--assignment locality] [--seed 0]
    harness-gym check [--configs training,heldout] [--tasks builtin] [--format hermes] [--out FILE]

``check`` runs the privileged reference agent on every task in every chosen harness: a
solvability benchmark of the harnesses themselves (every task must score 1.0 everywhere).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness_gym.design import TRAINING_SET, build_schedule, heldout_set, training_set
from harness_gym.space import HarnessConfig, all_configs, neighbours

CONFIG_SETS = {
    "training": lambda: list(TRAINING_SET),
    "heldout": lambda: list(heldout_set()),
    "all": all_configs,
}


def parse_configs(text: str) -> list[HarnessConfig]:
    """A comma-separated list of set names (training, heldout, all) and configuration ids."""
    chosen: list[HarnessConfig] = []
    for item in (part.strip() for part in text.split(",") if part.strip()):
        configs = CONFIG_SETS[item]() if item in CONFIG_SETS else [HarnessConfig.parse(item)]
        chosen.extend(c for c in configs if c not in chosen)
    if not chosen:
        raise ValueError("no configurations chosen")
    return chosen


def _cmd_configs(args: argparse.Namespace) -> int:
    configs = neighbours(args.neighbours) if args.neighbours else parse_configs(args.set)
    for config in configs:
        print(config.env_id)
    return 0


def _cmd_schedule(args: argparse.Namespace) -> int:
    tasks = [f"task_{i:04d}" for i in range(args.tasks)]
    steps = build_schedule(
        tasks,
        args.tasks_per_step,
        configs=training_set(args.training_set, args.seed),
        k=args.k,
        assignment=args.assignment,
        seed=args.seed,
    )
    for step in steps:
        for a in step:
            print(json.dumps({"step": a.step, "task": a.task, "config": a.config.code, "slot": a.slot}))
    return 0


def _cmd_check(args: argparse.Namespace) -> int:
    import gymnasium as gym
    from tqdm import tqdm

    import harness_gym  # noqa: F401  (registers the environments)
    from harness_gym.agents import ReferenceAgent, run_episode
    from harness_gym.tasks import load_tasks

    configs = parse_configs(args.configs)
    tasks = load_tasks(args.tasks)
    out = open(args.out, "w", encoding="utf-8") if args.out else None  # noqa: SIM115
    failures: list[str] = []
    started = time.perf_counter()
    per_config: dict[str, list[float]] = {}
    with tqdm(total=len(configs) * len(tasks), unit="episode", desc="reference agent", file=sys.stderr) as bar:
        for config in configs:
            env = gym.make(config.env_id, tasks=tasks)
            for task in tasks:
                result = run_episode(env, ReferenceAgent(args.format), seed=args.seed, task_id=task.id)
                per_config.setdefault(config.code, []).append(result.reward)
                if result.reward != 1.0:
                    failures.append(
                        f"{config.code} {task.id}: reward {result.reward} "
                        f"{result.final_info.get('grader_error') or result.final_info.get('reward_breakdown')}"
                    )
                if out:
                    out.write(
                        json.dumps(
                            {"config": config.code, "task": task.id, "reward": result.reward, "steps": result.steps}
                        )
                        + "\n"
                    )
                bar.update()
            env.close()
    if out:
        out.close()
    elapsed = time.perf_counter() - started
    episodes = sum(len(v) for v in per_config.values())
    print(f"{'configuration':<14}{'solved':>8}")
    for code, rewards in per_config.items():
        print(f"{code:<14}{sum(r == 1.0 for r in rewards):>4}/{len(rewards)}")
    print(f"\n{episodes} episodes in {elapsed:.1f} s ({episodes / elapsed:.1f} episodes/s); failures: {len(failures)}")
    for failure in failures:
        print("  FAILED", failure)
    return 1 if failures else 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness-gym", description="The agent harness as an experimental variable.")
    sub = parser.add_subparsers(dest="command", required=True)

    configs = sub.add_parser("configs", help="list configurations of the harness space")
    configs.add_argument("--set", default="all", help="training, heldout, all, or comma-separated ids")
    configs.add_argument("--neighbours", metavar="ID", help="list the 10 configurations at Hamming distance 1")
    configs.set_defaults(func=_cmd_configs)

    schedule = sub.add_parser("schedule", help="print a locality-aware task-to-harness schedule as JSON lines")
    schedule.add_argument("--tasks", type=int, required=True, help="number of tasks")
    schedule.add_argument("--tasks-per-step", type=int, default=16)
    schedule.add_argument("--k", type=int, default=2)
    schedule.add_argument("--assignment", default="locality", choices=["locality", "random", "repeat"])
    schedule.add_argument("--training-set", default="oa18", choices=["oa18", "random18", "all243", "base"])
    schedule.add_argument("--seed", type=int, default=0)
    schedule.set_defaults(func=_cmd_schedule)

    check = sub.add_parser("check", help="run the reference agent on every task in every chosen harness")
    check.add_argument("--configs", default="training,heldout", help="training, heldout, all, or ids (comma-separated)")
    check.add_argument("--tasks", default="builtin", help="task suite, e.g. builtin or builtin:eval")
    check.add_argument(
        "--format", default="hermes", choices=["hermes", "xml", "openai"], help="how the agent writes calls"
    )
    check.add_argument("--seed", type=int, default=0)
    check.add_argument("--out", type=Path, help="write one JSON line per episode here")
    check.set_defaults(func=_cmd_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, KeyError) as exc:
        print(f"harness-gym: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
