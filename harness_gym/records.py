"""The records every layer above the environment shares: which harnesses a run covers
(:func:`resolve_harnesses`), the episode plan and its seed convention (:func:`plan_episodes`), the
append-only results file (:class:`ResultsFile`, :func:`load_records`) and the trajectory format
(:func:`write_trajectory`, :func:`read_trajectory`).

They live below ``bench``, ``evolution`` and ``trainers`` so each of those can import them without
importing the others (the benchmark runner, the report and the trainer all read and write them).

The trajectory format: one JSON object per line.

    {"type": "episode", "format": "harness-gym-trajectory/1", "episode_id", "harness", "config",
     "task_id", "run", "seed", "reward", "spec_hash", "agent", ...}
    {"type": "message", "index": 0, "role": "system", "source": "system", "content": "..."}
    ... one line per message: role, content, source (system | task | policy | tool | hook |
        workflow | summary | skill), and tool_calls / tool_call_id / name where present
    {"type": "step", "step": 1, "parsed_calls": [...], "parse_errors": [...], "tool_errors": [...],
     "exit_codes": [...], "hooks_fired": [...], "context_reset": false}

Messages are the full transcript (never compressed); ``step`` lines mark where context
management rewrote the prompt (``context_reset``). A trainer masks every message whose source is
not ``policy``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_gym.design import TRAINING_SET, heldout_set
from harness_gym.external.catalog import load_cli, shipped_clis
from harness_gym.harness import SPEC_SUFFIXES, Harness
from harness_gym.jsonl import ResultsFile, load_records  # noqa: F401 (records are read and written through these)
from harness_gym.presets import OUT_OF_SPACE, PRESETS
from harness_gym.space import BASE_CONFIG, HarnessConfig, all_configs
from harness_gym.tasks import Task

QUICK = ("S0T0O0C0W0", "S1T2O0C1W2", "heldout:1", "Harness-ClaudeCodeStyle")
HARNESS_CLASSES = ("training", "heldout", "in_space", "preset", "out_of_space", "external", "custom")


@dataclass(frozen=True)
class HarnessChoice:
    """A harness to run: an environment id (or spec file) and its class (one of ``HARNESS_CLASSES``)."""

    env_id: str
    klass: str
    config: str | None = None
    spec_path: str | None = None

    @property
    def ref(self) -> str:
        """The reference :meth:`harness_gym.harness.Harness.resolve` takes: the spec file, else the id."""
        return self.spec_path or self.env_id


def classify_config(config: HarnessConfig) -> str:
    if config in TRAINING_SET:
        return "training"
    if config in heldout_set():
        return "heldout"
    return "in_space"


def resolve_harnesses(text: str | Sequence[str]) -> list[HarnessChoice]:
    """Parse a harness selection: comma-separated ``training``, ``heldout`` (``heldout:N`` for the
    first N), ``all`` (243), ``base``, ``presets``, ``out-of-space``, ``quick``, ``external`` (the
    light real CLIs), ``external:<name>`` (one real CLI), configuration ids,
    environment ids (``HarnessAdapt-H1``) and spec files (``*.yaml``/``*.json``)."""
    items = [p.strip() for p in (text.split(",") if isinstance(text, str) else text) if p.strip()]
    chosen: list[HarnessChoice] = []

    def add(choice: HarnessChoice) -> None:
        if choice.env_id not in {c.env_id for c in chosen}:
            chosen.append(choice)

    def add_config(config: HarnessConfig) -> None:
        add(HarnessChoice(config.env_id, classify_config(config), config.code))

    for item in items:
        if item == "quick":
            for choice in resolve_harnesses(list(QUICK)):
                add(choice)
        elif item == "training":
            for c in TRAINING_SET:
                add_config(c)
        elif item == "heldout" or item.startswith("heldout:"):
            count = int(item.split(":")[1]) if ":" in item else None
            for c in list(heldout_set())[:count]:
                add_config(c)
        elif item == "all":
            for c in all_configs():
                add_config(c)
        elif item == "base":
            add_config(BASE_CONFIG)
        elif item == "presets":
            for env_id in PRESETS:
                add(HarnessChoice(env_id, "out_of_space" if env_id in OUT_OF_SPACE else "preset"))
        elif item == "external" or item.startswith("external:"):
            clis = [c for c in shipped_clis().values() if not c.heavy] if item == "external" else [load_cli(item)]
            for cli in clis:
                add(HarnessChoice(cli.id, "external"))
        elif item in ("out-of-space", "out_of_space"):
            for env_id in OUT_OF_SPACE:
                add(HarnessChoice(env_id, "out_of_space"))
        else:
            add(harness_choice(item))
    if not chosen:
        raise ValueError("no harness chosen")
    return chosen


def harness_choice(reference: str) -> HarnessChoice:
    """The choice of one harness reference, resolved (and so checked) by :meth:`Harness.resolve`:
    a spec file is ``custom``, a point of the 3^5 space is classified, a preset is a preset."""
    harness = Harness.resolve(reference)
    if reference.endswith(SPEC_SUFFIXES) or Path(reference).is_file():
        path = Path(reference).resolve()
        return HarnessChoice(f"spec:{path.stem}", "custom", None, str(path))
    if harness.config is not None:
        config = HarnessConfig.parse(harness.config)
        return HarnessChoice(config.env_id, classify_config(config), config.code)
    return HarnessChoice(harness.name, "out_of_space" if harness.name in OUT_OF_SPACE else "preset")


@dataclass(frozen=True)
class EpisodePlan:
    harness: HarnessChoice
    task_id: str
    run: int
    seed: int
    role: str = "model"  # or a calibration agent's name

    @property
    def key(self) -> str:
        key = f"{self.harness.env_id}|{self.task_id}|{self.run}"
        return key if self.role == "model" else f"{self.role}:{key}"


def episode_seed(base_seed: int, task_index: int, run: int = 0) -> int:
    """The one seed convention: the seed of run ``run`` of the ``task_index``-th task. It depends on
    task and run only, so every harness (and every command: bench, evolution, check) pairs them."""
    return base_seed + 1000 * run + task_index


def plan_episodes(
    harnesses: Sequence[HarnessChoice],
    tasks: Sequence[Task],
    runs: int,
    seed: int = 0,
    calibration: Sequence[str] = (),
) -> list[EpisodePlan]:
    """Every (harness, task, run) for the model, then once per (harness, task) for each
    calibration agent. The seed depends on task and run only, so harnesses are paired."""
    model = [
        EpisodePlan(h, t.id, r, episode_seed(seed, i, r))
        for h in harnesses
        for i, t in enumerate(tasks)
        for r in range(runs)
    ]
    calibrate = [
        EpisodePlan(h, t.id, 0, episode_seed(seed, i), role)
        for role in calibration
        for h in harnesses
        for i, t in enumerate(tasks)
    ]
    return model + calibrate


FORMAT = "harness-gym-trajectory/1"
STEP_KEYS = (
    "parsed_calls",
    "parse_errors",
    "tool_errors",
    "exit_codes",
    "workflow_feedback",
    "hooks_fired",
    "context_reset",
    "truncation_reason",
    "terminated_reason",
)


def write_trajectory(
    path: Path, header: Mapping[str, Any], transcript: Sequence[Mapping[str, Any]], infos: Sequence[Mapping[str, Any]]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(json.dumps({"type": "episode", "format": FORMAT, **header}, ensure_ascii=False) + "\n")
        for index, message in enumerate(transcript):
            handle.write(json.dumps({"type": "message", "index": index, **message}, ensure_ascii=False) + "\n")
        for info in infos[1:]:
            step = {"type": "step", "step": info.get("step")}
            step.update({k: info[k] for k in STEP_KEYS if k in info})
            handle.write(json.dumps(step, ensure_ascii=False, default=str) + "\n")


def read_trajectory(path: str | Path) -> dict[str, Any]:
    """``{"episode": {...}, "messages": [...], "steps": [...]}`` from a trajectory file."""
    episode: dict[str, Any] = {}
    messages: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        kind = item.pop("type", None)
        if kind == "episode":
            episode = item
        elif kind == "message":
            item.pop("index", None)
            messages.append(item)
        elif kind == "step":
            steps.append(item)
        else:
            raise ValueError(f"{path}:{number}: unknown line type {kind!r}")
    if episode.get("format") != FORMAT:
        raise ValueError(f"{path}: not a {FORMAT} file")
    return {"episode": episode, "messages": messages, "steps": steps}
