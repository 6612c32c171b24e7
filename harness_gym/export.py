"""Datasets for other trainers: ``harness-gym export prompts`` and ``harness-gym export sft``.

**prompts** — one JSON line per (harness, task, seed) rollout request, loaded as is by
``datasets.load_dataset("json")`` (TRL), by OpenRLHF (``--data.input_key prompt --data.label_key
label --data.apply_chat_template``) and by the verifiers taskset of :mod:`harness_gym.integrations`::

    {"prompt": [opening chat messages], "harness": "S1T2O0C0W1", "environment": "S1T2O0C0W1",
     "suite": "builtin:train", "task_id": "...", "seed": 123, "label": "<rollout request JSON>",
     "datasource": "harness-gym"}

``prompt`` is the episode's opening context as the model reads it in the chosen tool format
(``openai``: the tools are left to the chat template, as TRL does; ``hermes``/``xml``: the tools are
described in the system message). ``environment`` selects the class of a TRL dict
``environment_factory``; ``label`` is what the OpenRLHF executor acts on.

**sft** — trajectories written by ``harness-gym bench`` as chat messages, one JSON line per
episode, in the conversational form TRL's ``SFTTrainer`` reads (``messages``), each message with a
``train`` flag: true exactly for the policy's own messages (``source == "policy"``), which are the
assistant messages, so ``SFTConfig(assistant_only_loss=True)`` trains on the same tokens. A context
rewritten by C1/C2 is not the transcript the trajectory keeps, so only the part before the first
rewrite is exported (it is a context the policy really saw).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness_gym.chat import chat_messages
from harness_gym.env import make_env
from harness_gym.errors import HarnessSpecError
from harness_gym.records import read_trajectory, resolve_harnesses
from harness_gym.rollout_requests import RolloutRequest, resolve_harness
from harness_gym.tasks import load_tasks

DATASOURCE = "harness-gym"


def rollout_seed(seed: int, epoch: int, task_id: str, slot: int) -> int:
    """A stable per-rollout environment seed (independent of row order and of Python's hash seed).

    Training rows are seeded apart from evaluation on purpose: :func:`~harness_gym.records.episode_seed`
    (bench, evolution, check) gives small integers, this gives hashed 32-bit ones, so a policy is never
    evaluated on the very episodes it was trained on."""
    digest = hashlib.sha256(f"{seed}/{epoch}/{task_id}/{slot}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


def harness_refs(selection: str | Sequence[str]) -> list[str]:
    """Harness references from what ``harness-gym bench --harnesses`` takes."""
    return [c.config or c.spec_path or c.env_id for c in resolve_harnesses(selection)]


def prompt_rows(
    suite: str,
    harnesses: str | Sequence[str],
    *,
    repeats: int = 1,
    seed: int = 0,
    task_limit: int | None = None,
    tool_format: str = "openai",
    resample_names: bool = False,
    include_skills: bool = True,
) -> list[dict[str, Any]]:
    """Every task of ``suite`` under every harness, ``repeats`` times, with its opening prompt."""
    tasks = load_tasks(suite)[:task_limit] if task_limit else load_tasks(suite)
    rows = []
    for harness in harness_refs(harnesses):
        env = make_env(resolve_harness(harness), tasks, resample_names=resample_names, include_skills=include_skills)
        try:
            for repeat in range(repeats):
                for task in tasks:
                    episode_seed = rollout_seed(seed, repeat, task.id, 0)
                    observation, _ = env.reset(seed=episode_seed, options={"task_id": task.id})
                    request = RolloutRequest(suite, task.id, harness, seed=episode_seed)
                    rows.append({
                        "prompt": chat_messages(observation["messages"], observation["tools"], tool_format),
                        "harness": harness, "environment": harness, "suite": suite, "task_id": task.id,
                        "seed": episode_seed, "label": request.to_label(), "datasource": DATASOURCE,
                    })  # fmt: skip
        finally:
            env.close()
    return rows


# --------------------------------------------------------------------------- SFT


def trajectory_files(paths: Iterable[str | Path]) -> list[Path]:
    """Trajectory files from files and folders (``*.jsonl`` inside, recursively)."""
    found: list[Path] = []
    for item in map(Path, paths):
        if item.is_dir():
            found += sorted(item.rglob("*.jsonl"))
        elif item.is_file():
            found.append(item)
        else:
            raise ValueError(f"{item} is neither a trajectory file nor a folder")
    if not found:
        raise ValueError("no trajectory files found")
    return found


def sft_row(trajectory: Mapping[str, Any], tools: Sequence[Mapping[str, Any]], tool_format: str) -> dict[str, Any]:
    """One episode as chat messages with per-message ``train`` flags (see the module doc)."""
    messages = list(trajectory["messages"])
    resets = [s["step"] for s in trajectory["steps"] if s.get("context_reset")]
    if resets:
        # turn i of the episode is step i: keep everything before the assistant message of the first
        # turn after the rewrite (that turn was generated in the rewritten context)
        assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        cut = assistants[resets[0]] if len(assistants) > resets[0] else len(messages)
        messages = messages[:cut]
    rendered = chat_messages(messages, tools, tool_format)
    # the renderer merges consecutive tool results into one user turn; the flags follow the roles
    out = []
    for message in rendered:
        train = message["role"] == "assistant"
        out.append({**message, "train": train})
    policy = sum(m.get("source") == "policy" for m in messages)
    if policy != sum(m["train"] for m in out):
        raise ValueError("the policy's messages and the assistant turns differ; cannot build the train mask")
    episode = trajectory["episode"]
    return {
        "messages": out,
        **({"tools": [dict(t) for t in tools]} if tool_format == "openai" else {}),
        "harness": episode.get("harness"), "task_id": episode.get("task_id"), "seed": episode.get("seed"),
        "reward": episode.get("reward"), "context_truncated": bool(resets), "datasource": DATASOURCE,
    }  # fmt: skip


def episode_tools(episode: Mapping[str, Any], tasks: str) -> list[dict[str, Any]]:
    """The tool schemas an episode saw, rebuilt from its harness, task and seed, and checked
    against the spec hash the trajectory recorded."""
    harness = str(episode.get("harness"))
    try:
        env = make_env(harness, tasks)
    except HarnessSpecError as exc:
        raise ValueError(f"cannot rebuild the tools of the trajectory's harness {harness!r}: {exc}") from None
    try:
        _, info = env.reset(seed=episode.get("seed"), options={"task_id": episode.get("task_id")})
        if episode.get("spec_hash") and info["spec_hash"] != episode["spec_hash"]:
            raise ValueError(
                f"harness {harness} now has spec hash {info['spec_hash']}, the trajectory was recorded under "
                f"{episode['spec_hash']}: its tools cannot be rebuilt"
            )
        return env.tool_interface.schemas()
    finally:
        env.close()


def sft_rows(
    paths: Iterable[str | Path], *, tasks: str = "builtin", tool_format: str = "hermes", min_reward: float | None = 1.0
) -> tuple[list[dict[str, Any]], int]:
    """SFT rows of every trajectory whose reward reaches ``min_reward`` (None keeps all); returns the
    rows and how many trajectories were skipped for their reward."""
    rows, skipped = [], 0
    tools_cache: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for path in trajectory_files(paths):
        trajectory = read_trajectory(path)
        episode = trajectory["episode"]
        if min_reward is not None and float(episode.get("reward") or 0.0) < min_reward:
            skipped += 1
            continue
        key = (episode.get("harness"), episode.get("task_id"), episode.get("seed"), episode.get("spec_hash"))
        if key not in tools_cache:
            tools_cache[key] = episode_tools(episode, tasks)
        rows.append(sft_row(trajectory, tools_cache[key], tool_format))
    return rows, skipped


def write_jsonl(rows: Iterable[Mapping[str, Any]], path: str | Path) -> int:
    """Write rows as JSON lines; returns the count. An empty dataset is an error, not an empty file."""
    rows = list(rows)
    if not rows:
        raise ValueError("the dataset would be empty")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return len(rows)


# --------------------------------------------------------------------------- command line


def add_export_parser(sub: Any) -> None:
    """``harness-gym export prompts|sft`` (kept here so the CLI module only wires it in)."""
    export = sub.add_parser("export", help="datasets for other trainers: rollout prompts, SFT conversations")
    kinds = export.add_subparsers(dest="kind", required=True)
    prompts = kinds.add_parser("prompts", help="rollout requests with their opening prompt (TRL, verifiers, OpenRLHF)")
    prompts.add_argument("--tasks", default="builtin:train", help="task suite, e.g. builtin:train")
    prompts.add_argument("--harnesses", default="training", help="what `bench --configs` takes (comma-separated)")
    prompts.add_argument("--repeats", type=int, default=1, help="rows per (harness, task), each with its own seed")
    prompts.add_argument("--task-limit", type=int, help="use only the first N tasks")
    prompts.add_argument("--seed", type=int, default=0, help="base seed of the rows' episodes")
    prompts.add_argument(
        "--tool-format", default="openai", help="openai (tools left to the chat template, TRL), hermes or xml"
    )
    prompts.add_argument("--resample-names", action="store_true", help="draw tool names from each row's seed")
    prompts.add_argument("--out", type=Path, required=True, help="output JSON-lines file")
    prompts.set_defaults(func=_cmd_export_prompts)
    sft = kinds.add_parser("sft", help="bench trajectories as chat messages with a per-message train mask (TRL SFT)")
    sft.add_argument("trajectories", nargs="+", help="trajectory files or folders (bench-results/trajectories)")
    sft.add_argument("--tasks", default="builtin", help="the suite the trajectories ran on (to rebuild their tools)")
    sft.add_argument("--tool-format", default="hermes", help="hermes or xml (tools in the system message) or openai")
    sft.add_argument("--min-reward", type=float, default=1.0, help="keep episodes with at least this reward")
    sft.add_argument("--all", action="store_true", help="keep every episode whatever its reward")
    sft.add_argument("--out", type=Path, required=True, help="output JSON-lines file")
    sft.set_defaults(func=_cmd_export_sft)


def _cmd_export_prompts(args: Any) -> int:
    rows = prompt_rows(
        args.tasks, args.harnesses, repeats=args.repeats, seed=args.seed, task_limit=args.task_limit,
        tool_format=args.tool_format, resample_names=args.resample_names,
    )  # fmt: skip
    count = write_jsonl(rows, args.out)
    harnesses = len({r["harness"] for r in rows})
    print(f"wrote {count} prompts ({harnesses} harnesses, {len({r['task_id'] for r in rows})} tasks) to {args.out}")
    return 0


def _cmd_export_sft(args: Any) -> int:
    rows, skipped = sft_rows(
        args.trajectories,
        tasks=args.tasks,
        tool_format=args.tool_format,
        min_reward=None if args.all else args.min_reward,
    )
    count = write_jsonl(rows, args.out)
    cut = sum(r["context_truncated"] for r in rows)
    print(
        f"wrote {count} conversations to {args.out} ({skipped} below reward {args.min_reward} skipped, "
        f"{cut} cut at their first context rewrite)"
    )
    return 0
