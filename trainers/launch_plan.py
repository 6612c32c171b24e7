"""What ``python -m trainers.launch`` does, as a library: load and check a recipe, plan the
dataset step and the OpenRLHF job (:class:`LaunchPlan`), and check every Ray node first.

The HarnessAdapt loop (:mod:`trainers.harnessadapt`) plans one job per epoch with it."""

from __future__ import annotations

import json
import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from harness_gym import doctor
from harness_gym.design import training_set
from harness_gym.errors import HarnessGymError
from trainers.dataset import build, write_dataset
from trainers.executor_settings import SETTINGS_ENV, ExecutorSettings
from trainers.openrlhf_args import check_flags, openrlhf_parser, to_argv

RECIPES_DIR = Path(__file__).resolve().parent / "recipes"
REPO_ROOT = Path(__file__).resolve().parent.parent
AGENT_FILE = "trainers/agent_func.py"
ORDER_HOOK = "trainers.ordering.keep_prompt_order"
GROUP_ESTIMATORS = ("dr_grpo", "group_norm", "rloo", "reinforce_baseline")
# flags the launcher owns: they follow from the recipe's other fields
MANAGED_FLAGS = (
    "train.agent_func_path", "actor.model_name_or_path", "data.prompt_dataset", "data.input_key",
    "data.label_key", "eval.dataset", "ckpt.path", "ckpt.output_dir",
)  # fmt: skip


class RecipeError(HarnessGymError, ValueError):
    """A recipe is invalid; the message says where."""


def recipe_schema() -> dict[str, Any]:
    return json.loads(resources.files("trainers").joinpath("schemas/recipe.schema.json").read_text(encoding="utf-8"))


def find_recipe(name: str) -> Path:
    """A recipe file by path or by name (``harness-scaling-grpo``)."""
    path = Path(name)
    if path.is_file():
        return path
    packaged = RECIPES_DIR / f"{name.removesuffix('.yaml')}.yaml"
    if packaged.is_file():
        return packaged
    known = sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))
    raise RecipeError(f"no recipe file or packaged recipe named {name!r}; packaged: {known}")


