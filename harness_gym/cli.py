"""The ``harness-gym`` command line.

    harness-gym configs [--set training|heldout|all] [--neighbours ID]
    harness-gym schedule --tasks N [--tasks-per-step B] [--k 2] [--assignment locality] [--seed 0]
    harness-gym check [--configs training,heldout] [--tasks builtin] [--format hermes] [--out FILE]
    harness-gym bench [--agent hf|openai|reference|python:mod:fn] [--configs quick] [--runs 3] ...
    harness-gym report results.jsonl [--out DIR]
    harness-gym compare a.jsonl b.jsonl
    harness-gym export-model [--out DIR]
    harness-gym view trajectory.jsonl [--html page.html]
    harness-gym worlds list | build NAME... [--force] | path NAME | rm NAME...
    harness-gym serve-env Harness-S1T2O0C1W2 [--port 8000] [--max-sessions 32] [--idle-timeout 600]
    harness-gym export prompts|sft ... (datasets for TRL, verifiers, OpenRLHF; see harness_gym.export)

``check`` runs the privileged reference agent on every task in every chosen harness: a
solvability benchmark of the harnesses themselves (every task must score 1.0 everywhere).
``bench`` benchmarks an agent across harnesses and writes results, trajectories and a report.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import shlex
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from harness_gym import doctor
from harness_gym.agents import ReferenceAgent
from harness_gym.agents.factory import check_agent, make_agent, validate_agent
from harness_gym.bench import (
    BenchRunner,
    compare_results,
    load_records,
    read_trajectory,
    render_html,
    render_text,
    resolve_harnesses,
    write_report,
)
from harness_gym.bench.report import load_mutation_scores
from harness_gym.bench.runner import CALIBRATION, BenchAborted
from harness_gym.design import TRAINING_SET, build_schedule, heldout_set, training_set
from harness_gym.episode import Episode, run_suite
from harness_gym.export import add_export_parser
from harness_gym.external import install as external_install
from harness_gym.external.catalog import load_cli
from harness_gym.external.describe import describe_cli
from harness_gym.model_export import export_model, vllm_cpu_command
from harness_gym.model_server import ModelServer
from harness_gym.replication import probe
from harness_gym.space import HarnessConfig, all_configs, neighbours
from harness_gym.tasks import load_tasks, validate_suite
from harness_gym.tasks.audit import audit, load_exploits
from harness_gym.tasks.generator import generate
from harness_gym.tasks.mutation import mutation_audit
from harness_gym.tool_formats import format_names
from harness_gym.worlds import WorldError, build_world, list_worlds, load_world, remove_world

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
    configs = parse_configs(args.configs)
    tasks = [t for t in load_tasks(args.tasks) if t.solution]
    if not tasks:
        raise ValueError(f"no task of {args.tasks} has a reference solution to check")
    out = open(args.out, "w", encoding="utf-8") if args.out else None  # noqa: SIM115
    failures: list[str] = []
    started = time.perf_counter()
    per_config: dict[str, list[float]] = {}
    with tqdm(total=len(configs) * len(tasks), unit="episode", desc="reference agent", file=sys.stderr) as bar:
        for config in configs:

            def record(episode: Episode, code: str = config.code) -> None:
                result = episode.result
                per_config.setdefault(code, []).append(result.reward)
                if result.reward != 1.0:
                    failures.append(
                        f"{code} {episode.task_id}: reward {result.reward} "
                        f"{result.final_info.get('grader_error') or result.final_info.get('reward_breakdown')}"
                    )
                if out:
                    line = {"config": code, "task": episode.task_id, "seed": episode.seed}
                    out.write(json.dumps({**line, "reward": result.reward, "steps": result.steps}) + "\n")
                bar.update()

            # the one episode loop and seed convention bench and evolution use
            run_suite(config, lambda: ReferenceAgent(args.format), tasks, seed=args.seed, on_episode=record)
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


def _cmd_bench(args: argparse.Namespace) -> int:
    """Validate everything (harnesses, tasks, output folder, agent, endpoint) before the model
    loads or an episode starts, then run; a run whose episodes mostly error exits non-zero."""

    options = {
        "model": args.model,
        "gguf_file": args.gguf_file,
        "base_url": args.base_url,
        "api_key": os.environ.get(args.api_key_env) if args.api_key_env else None,
        "tool_mode": args.tool_mode,
        "max_new_tokens": args.max_new_tokens,
        "max_tokens": args.max_new_tokens,
        "temperature": args.temperature,
    }
    options = {k: v for k, v in options.items() if v is not None}
    calibration = [] if args.calibration in ("", "none") else [c.strip() for c in args.calibration.split(",")]
    unknown = [c for c in calibration if c not in CALIBRATION]
    if unknown:
        raise ValueError(f"--calibration: unknown agents {unknown}; choose from {', '.join(CALIBRATION)} or none")
    calibration = [c for c in calibration if c != args.agent]  # the reference agent needs no reference
    env_options: dict[str, object] = {}
    if args.max_steps:
        env_options["max_steps"] = args.max_steps
    if args.sandbox:
        env_options["sandbox"] = args.sandbox
    if args.world:
        env_options["world"] = args.world
    agent_info = {
        "agent": args.agent,
        "model": args.model,
        "gguf_file": args.gguf_file,
        "endpoint": args.base_url,
        "tool_mode": args.tool_mode,
        "max_new_tokens": args.max_new_tokens,
        "temperature": args.temperature,
    }
    runner = BenchRunner(
        functools.partial(make_agent, args.agent, **options),
        resolve_harnesses(args.configs),
        args.tasks,
        runs=args.runs,
        out_dir=args.out,
        workers=args.workers,
        executor="ray" if args.ray else args.executor,
        seed=args.seed,
        resume=args.resume,
        env_options=env_options,
        task_count=args.task_count,
        ray_address=args.ray_address,
        save_trajectories=not args.no_trajectories,
        agent_info=agent_info,
        calibration=calibration,
        max_error_rate=None if args.max_error_rate >= 1 else args.max_error_rate,
    )
    runner.prepare()  # the output folder and, with --resume, the recorded manifest
    validate_agent(args.agent, options)
    if args.agent == "hf":
        print("loading the in-process model (once per worker; about 30 s on 2 cores)...", file=sys.stderr)
    elif args.agent == "openai":
        print(f"probing {args.base_url} ...", file=sys.stderr)
    check = check_agent(args.agent, options)  # builds the agent once: loads the model, probes the endpoint
    for notice in check.notices:
        print(f"harness-gym: notice: {notice}", file=sys.stderr)
    runner.agent_factory = functools.partial(make_agent, args.agent, **check.options)
    runner.notices = check.notices
    started = time.perf_counter()
    aborted: str | None = None
    try:
        results = runner.run()
    except BenchAborted as exc:
        aborted, results = str(exc), runner.results.path
    records = load_records(results)
    paths = write_report(records, args.out)
    print(f"\n{len(records)} episode records in {results} ({time.perf_counter() - started:.0f} s this run)")
    print(f"report: {paths['markdown']}")
    print(paths["markdown"].read_text(encoding="utf-8").split("## Per harness")[0])
    if aborted:
        print(f"harness-gym: error: {aborted}", file=sys.stderr)
        return 1
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    scores = load_mutation_scores(args.mutation_scores) if args.mutation_scores else None
    paths = write_report(load_records(args.results), args.out or Path(args.results).parent, mutation_scores=scores)
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0


def _cmd_compare(args: argparse.Namespace) -> int:
    result = compare_results(load_records(args.a), load_records(args.b))
    print(
        f"{result['shared_units']} (harness, task) pairs matched; dropped {result['only_a']} only in {args.a}"
        f" and {result['only_b']} only in {args.b}"
    )
    if not result["shared_units"]:
        print("nothing to compare: the two runs share no (harness, task) pair", file=sys.stderr)
        return 1
    print(f"{'class':<14}{'units':>7}{'A %':>8}{'B %':>8}{'B-A':>8}   95% CI")
    for klass, row in result.items():
        if klass in ("shared_units", "only_a", "only_b"):
            continue
        print(
            f"{klass:<14}{row['units']:>7}{100 * row['a']:>8.1f}{100 * row['b']:>8.1f}{100 * row['difference']:>+8.1f}"
            f"   [{100 * row['ci95'][0]:+.1f}, {100 * row['ci95'][1]:+.1f}]"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


def _cmd_view(args: argparse.Namespace) -> int:
    trajectory = read_trajectory(args.trajectory)
    if args.html:
        Path(args.html).write_text(render_html(trajectory), encoding="utf-8")
        print(f"wrote {args.html}")
    else:
        print(render_text(trajectory, colour=sys.stdout.isatty()))
    return 0


def _cmd_tasks(args: argparse.Namespace) -> int:
    if args.action == "generate":
        out = args.out or Path("generated-tasks")
        with tqdm(total=args.count, unit="task", desc="generating", file=sys.stderr) as bar:
            checked = {} if args.mutants is None else {"mutants": args.mutants}
            ids = generate(out, args.count, args.seed, progress=lambda n: bar.update(1), **checked)
        print(f"{len(ids)} verified tasks in {out} (load them with tasks='generated:{out}')")
        if len(ids) < args.count:
            print(f"only {len(ids)} distinct mutations that the hidden tests detect exist in the built-in projects")
        return 0
    if args.action == "audit":
        return _cmd_audit(args)
    suite = validate_suite(args.suite)
    if args.action == "list":
        print(f"{'task':<34}{'family':<20}{'split':<7}{'grading':<11}{'solution':<9}mount / image")
        for task in suite.tasks:
            grading = (task.judge or {}).get("type", "automated")
            where = task.image or task.mount_path
            print(
                f"{task.id:<34}{task.metadata.get('family', '')!s:<20}{task.split:<7}{grading:<11}"
                f"{'yes' if task.solution else 'no':<9}{where}"
            )
    splits = Counter(t.split for t in suite.tasks)
    families = Counter(str(t.metadata.get("family", "unknown")) for t in suite.tasks)
    print(
        f"{args.suite}: {len(suite.tasks)} tasks ({', '.join(f'{k} {v}' for k, v in sorted(splits.items()))}; "
        f"{', '.join(f'{k} {v}' for k, v in sorted(families.items()))}), "
        f"{sum(bool(t.solution) for t in suite.tasks)} with a reference solution, {len(suite.errors)} broken"
    )
    for error in suite.errors:
        print(f"  BROKEN {error}")
    if args.action == "check":
        solvable = [t.id for t in suite.tasks if t.solution]
        if not solvable:
            print("no task of this suite has a reference solution: nothing to check")
            return 1 if suite.errors else 0
        check_args = argparse.Namespace(configs=args.configs, tasks=args.suite, format="hermes", seed=0, out=None)
        return max(_cmd_check(check_args), 1 if suite.errors else 0)
    return 1 if suite.errors else 0


def _cmd_mutation_audit(args: argparse.Namespace) -> int:
    """Grade N mutants of every reference solution; exit status 1 when any mutant survives."""
    if args.world:
        load_world(args.world)
    loaded = load_tasks(args.suite)
    tasks = [t for t in loaded if t.solution]
    for task in loaded:  # a row whose gold patch could not be read (R2E): say why it is not audited
        if not task.solution and task.metadata.get("reference_error"):
            print(f"{task.id}: no reference solution ({task.metadata['reference_error']})", file=sys.stderr)
    if not tasks:
        raise ValueError(f"no task of {args.suite} has a reference solution to mutate")
    count = None if args.mutants == 0 else args.mutants
    with tqdm(total=0, unit="mutant", desc="mutation audit", file=sys.stderr) as bar:

        def progress(kind: str, n: int) -> None:
            if kind == "total":
                bar.total += n
                bar.refresh()
            else:
                bar.update(n)

        report = mutation_audit(
            tasks,
            count,
            seed=args.seed,
            workers=args.workers,
            backend=args.sandbox,
            results_path=args.results,
            progress=progress,
            world=args.world,
        )
    print(report.table())
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=2), encoding="utf-8")
        print(f"wrote {args.json}")
    if args.markdown:
        args.markdown.write_text(report.markdown(), encoding="utf-8")
        print(f"wrote {args.markdown}")
    unknown = [t.task_id for t in report.tasks if t.score is None]
    return 1 if report.with_survivors() or unknown else 0


def _cmd_audit(args: argparse.Namespace) -> int:
    """Run the exploit library against a suite; exit status 1 when any task is exploitable."""
    if args.mutants is not None:
        return _cmd_mutation_audit(args)
    if args.world:
        load_world(args.world)  # an unknown world is a clear error now, not an audit error in every cell
    tasks = load_tasks(args.suite)
    exploits = load_exploits(args.exploit_file, args.exploits.split(",") if args.exploits else None)
    with tqdm(total=len(tasks) * len(exploits), unit="run", desc="audit", file=sys.stderr) as bar:
        report = audit(
            tasks,
            exploits,
            workers=args.workers,
            backend=args.sandbox,
            progress=lambda _: bar.update(1),
            world=args.world,
        )
    print(report.table())
    if args.json:
        args.json.write_text(json.dumps(report.to_json(), indent=2), encoding="utf-8")
        print(f"wrote {args.json}")
    failed = [c for c in report.cells if c.audit_error]
    if failed:  # an exploit the audit could not run proves nothing: never a clean report
        print(f"{len(failed)} of {len(report.cells)} runs could not be audited (marked !)", file=sys.stderr)
    return 1 if report.exploitable() or failed else 0


def _cmd_export_model(args: argparse.Namespace) -> int:
    folder = export_model(args.out, model=args.model, gguf_file=args.gguf_file, force=args.force)
    print(f"wrote {folder} (a chat template TRL's GRPOTrainer takes with tools); serve it on CPU with:")
    print(f"  {vllm_cpu_command(folder)}")
    return 0


def _cmd_probe(args: argparse.Namespace) -> int:
    if not (Path(args.model) / "config.json").exists():
        raise ValueError(f"--model {args.model}: not a transformers model folder (no config.json); see export-model")
    result = probe.probe(args.model, args.configs, args.tasks, task_limit=args.task_limit, progress=True)
    if args.compare:
        result["agreement"] = probe.rank_agreement(result, probe.bench_pass_at_1(args.compare))
    for path in probe.write(result, args.out):
        print(f"wrote {path}")
    print(probe.render_markdown(result))
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    server = ModelServer(args.model, args.gguf_file, args.host, args.port)
    print(f"serving {server.name} at {server.url} (OpenAI-compatible; Ctrl-C stops)", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.httpd.serve_forever()
    return 0


def _cmd_worlds(args: argparse.Namespace) -> int:
    names = args.names
    if args.action == "list":
        rows = list_worlds()
        print(f"{'world':<12} {'built':<6} {'size MB':>8}  {'digest':<16}  description")
        for row in rows:
            size = "" if row["size_mb"] is None else f"{row['size_mb']:.0f}"
            built = "yes" if row["built"] else "no"
            print(f"{row['name']:<12} {built:<6} {size:>8}  {row['digest']:<16}  {row['description']}")
        return 0
    if not names:
        raise WorldError(f"'worlds {args.action}' needs at least one world name")
    if args.action == "build":
        started = time.monotonic()

        def progress(line: str) -> None:
            print(f"[{time.monotonic() - started:5.0f} s] {line}", flush=True)

        for name in names:
            build_world(name, force=args.force, progress=progress)
    elif args.action == "path":
        for name in names:
            root = load_world(name).root()
            print(root if root is not None else "/ (the host's own folders)")
    else:
        for name in names:
            removed = remove_world(name)
            print(f"{name}: removed {len(removed)} built folder(s)" if removed else f"{name}: nothing built")
    return 0


def _cmd_external(args: argparse.Namespace) -> int:
    if args.action == "list":
        print(f"{'id':<27} {'version':<10} {'api':<9} {'installed':<9} {'size MB':>8}  package")
        for row in external_install.list_installs():
            size = "" if row["size_mb"] is None else f"{row['size_mb']:.0f}"
            installed = "yes" if row["installed"] else "no"
            print(
                f"{row['id']:<27} {row['version']:<10} {row['wire_api']:<9} {installed:<9} {size:>8}  {row['package']}"
            )
        return 0
    if not args.names:
        raise ValueError(f"'external {args.action}' needs at least one CLI name (see `harness-gym external list`)")
    clis = [load_cli(name) for name in args.names]  # every name checked before any install starts
    if args.action == "install":
        started = time.monotonic()

        def progress(line: str) -> None:
            print(f"[{time.monotonic() - started:5.0f} s] {line}", flush=True)

        for cli in clis:
            external_install.install(cli, force=args.force, progress=progress)
    elif args.action == "path":
        for cli in clis:
            print(external_install.require_install(cli))
    else:
        for cli in clis:
            print(json.dumps(describe_cli(cli), indent=2))
    return 0


def _positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1, got {text!r}")
    return int(text)


def _cmd_doctor(args: argparse.Namespace) -> int:
    docker = {"auto": None, "require": True, "skip": False}[args.docker]
    checks = doctor.run_checks(workers=args.workers, docker=docker, clean=args.clean, sandboxes=args.sandboxes)
    print(json.dumps(doctor.as_records(checks)) if args.json else doctor.table(checks))
    return 1 if doctor.failed(checks) else 0


def _cmd_serve_env(args: argparse.Namespace) -> int:
    from harness_gym.env_server import EnvServer  # needs the optional serve extra (fastapi, openenv)

    env_kwargs = json.loads(args.env_kwargs) if args.env_kwargs else {}
    if not isinstance(env_kwargs, dict):
        raise ValueError('--env-kwargs must be a JSON object, e.g. \'{"tasks": "builtin:eval"}\'')
    if args.tasks:
        env_kwargs["tasks"] = args.tasks
    token = os.environ.get(args.token_env) or None
    server = EnvServer(
        args.env_id,
        env_kwargs,
        host=args.host,
        port=args.port,
        max_sessions=args.max_sessions,
        idle_timeout_s=args.idle_timeout or None,
        token=token,
        ws_compression=args.ws_compression,
        allow_no_token=args.no_token_ok,
    )
    auth = f"bearer token from ${args.token_env}" if token else "no token"
    print(f"serving {args.env_id} at {server.url} (OpenEnv protocol; {auth}; Ctrl-C stops)", flush=True)
    server.serve()
    return 0


class DefaultsHelp(argparse.HelpFormatter):
    """Shows each option's default in ``--help``, unless the help already says it or there is none."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or action.default in (None, False, argparse.SUPPRESS) or not action.option_strings:
            return text
        return f"{text} (default: %(default)s)" if text else "default: %(default)s"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="harness-gym", description="The agent harness as an experimental variable.")
    sub = parser.add_subparsers(dest="command", required=True)

    configs = sub.add_parser("configs", help="list configurations of the harness space")
    configs.add_argument("--set", default="all", help="training, heldout, all, or comma-separated ids")
    configs.add_argument("--neighbours", metavar="ID", help="list the 10 configurations at Hamming distance 1")
    configs.set_defaults(func=_cmd_configs)

    schedule = sub.add_parser("schedule", help="print a locality-aware task-to-harness schedule as JSON lines")
    schedule.add_argument("--tasks", type=int, required=True, help="number of tasks")
    schedule.add_argument("--tasks-per-step", type=int, default=16, help="tasks per training step (a batch)")
    schedule.add_argument("--k", type=int, default=2, help="configurations each task is trained under")
    schedule.add_argument(
        "--assignment",
        default="locality",
        choices=["locality", "random", "repeat"],
        help="how tasks meet configurations",
    )
    schedule.add_argument(
        "--training-set",
        default="oa18",
        choices=["oa18", "random18", "all243", "base"],
        help="the configurations trained on (oa18: the orthogonal array)",
    )
    schedule.add_argument("--seed", type=int, default=0, help="the seed (same seed, same schedule)")
    schedule.set_defaults(func=_cmd_schedule)

    check = sub.add_parser("check", help="run the reference agent on every task in every chosen harness")
    check.add_argument("--configs", default="training,heldout", help="training, heldout, all, or ids (comma-separated)")
    check.add_argument("--tasks", default="builtin", help="task suite, e.g. builtin or builtin:eval")
    check.add_argument(
        "--format", default="hermes", choices=["hermes", "xml", "openai"], help="how the agent writes calls"
    )
    check.add_argument("--seed", type=int, default=0, help="base seed of the episodes")
    check.add_argument("--out", type=Path, help="write one JSON line per episode here")
    check.set_defaults(func=_cmd_check)

    bench = sub.add_parser(
        "bench",
        help="benchmark an agent across harnesses (results, trajectories, report)",
        formatter_class=DefaultsHelp,
    )
    bench.add_argument(
        "--agent",
        default="hf",
        help="hf (in-process; SmolLM2-135M unless --model), openai, reference, null, python:module:attribute",
    )
    bench.add_argument(
        "--configs",
        default="quick",
        help="quick, training, heldout[:N], all, base, presets, out-of-space, ids, env ids or spec files (comma-separated)",
    )
    bench.add_argument("--tasks", default="builtin:eval", help="task suite, e.g. builtin, builtin:eval")
    bench.add_argument("--task-count", type=int, help="use only the first N tasks of the suite (default: all)")
    bench.add_argument("--runs", type=int, default=3, help="runs per (harness, task); Pass@1 is their mean")
    bench.add_argument("--max-steps", type=int, help="override every harness's step budget (default: the harness's)")
    bench.add_argument("--workers", type=int, default=1, help="episodes in parallel")
    bench.add_argument(
        "--executor", choices=["thread", "process"], default="thread", help="how episodes run in parallel"
    )
    bench.add_argument("--ray", action="store_true", help="run episodes as Ray tasks (local, or --ray-address)")
    bench.add_argument("--ray-address", help="a Ray cluster to join (default: start a local one)")
    bench.add_argument(
        "--sandbox", help="sandbox backend for every harness (default: bubblewrap, Docker for image tasks)"
    )
    bench.add_argument(
        "--world", help="the world every task runs on (default: each suite's own; see `harness-gym worlds list`)"
    )
    bench.add_argument("--out", type=Path, default=Path("bench-results"), help="output folder")
    bench.add_argument("--resume", action="store_true", help="continue an interrupted run in --out (same manifest)")
    bench.add_argument("--seed", type=int, default=0, help="base seed; episodes of a (task, run) share theirs")
    bench.add_argument("--no-trajectories", action="store_true", help="do not write per-episode trajectories")
    bench.add_argument(
        "--calibration",
        default="reference,null",
        help="agents run once per (harness, task) beside the model, whose Pass@1 is known (reference 1, null 0); none",
    )
    bench.add_argument(
        "--max-error-rate",
        type=float,
        default=0.5,
        help="stop early (exit 1) when more than this share of finished episodes errored; 1 never stops",
    )
    bench.add_argument("--model", help="hf: a local model folder (default: packaged SmolLM2); openai: the model name")
    bench.add_argument("--gguf-file", help="hf: the GGUF file inside --model")
    bench.add_argument("--base-url", help="openai: the endpoint, e.g. http://localhost:8000/v1")
    bench.add_argument("--api-key-env", default="OPENAI_API_KEY", help="openai: environment variable holding the key")
    bench.add_argument(
        "--tool-mode",
        choices=list(dict.fromkeys(["native", "native-strict", "auto", *format_names()])),
        metavar="MODE",
        help="hf/openai: native tool calling, checked once (falls back to a text format when the chat template "
        "drops tools; native-strict refuses), a text format (vLLM parser names: hermes, qwen3_xml, llama3_json, "
        "mistral, deepseek_v3, openai, ...) or auto (the model family's format, see README 'Tool-call formats')",
    )
    bench.add_argument(
        "--max-new-tokens", type=int, help="hf/openai: tokens generated per step (default: hf 256, openai 1024)"
    )
    bench.add_argument("--temperature", type=float, help="hf/openai: sampling temperature (default: 0, greedy)")
    bench.set_defaults(func=_cmd_bench)

    report = sub.add_parser("report", help="write the report of a results file")
    report.add_argument("results", type=Path, help="a bench results file (results.jsonl)")
    report.add_argument("--out", type=Path, help="folder for report.md/json and plots (default: beside the results)")
    report.add_argument(
        "--mutation-scores", type=Path, help="a `tasks audit --mutants --json` file: Pass@1 on strong-grader tasks too"
    )
    report.set_defaults(func=_cmd_report)

    compare = sub.add_parser("compare", help="paired bootstrap differences between two results files, per class")
    compare.add_argument("a", type=Path, help="the first results file (the baseline)")
    compare.add_argument("b", type=Path, help="the second results file (differences are b - a)")
    compare.add_argument("--json", type=Path, help="also write the comparison as JSON here")
    compare.set_defaults(func=_cmd_compare)

    view = sub.add_parser("view", help="show a trajectory in the terminal, or as HTML")
    view.add_argument("trajectory", type=Path, help="a trajectories/*.jsonl file of a bench run")
    view.add_argument("--html", type=Path, help="write a standalone HTML page instead")
    view.set_defaults(func=_cmd_view)

    tasks = sub.add_parser("tasks", help="list, validate, check (reference solutions), generate or audit a task suite")
    tasks.add_argument(
        "action", choices=["list", "validate", "check", "generate", "audit"], help="what to do with the suite"
    )
    tasks.add_argument(
        "suite", nargs="?", default="builtin", help="builtin[:split], clawgym:PATH, pinchbench:PATH, ..."
    )
    tasks.add_argument("--configs", default="training,heldout", help="check: harnesses to solve the tasks in")
    tasks.add_argument("--out", type=Path, help="generate: output folder (default generated-tasks)")
    tasks.add_argument("--count", type=int, default=1000, help="generate: how many tasks")
    tasks.add_argument(
        "--seed", type=int, default=0, help="generate, audit --mutants: the seed (same seed, same tasks)"
    )
    tasks.add_argument("--exploits", help="audit: comma-separated exploit names (default: all)")
    tasks.add_argument("--exploit-file", type=Path, help="audit: an exploit library YAML instead of the built-in one")
    tasks.add_argument("--workers", type=int, default=2, help="audit: exploits (or mutants) run in parallel")
    tasks.add_argument("--json", type=Path, help="audit: also write the results as JSON to this file")
    tasks.add_argument("--sandbox", help="audit: sandbox backend (default: bubblewrap, Docker for image tasks)")
    tasks.add_argument(
        "--world", help="audit: the world tasks run on (default: each suite's own, as in training; 'host': the host's)"
    )
    tasks.add_argument(
        "--mutants",
        type=int,
        help="audit: grade N mutants of each reference solution instead of exploits (0: all); "
        "generate: keep only tasks whose tests kill N mutants per buggy function (default 5, 0: no check)",
    )
    tasks.add_argument("--results", type=Path, help="audit --mutants: JSON-lines results file; resumes from it")
    tasks.add_argument("--markdown", type=Path, help="audit --mutants: also write the report as Markdown here")
    tasks.set_defaults(func=_cmd_tasks)

    serve = sub.add_parser("serve", help="serve a local model over an OpenAI-compatible API (CPU, for tests and demos)")
    serve.add_argument("--model", help="a local model folder (default: the packaged SmolLM2-135M-Instruct)")
    serve.add_argument("--gguf-file", help="the GGUF file inside --model")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    serve.add_argument("--port", type=int, default=8000, help="port to listen on")
    serve.set_defaults(func=_cmd_serve)

    worlds = sub.add_parser("worlds", help="build, list, locate or remove worlds (root filesystems sandboxes run on)")
    worlds.add_argument("action", choices=["list", "build", "path", "rm"], help="what to do with the worlds")
    worlds.add_argument("names", nargs="*", help="shipped world names (host, python, clawgym) or world YAML files")
    worlds.add_argument("--force", action="store_true", help="build: rebuild even if built")
    worlds.set_defaults(func=_cmd_worlds)
    external = sub.add_parser("external", help="list, install or describe real agent CLIs (Claude Code, Codex, ...)")
    external.add_argument(
        "action", choices=["list", "install", "path", "describe"], help="what to do with the agent CLIs"
    )
    external.add_argument("names", nargs="*", help="CLI ids (external:claude-code) or names (claude-code)")
    external.add_argument("--force", action="store_true", help="install: reinstall even if installed")
    external.set_defaults(func=_cmd_external)

    doctor = sub.add_parser("doctor", help="check that this machine can sandbox episodes, and which limits hold")
    doctor.add_argument("--workers", type=int, default=1, help="sandboxes that will run at once (disk, memory)")
    doctor.add_argument("--clean", action="store_true", help="first reclaim what killed harness-gym processes left")
    doctor.add_argument(
        "--docker", choices=["auto", "require", "skip"], default="auto", help="check Docker: if present, always, never"
    )
    doctor.add_argument(
        "--sandboxes",
        type=_positive,
        help="fail unless this many concurrent environments fit this host's limits (pid_max, descriptors, uids...)",
    )
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    doctor.set_defaults(func=_cmd_doctor)
    serve_env = sub.add_parser(
        "serve-env", help="serve an environment over OpenEnv's HTTP/WebSocket protocol, one session per client"
    )
    serve_env.add_argument("env_id", help="a registered id, e.g. Harness-S1T2O0C1W2 or HarnessAdapt-H1")
    serve_env.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    serve_env.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed)")
    serve_env.add_argument("--max-sessions", type=int, default=32, help="concurrent sessions (each its own sandbox)")
    serve_env.add_argument("--idle-timeout", type=float, default=600.0, help="close idle sessions after S s (0: never)")
    serve_env.add_argument("--tasks", help="task suite for every session (builtin, builtin:eval, clawgym:PATH, ...)")
    serve_env.add_argument("--env-kwargs", help="more gym.make keyword arguments, as a JSON object")
    serve_env.add_argument(
        "--token-env",
        default="HARNESS_GYM_ENV_TOKEN",
        help="environment variable holding the bearer token clients must send (unset: no token)",
    )
    serve_env.add_argument(
        "--ws-compression", action="store_true", help="compress WebSocket messages (slow links between machines)"
    )
    serve_env.add_argument(
        "--no-token-ok",
        action="store_true",
        help="serve on a non-loopback address without a token (anyone who reaches it runs code in its sandboxes)",
    )
    serve_env.set_defaults(func=_cmd_serve_env)

    add_export_parser(sub)  # export prompts | sft

    probing = sub.add_parser(
        "probe",
        help="score a model's log-probability of the same actions rendered under each harness (no rollouts)",
        formatter_class=DefaultsHelp,
    )
    probing.add_argument("--model", required=True, help="a transformers model folder (harness-gym export-model)")
    probing.add_argument("--configs", default="base,training,heldout", help="harnesses, as bench --harnesses takes")
    probing.add_argument(
        "--tasks", default="ladder:1007#count=6,words=heldout", help="a suite with reference solutions"
    )
    probing.add_argument("--task-limit", type=int, help="the first N tasks of the suite")
    probing.add_argument(
        "--compare", help="bench results files of the same model (comma-separated): rank agreement with its Pass@1"
    )
    probing.add_argument("--out", type=Path, default=Path("probe.json"), help="JSON; a .md table is written beside it")
    probing.set_defaults(func=_cmd_probe)

    export = sub.add_parser(
        "export-model",
        help="write a model (default: the packaged SmolLM2 GGUF) as a transformers folder vLLM and TRL load",
        formatter_class=DefaultsHelp,
    )
    export.add_argument(
        "--out", type=Path, default=Path("exported-models/SmolLM2-135M-Instruct"), help="the folder to write"
    )
    export.add_argument("--model", help="a local model folder (default: the packaged SmolLM2-135M-Instruct)")
    export.add_argument("--gguf-file", help="the GGUF file inside --model")
    export.add_argument("--force", action="store_true", help="replace a non-empty --out")
    export.set_defaults(func=_cmd_export_model)
    return parser


#: the exit status of a run stopped by Ctrl-C (128 + SIGINT, as shells report it)
INTERRUPTED = 130


def interrupted_hint(argv: Sequence[str], args: argparse.Namespace) -> str:
    """What to tell a user who pressed Ctrl-C: for ``bench``, the command that continues the run."""
    if getattr(args, "func", None) is _cmd_bench:
        again = ["harness-gym", *argv] + ([] if getattr(args, "resume", False) else ["--resume"])
        return (
            f"harness-gym: interrupted; the episodes finished so far are in {args.out}. "
            f"Continue the run with:\n  {shlex.join(again)}"
        )
    return "harness-gym: interrupted"


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(arguments)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"\n{interrupted_hint(arguments, args)}", file=sys.stderr)
        return INTERRUPTED
    except (ValueError, KeyError, FileExistsError, FileNotFoundError, RuntimeError) as exc:
        print(f"harness-gym: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
