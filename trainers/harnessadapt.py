"""The HarnessAdapt-RL loop: the harness H = (H0, T, K) evolves with the policy, epoch by epoch.

Per epoch (HarnessAdapt-RL §method):

1. serve the current policy (vLLM's OpenAI-compatible server on the last checkpoint) and roll it out
   on the current harness: the prep rollouts;
2. the skill teacher writes mechanism-level skills from contrast pairs of the prep trajectories;
   the harness teacher proposes candidates H′, each validated, compared with H on the same tasks,
   seeds, policy, skills and budget, and accepted by the rule on pass rate and trainable rate; up to
   ``rounds`` rounds, then the harness is frozen for the epoch;
3. one OpenRLHF epoch on the selected harness, from the last epoch's model.

Written out under the output folder: ``audit.jsonl`` (every proposal and decision), per epoch the
harness used in training (skills included), its dataset, the training metrics; and at the end
``final/pair.json`` with the model and ``final/harness.yaml`` with skills removed, for evaluation.

Each epoch is a fresh OpenRLHF job whose actor starts from the previous epoch's saved model, so the
weights carry over; optimiser state restarts with each epoch (a constant learning rate, as the paper
uses, makes that the only difference).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from harness_gym.agents.openai_chat import OpenAIChatAgent
from harness_gym.evolution import AuditLog, Proposer, TeacherProposer, evolve, rollout
from harness_gym.llm_client import ChatClient
from harness_gym.records import load_records
from harness_gym.skills import SkillTeacher, skills_from_rollouts
from harness_gym.spec import save_spec, spec_hash, strip_skills
from harness_gym.tasks import Task, load_tasks
from trainers.executor_settings import resolve_harness
from trainers.launch_plan import LaunchPlan, plan, write_datasets
from trainers.metrics import training_metrics

Policy = Callable[[], Any]
PolicyServing = Callable[[str], contextlib.AbstractContextManager[Policy]]


class EpochTrainer(Protocol):
    """Runs one training epoch for a launch plan; returns the model folder it produced."""

    def train(self, epoch: int, launch: LaunchPlan) -> str: ...


class OpenRLHFEpochTrainer:
    """Writes the epoch's dataset and runs its ``ray job submit`` to completion."""

    def train(self, epoch: int, launch: LaunchPlan) -> str:
        write_datasets(launch)
        code = subprocess.call(launch.command())
        if code != 0:
            raise RuntimeError(f"epoch {epoch}: the OpenRLHF job failed (exit {code}); see `ray job logs`")
        return launch.flags["ckpt.output_dir"]


class PrintingEpochTrainer:
    """Prints what an epoch would run and trains nothing: the model stays as it was. Used by
    ``--dry-run`` and wherever OpenRLHF cannot run (CPU machines)."""

    def __init__(self, echo: Callable[[str], None] = print) -> None:
        self.echo = echo
        self.launches: list[LaunchPlan] = []

    def train(self, epoch: int, launch: LaunchPlan) -> str:
        self.launches.append(launch)
        for line in launch.shell_lines():
            self.echo(line)
        return launch.flags["actor.model_name_or_path"]


@contextlib.contextmanager
def command_policy_server(
    command: str, model: str, port: int, startup_timeout_s: float = 900.0, fmt: str = "hermes"
) -> Iterator[Policy]:
    """Start ``command`` (``vllm serve {model} --port {port} ...``), wait for ``/v1/models``, and
    yield a policy factory of OpenAI chat agents on it; the server is stopped on exit."""
    words = shlex.split(command.format(model=model, port=port))
    process = subprocess.Popen(words, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + startup_timeout_s
    try:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the policy server exited with {process.returncode}: {command}")
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=5) as response:
                    served = json.loads(response.read())["data"][0]["id"]
                break
            except (OSError, ValueError, KeyError, IndexError):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the policy server did not answer within {startup_timeout_s:g} s") from None
                time.sleep(2)
        yield lambda: OpenAIChatAgent(url, served, tool_mode=fmt, temperature=1.0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, 15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=60)


