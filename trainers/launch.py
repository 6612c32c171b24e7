"""Launch a training recipe on a Ray cluster: ``python -m trainers.launch RECIPE [--dry-run]``.

The recipe (YAML, ``trainers/recipes/``) is checked against ``trainers/schemas/recipe.schema.json``
and its OpenRLHF flags against OpenRLHF's own parser before anything starts. Then the prompt dataset
is written and the job submitted::

    ray job submit --address ADDR --runtime-env-json '{...}' -- python3 -m openrlhf.cli.train_ppo_ray ...

The runtime environment carries the executor's settings (``HARNESS_GYM_EXECUTOR``) and, for
schedule datasets, the worker hook that keeps the prompt order (:mod:`trainers.ordering`).
``--dry-run`` prints the dataset step and the command and starts nothing. HarnessAdapt recipes run
the evolution loop of :mod:`trainers.harnessadapt`, which submits one such job per epoch.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from trainers.harnessadapt import run_recipe
from trainers.launch_plan import RecipeError, load_recipe, plan, preflight, render, write_datasets
from trainers.openrlhf_args import FlagError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainers.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("recipe", help="a recipe file or a packaged recipe name (trainers/recipes/)")
    parser.add_argument("--dry-run", action="store_true", help="check and print the commands; start nothing")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a recipe value")
    parser.add_argument("--output-dir", type=Path, help="override the recipe's output_dir")
    parser.add_argument(
        "--skip-flag-check", action="store_true", help="do not check flags against OpenRLHF (not installed here)"
    )
    parser.add_argument(
        "--skip-doctor", action="store_true", help="do not run `harness-gym doctor` on every Ray node first"
    )
    args = parser.parse_args(argv)
    try:
        recipe = load_recipe(args.recipe, args.set)
        if recipe["kind"] == "harnessadapt":
            return run_recipe(recipe, dry_run=args.dry_run, output_dir=args.output_dir, check=not args.skip_flag_check)
        launch = plan(recipe, output_dir=args.output_dir, check=not args.skip_flag_check)
    except (RecipeError, FlagError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(f"# recipe {recipe['recipe']} ({recipe['kind']}, {recipe['algorithm']}): checked")
        print("\n".join(launch.shell_lines()))
        return 0
    if not args.skip_doctor:
        try:
            preflight(launch)
        except RecipeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 3
    write_datasets(launch)
    print(render(launch.command()), flush=True)
    return subprocess.call(launch.command())


if __name__ == "__main__":
    raise SystemExit(main())
