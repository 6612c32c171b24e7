"""The benchmark scripts stay runnable: every ``benchmarks/*.py`` imports and answers ``--help`` as
``python -m benchmarks.NAME`` does (an import break once hid behind the slow marker), and the
replication's profiles give the harnesses the design names."""

import runpy
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import benchmarks.replication as replication
from harness_gym.design import TRAINING_SET, heldout_set
from harness_gym.space import BASE_CONFIG

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"
SCRIPTS = sorted(path.stem for path in BENCHMARKS.glob("*.py") if path.stem != "__init__")


def test_every_benchmark_script_is_found():
    assert "replication" in SCRIPTS and "compare" in SCRIPTS


@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_imports_and_answers_help(name, monkeypatch, capsys):
    """Runs the module as ``-m`` runs it: its imports, its argument parser, its ``__main__`` guard."""
    monkeypatch.setattr(sys, "argv", [str(BENCHMARKS / f"{name}.py"), "--help"])
    monkeypatch.delitem(sys.modules, f"benchmarks.{name}", raising=False)  # a fresh run, as -m does
    with pytest.raises(SystemExit) as exited:
        runpy.run_module(f"benchmarks.{name}", run_name="__main__", alter_sys=True)
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")


def _configs(choices):
    return [choice.config for choice in choices]


def test_easy_profile_runs_the_base_the_other_training_and_the_heldout_configurations():
    base, others = replication.evaluation_harnesses(replication.PROFILES["easy"])
    assert (base.env_id, base.config) == (BASE_CONFIG.env_id, BASE_CONFIG.code)
    training, heldout = others[:17], others[17:]
    assert len(training) == 17 and len(heldout) == 18
    assert set(_configs(training)) == {c.code for c in TRAINING_SET} - {BASE_CONFIG.code}
    assert set(_configs(heldout)) == {c.code for c in heldout_set()}
    assert {choice.klass for choice in training} == {"training"}
    assert {choice.klass for choice in heldout} == {"heldout"}
    env_ids = [choice.env_id for choice in others]
    assert len(set(env_ids)) == len(env_ids) == 35  # disjoint, no configuration twice
    assert base.env_id not in env_ids


def test_small_profile_runs_a_prefix_of_the_full_one_and_is_no_larger_anywhere():
    """--small smoke-tests the full profile's own configurations (a prefix of each list), no larger
    in any size and smaller in every count of tasks and configurations (both evaluate one task per
    configuration since the full profile was resized to fit its estimate: issue 29)."""
    small, full = replication.PROFILES["small"], replication.PROFILES["full"]
    small_base, small_others = replication.evaluation_harnesses(small)
    full_base, full_others = replication.evaluation_harnesses(full)
    assert small_base == full_base
    assert [c.klass for c in small_others] == ["training"] * small.training_configs + [
        "heldout"
    ] * small.heldout_configs
    assert small_others[: small.training_configs] == full_others[: small.training_configs]
    assert (
        small_others[small.training_configs :]
        == full_others[full.training_configs : full.training_configs + small.heldout_configs]
    )
    assert len(full_others) == full.training_configs + full.heldout_configs
    assert full.heldout_configs <= len(replication.heldout_set())
    for size in ("pool_tasks", "tasks_per_arm", "eval_tasks_base", "training_configs", "heldout_configs"):
        assert 0 < getattr(small, size) < getattr(full, size), size
    assert 0 < small.eval_tasks <= full.eval_tasks
    for profile in (small, full):
        assert profile.tasks_per_arm <= profile.pool_tasks  # each arm keeps tasks_per_arm of its pool


@pytest.mark.parametrize(
    ("argv", "profile", "out"),
    [
        ([], "full", Path("benchmarks/results/replication")),
        (["--small"], "small", Path("benchmarks/results/replication-small")),
        (["--small", "--out", "elsewhere"], "small", Path("elsewhere")),
    ],
)
def test_replication_command_line_picks_the_profile_and_folders(monkeypatch, tmp_path, argv, profile, out):
    """The command line's plumbing, with the pipeline itself (an hour of CPU) recorded, not run."""
    calls = []
    monkeypatch.setattr(replication, "run", lambda *args, **kwargs: calls.append((args, kwargs)))
    assert replication.main([*argv, "--work", str(tmp_path), "--threads", "3", "--quiet"]) == 0
    [((chosen, out_dir, work), options)] = calls
    assert chosen.train.threads == 3
    assert replace(chosen, train=replace(chosen.train, threads=0)) == replication.PROFILES[profile]
    assert (out_dir, work, options) == (out, tmp_path / profile, {"progress": False})