@dataclass
class FinalPair:
    """The deliverable: a model and the harness it was trained with (skills removed for evaluation)."""

    model: str
    harness_path: Path
    harness_hash: str
    epochs: list[dict[str, Any]]


def comparison_tasks(tasks: list[Task], count: int | None, seed: int) -> list[Task]:
    """The fixed task sample every comparison of an epoch uses."""
    if count is None or count >= len(tasks):
        return list(tasks)
    picked = np.random.default_rng(seed).choice(len(tasks), size=count, replace=False)
    return [tasks[int(i)] for i in sorted(picked)]


def harnessadapt_loop(
    recipe: Mapping[str, Any],
    *,
    output_dir: Path,
    serve_policy: PolicyServing,
    proposer: Proposer,
    trainer: EpochTrainer,
    skill_teacher: SkillTeacher | None = None,
    tasks: list[Task] | None = None,
    env_options: Mapping[str, Any] | None = None,
    check_flags: bool = True,
    echo: Callable[[str], None] = print,
) -> FinalPair:
    """Run the loop of a validated ``harnessadapt`` recipe (see the module doc)."""
    evolution = recipe["evolution"]
    dataset = recipe["dataset"]
    seed = int(dataset.get("seed", 0))
    output_dir = Path(output_dir).resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    audit = AuditLog(output_dir / "audit.jsonl")
    suite_tasks = tasks if tasks is not None else load_tasks(dataset["suite"])
    if dataset.get("task_limit"):
        suite_tasks = suite_tasks[: dataset["task_limit"]]
    options = dict(env_options or {})
    executor = recipe.get("executor") or {}
    options.setdefault("sandbox", executor.get("sandbox"))
    if executor.get("max_steps"):
        options.setdefault("max_steps", executor["max_steps"])
    initial = resolve_harness(evolution.get("initial_harness") or dataset["harness"])
    if initial.in_space:
        raise ValueError("HarnessAdapt evolves a spec: the initial harness must be a preset or a spec file")
    spec = initial.spec
    model = recipe["model"]
    epochs: list[dict[str, Any]] = []
    for epoch in range(1, evolution["epochs"] + 1):
        folder = output_dir / f"epoch-{epoch}"
        folder.mkdir(exist_ok=True)
        chosen = comparison_tasks(suite_tasks, evolution.get("comparison_tasks"), seed + epoch)
        echo(f"epoch {epoch}: policy {model}, harness {spec_hash(spec)[:12]}, {len(chosen)} comparison tasks")
        with serve_policy(model) as policy:
            prep = rollout(
                strip_skills(spec), policy, chosen, evolution.get("prep_rollouts_per_task", 4),
                seed=seed + 7 * epoch, env_options=options,
            ).results  # fmt: skip
            skills: list[str] = []
            if evolution.get("skills", True) and skill_teacher is not None:
                written = skills_from_rollouts(skill_teacher, chosen, prep, limit=evolution.get("max_skills", 8))
                skills = list(dict.fromkeys(written))  # a skill written twice is shown once
            current = dict(strip_skills(spec), skills=skills) if skills else strip_skills(spec)
            result = evolve(
                current, proposer, policy, chosen,
                rounds=evolution.get("rounds", 5),
                rollouts_per_task=evolution.get("comparison_rollouts_per_task", 4),
                mode=evolution.get("acceptance", "paper"),
                seed=seed + epoch, env_options=options, prep=prep,
                on_round=lambda index, decision: echo(
                    f"  round {index}: " + ("no decision" if decision is None else decision.reason)
                ),
            )  # fmt: skip
        for entry in result.entries:
            audit.append({"epoch": epoch, **entry})
        spec = result.spec
        harness_path = folder / "harness.yaml"
        save_spec(spec, harness_path)
        launch = plan(
            {**recipe, "dataset": {**dataset, "harness": str(harness_path)}},
            output_dir=folder, model=model, check=check_flags,
        )  # fmt: skip
        model = trainer.train(epoch, launch)
        record: dict[str, Any] = {
            "epoch": epoch,
            "harness": str(harness_path),
            "harness_hash": spec_hash(spec),
            "accepted_rounds": result.accepted_rounds,
            "skills": len(skills),
            "model": model,
        }
        rollouts = launch.output_dir / "rollouts.jsonl"
        if rollouts.is_file():
            metrics = training_metrics(load_records(rollouts))
            (folder / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n", encoding="utf-8")
            record["metrics"] = metrics["overall"]
        epochs.append(record)
        echo(f"epoch {epoch}: accepted rounds {result.accepted_rounds}, model {model}")
    final = output_dir / "final"
    final.mkdir(exist_ok=True)
    evaluation_spec = strip_skills(spec)  # skills are removed at evaluation; tools and hooks stay
    save_spec(evaluation_spec, final / "harness.yaml")
    pair = FinalPair(model, final / "harness.yaml", spec_hash(evaluation_spec), epochs)
    (final / "pair.json").write_text(
        json.dumps({"model": pair.model, "harness": str(pair.harness_path), "harness_hash": pair.harness_hash,
                    "epochs": epochs}, indent=2) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    return pair


def run_recipe(
    recipe: Mapping[str, Any], *, dry_run: bool = False, output_dir: Path | None = None, check: bool = True
) -> int:
    """``python -m trainers.launch <harnessadapt recipe>``: the loop with vLLM serving, the teachers of
    the recipe and OpenRLHF epochs. ``dry_run`` prints the first epoch's plan and runs nothing."""
    evolution = recipe["evolution"]
    out = (output_dir or Path(recipe.get("output_dir") or f"runs/{recipe['recipe']}")).resolve()
    server = evolution.get("policy_server") or {}
    command = server.get("command", "vllm serve {model} --port {port} --served-model-name policy")
    port = int(server.get("port", 8011))
    if dry_run:
        harness = evolution.get("initial_harness") or recipe["dataset"]["harness"]
        resolve_harness(harness)
        first = out / "epoch-1"
        launch = plan(
            {**recipe, "dataset": {**recipe["dataset"], "harness": str(first / "harness.yaml")}},
            output_dir=first, check=check,
        )  # fmt: skip
        print(
            f"# recipe {recipe['recipe']} (harnessadapt, {recipe['algorithm']}): checked; {evolution['epochs']} epochs"
        )
        print(f"# epoch 1: serve the policy: {command.format(model=recipe['model'], port=port)}")
        print(f"# epoch 1: prep rollouts and up to {evolution.get('rounds', 5)} evolution rounds from {harness}")
        print("# epoch 1: train on the selected harness (written to epoch-1/harness.yaml):")
        print("\n".join(launch.shell_lines()))
        return 0
    teacher = evolution.get("teacher") or {}
    if not teacher.get("base_url"):
        raise ValueError("evolution.teacher.base_url is needed: the teachers are OpenAI-compatible endpoints")
    key = os.environ.get(teacher["api_key_env"]) if teacher.get("api_key_env") else None
    client = ChatClient(teacher["base_url"], teacher.get("model", "teacher"), api_key=key)
    fmt = (recipe.get("executor") or {}).get("tool_call_format", "auto")
    harnessadapt_loop(
        recipe,
        output_dir=out,
        serve_policy=lambda model: command_policy_server(
            command, model, port, server.get("startup_timeout_s", 900.0), fmt
        ),
        proposer=TeacherProposer(client),
        skill_teacher=SkillTeacher(client) if evolution.get("skills", True) else None,
        trainer=OpenRLHFEpochTrainer(),
        check_flags=check,
    )
    return 0