def apply_overrides(recipe: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """``--set a.b=value`` edits: the first dotted part picks the section; under ``openrlhf`` the rest
    is the flag name (flags contain dots). ``null`` removes the key."""
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise RecipeError(f"--set takes KEY=VALUE, got {item!r}")
        value = yaml.safe_load(raw)
        head, _, rest = key.partition(".")
        node = recipe
        parts = [head, rest] if head == "openrlhf" and rest else key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise RecipeError(f"--set {key}: {part} is not a section")
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
    return recipe


def load_recipe(name: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Read, override and validate a recipe (schema first, then consistency)."""
    path = find_recipe(name)
    try:
        recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise RecipeError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(recipe, dict):
        raise RecipeError(f"{path}: a recipe is a mapping, got {type(recipe).__name__}")
    recipe = apply_overrides(recipe, overrides)
    validator = jsonschema.Draft202012Validator(recipe_schema())
    errors = sorted(validator.iter_errors(recipe), key=lambda e: list(e.absolute_path))
    if errors:
        lines = [f"  $.{'.'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors[:10]]
        raise RecipeError(f"{path} does not match the recipe schema:\n" + "\n".join(lines))
    check_consistency(recipe, str(path))
    return recipe


def check_consistency(recipe: Mapping[str, Any], where: str) -> None:
    """What the schema cannot say: the algorithm and the flags agree."""
    flags = recipe["openrlhf"]
    owned = sorted(set(flags) & set(MANAGED_FLAGS))
    if owned:
        raise RecipeError(f"{where}: the launcher sets {owned} itself; remove them from `openrlhf`")
    estimator = flags.get("algo.advantage.estimator", "gae")
    samples = int(flags.get("rollout.n_samples_per_prompt", 1))
    if recipe["algorithm"] == "grpo":
        if estimator not in GROUP_ESTIMATORS:
            raise RecipeError(f"{where}: GRPO needs a group estimator {GROUP_ESTIMATORS}, not {estimator!r}")
        if samples < 2:
            raise RecipeError(f"{where}: GRPO needs rollout.n_samples_per_prompt ≥ 2 (a group), got {samples}")
    elif estimator != "gae":
        raise RecipeError(f"{where}: PPO uses the critic's GAE (algo.advantage.estimator: gae), not {estimator!r}")
    if flags.get("algo.dynamic_filtering_enable") and samples < 2:
        raise RecipeError(f"{where}: dynamic filtering drops all-pass/all-fail groups; it needs n_samples ≥ 2")
    if flags.get("train.colocate_all") and flags.get("vllm.enable_sleep") and not flags.get("ds.enable_sleep"):
        raise RecipeError(
            f"{where}: a colocated run that sleeps vLLM between phases must sleep DeepSpeed too "
            "(ds.enable_sleep: true), or the actor keeps its memory while vLLM generates"
        )
    dataset = recipe["dataset"]
    if recipe["kind"] == "harness-scaling" and dataset["kind"] != "schedule":
        raise RecipeError(f"{where}: Harness Scaling trains on a schedule dataset, not {dataset['kind']!r}")
    if recipe["kind"] == "harnessadapt" and dataset["kind"] != "harness":
        raise RecipeError(f"{where}: HarnessAdapt trains on one harness at a time (dataset kind: harness)")
    if dataset["kind"] == "schedule":
        _check_assignment(dataset, where)
    tasks_per_step = dataset.get("tasks_per_step")
    batch = flags.get("rollout.batch_size")
    if tasks_per_step and batch and tasks_per_step != batch:
        raise RecipeError(
            f"{where}: dataset.tasks_per_step ({tasks_per_step}) must equal rollout.batch_size ({batch}), or the "
            "schedule's steps do not line up with OpenRLHF's"
        )


def _check_assignment(dataset: Mapping[str, Any], where: str) -> None:
    """Locality-aware assignment needs K different configurations per task (the anchor and its K-1
    nearest): a single-configuration set such as ``base`` has none, and the dataset step would fail
    on the cluster after ``--dry-run`` had passed."""
    try:
        configs = training_set(dataset.get("training_set", "oa18"), int(dataset.get("seed", 0)))
    except ValueError as exc:
        raise RecipeError(f"{where}: dataset.training_set: {exc}") from None
    k, assignment = int(dataset.get("k", 2)), dataset.get("assignment", "locality")
    if assignment == "locality" and k > len(configs):
        raise RecipeError(
            f"{where}: dataset.assignment=locality gives each task K={k} different configurations, but "
            f"training_set={dataset.get('training_set', 'oa18')} has {len(configs)}; use "
            "dataset.assignment=repeat (the same configuration K times) or a smaller dataset.k"
        )


@dataclass
class LaunchPlan:
    """Everything one OpenRLHF job needs, computed before anything runs."""

    recipe: dict[str, Any]
    output_dir: Path
    dataset_path: Path
    eval_dataset_path: Path | None
    flags: dict[str, Any]
    runtime_env: dict[str, Any]
    address: str

    @property
    def argv(self) -> list[str]:
        return to_argv(self.flags)

    def command(self) -> list[str]:
        return [
            "ray", "job", "submit", "--address", self.address,
            "--runtime-env-json", json.dumps(self.runtime_env, sort_keys=True),
            "--", "python3", "-m", "openrlhf.cli.train_ppo_ray", *self.argv,
        ]  # fmt: skip

    def shell_lines(self) -> list[str]:
        """The dataset commands and the job command, as a shell would take them."""
        return [render(words) for words in (*self.dataset_commands(), self.command())]

    def dataset_commands(self) -> list[list[str]]:
        out = [_dataset_command(self.recipe["dataset"], self.dataset_path)]
        if self.eval_dataset_path is not None:
            out.append(_dataset_command(self.recipe["eval_dataset"], self.eval_dataset_path))
        return out


def _dataset_command(settings: Mapping[str, Any], path: Path) -> list[str]:
    words = ["python", "-m", "trainers.dataset", "--out", str(path)]
    for key, value in settings.items():
        if value is None:
            continue
        flag = "--" + key.replace("_", "-")
        words += [flag, ",".join(value) if isinstance(value, list) else str(value)]
    return words


def plan(
    recipe: Mapping[str, Any],
    *,
    output_dir: Path | None = None,
    dataset_path: Path | None = None,
    model: str | None = None,
    extra_flags: Mapping[str, Any] | None = None,
    check: bool = True,
) -> LaunchPlan:
    """The job for a validated recipe; ``model``, ``dataset_path`` and ``extra_flags`` let the
    HarnessAdapt loop point an epoch at its checkpoint, dataset and resume flags."""
    recipe = dict(recipe)
    out = (output_dir or Path(recipe.get("output_dir") or f"runs/{recipe['recipe']}")).resolve()
    dataset = dataset_path or out / "data" / "prompts.jsonl"
    eval_path = out / "data" / "eval.jsonl" if recipe.get("eval_dataset") else None
    settings = dict(recipe.get("executor") or {})
    settings.setdefault("rollout_log", str(out / "rollouts.jsonl"))
    ExecutorSettings(**settings)  # same checks the executor will make on the cluster
    flags: dict[str, Any] = {
        "train.agent_func_path": AGENT_FILE,
        "actor.model_name_or_path": model or recipe["model"],
        "data.prompt_dataset": str(dataset),
        "data.input_key": "prompt",
        "data.label_key": "label",
        "ckpt.path": str(out / "ckpt"),
        "ckpt.output_dir": str(out / "model"),
    }
    if eval_path is not None:
        flags["eval.dataset"] = str(eval_path)
    flags.update(recipe["openrlhf"])
    flags.setdefault("logger.tensorboard_dir", str(out / "tensorboard"))
    flags.update(extra_flags or {})
    ray = dict(recipe.get("ray") or {})
    runtime_env: dict[str, Any] = {
        "working_dir": str(Path(ray.get("working_dir") or REPO_ROOT).resolve()),
        "excludes": ray.get("excludes", [".git", ".venv", "runs", "**/__pycache__"]),
        "env_vars": {SETTINGS_ENV: json.dumps(settings, sort_keys=True), **(ray.get("env_vars") or {})},
    }
    if ray.get("keep_prompt_order", recipe["dataset"]["kind"] == "schedule"):
        runtime_env["worker_process_setup_hook"] = ORDER_HOOK
    launch = LaunchPlan(recipe, out, dataset, eval_path, flags, runtime_env, ray.get("address", "auto"))
    if check:
        check_flags(launch.argv, openrlhf_parser())
    return launch


def write_datasets(launch: LaunchPlan) -> None:
    write_dataset(build(launch.recipe["dataset"]), launch.dataset_path, launch.recipe["dataset"])
    if launch.eval_dataset_path is not None:
        write_dataset(build(launch.recipe["eval_dataset"]), launch.eval_dataset_path, launch.recipe["eval_dataset"])


def check_nodes(
    output_dir: Path, workers: int = 1, runtime_env: Mapping[str, Any] | None = None
) -> dict[str, list[dict[str, str]]]:
    """Run ``harness-gym doctor`` on every alive node of the connected Ray cluster (a task pinned to
    each node), plus a check that ``output_dir`` is the same folder there (shared storage): a probe
    file written here must be readable on every node. Returns the checks per node."""
    import ray  # optional dependency (the ray extra), needed only on a cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    output_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_hex(8)
    probe = output_dir / f".harness-gym-shared-{token}"
    probe.write_text(token)
    remote = ray.remote(num_cpus=0, max_retries=0)(_node_checks)
    try:
        refs = {
            node["NodeManagerAddress"] + "/" + node["NodeID"][:8]: remote.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
                runtime_env=dict(runtime_env or {}),
            ).remote(str(probe), token, workers)
            for node in ray.nodes()
            if node["Alive"]
        }
        return dict(zip(refs, ray.get(list(refs.values()), timeout=900), strict=True))
    finally:
        probe.unlink(missing_ok=True)


def _node_checks(probe: str, token: str, workers: int) -> list[dict[str, str]]:
    """On one node: the doctor's checks and whether the output folder is shared with the driver."""
    checks = doctor.as_records(doctor.run_checks(workers=workers, docker=False, sandboxes=workers))
    try:
        shared = Path(probe).read_text() == token
    except OSError:
        shared = False
    detail = f"{Path(probe).parent} {'is' if shared else 'is NOT'} the driver's folder (must be on shared storage)"
    checks.append({"name": "output folder shared", "status": doctor.OK if shared else doctor.FAIL, "detail": detail})
    return checks


def refuse_unready(results: Mapping[str, Sequence[Mapping[str, str]]]) -> None:
    """Raise :class:`RecipeError` naming every node and check that would break training."""
    problems = [
        f"{node}: {check['name']}: {check['detail']}"
        for node, checks in results.items()
        for check in checks
        if check["status"] == "fail"
    ]
    if problems:
        raise RecipeError("nodes that cannot run sandboxed episodes:\n  " + "\n  ".join(problems))


def preflight(launch: LaunchPlan) -> None:
    """Doctor every node of the cluster the job goes to; refuse to start where a node cannot sandbox."""
    import ray  # optional dependency (the ray extra), needed only on a cluster

    # `ray job submit` takes the dashboard (http://...); the driver here joins the cluster of this node
    ray.init(address="auto" if launch.address.startswith("http") else launch.address, log_to_driver=False)
    try:
        workers = int((launch.recipe.get("executor") or {}).get("env_workers") or 1)
        results = check_nodes(launch.output_dir, workers)
    finally:
        ray.shutdown()
    for node, checks in results.items():
        print(f"# doctor {node}: " + ", ".join(f"{c['name']}={c['status']}" for c in checks), flush=True)
    refuse_unready(results)


def render(command: Sequence[str]) -> str:
    return " ".join(shlex.quote(word) for word in command)
