"""The procedural task generator: verified, deduplicated, reproducible, solvable."""

import ast

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.agents import NullAgent, ReferenceAgent, run_episode
from harness_gym.cli import main
from harness_gym.tasks import validate_suite
from harness_gym.tasks.generator import generate
from harness_gym.tasks.mutants import mutations

SOURCE = """
def clamp(value, low, high):
    if value < low:
        return low
    elif value > high:
        return high
    return value + 0 * 1 if low and high else value
"""


def test_mutation_operators():
    found = {m.operator for m, _ in mutations(SOURCE, "m.py")}
    assert found == {
        "operator swap",
        "wrong comparison",
        "boolean swap",
        "off by one",
        "negated condition",
        "dropped branch",
    }
    for mutation, mutated in mutations(SOURCE, "m.py"):
        ast.parse(mutated)
        assert mutated != SOURCE and mutation.mutated in mutated


def _only_the_reference_solves(tasks):
    """The reference solution (one fix per bug) scores 1, the untouched workspace 0."""
    env = HarnessEnv("S0T0O0C0W0", tasks=tasks)
    for task in tasks:
        assert run_episode(env, ReferenceAgent(), seed=0, task_id=task.id).reward == 1.0, task.id
        assert run_episode(env, NullAgent(), seed=0, task_id=task.id).reward == 0.0, task.id
    env.close()


@requires_bwrap
def test_higher_order_tasks_of_one_project_have_one_fix_per_bug(tmp_path):
    """One project's whole supply, single bugs then every disjoint pair and triple (all 20 projects'
    first 600 tasks: ``-m slow``)."""
    ids = generate(tmp_path / "h", count=1000, seed=2, project_ids=["repair-bracket-balance"])
    suite = validate_suite(f"generated:{tmp_path / 'h'}")
    assert not suite.errors and len(ids) == len(suite.tasks) < 1000  # stopped at the supply
    assert {t.metadata["source_task"] for t in suite.tasks} == {"repair-bracket-balance"}
    by_bugs: dict[int, list] = {}
    for task in suite.tasks:
        assert len(task.solution) == task.metadata["bugs"], task.id
        by_bugs.setdefault(task.metadata["bugs"], []).append(task)
    assert sorted(by_bugs) == [1, 2, 3]
    _only_the_reference_solves([*by_bugs[2][:2], *by_bugs[3][:2]])


def test_generation_refuses_unknown_projects(tmp_path):
    with pytest.raises(ValueError, match="not built-in repair projects: repair-nowhere"):
        generate(tmp_path / "x", count=1, project_ids=["repair-bracket-balance", "repair-nowhere"])
    assert not any((tmp_path / "x").iterdir())


@pytest.mark.slow
@requires_bwrap
def test_higher_order_tasks_have_one_fix_per_bug(tmp_path):
    ids = generate(tmp_path / "h", count=600, seed=2)
    suite = validate_suite(f"generated:{tmp_path / 'h'}")
    multi = [t for t in suite.tasks if t.metadata["bugs"] > 1]
    assert len(ids) == 600 and multi
    for task in multi[:20]:
        assert len(task.solution) == task.metadata["bugs"]
    _only_the_reference_solves(multi[:4])


def test_generation_is_verified_deduplicated_and_reproducible(tmp_path):
    first = generate(tmp_path / "a", count=12, seed=3)
    # the same seed gives the same tasks in the same order, so a shorter run is the longer one's
    # prefix (4 tasks prove it at a third of the cost of 12); another seed gives other tasks
    again = generate(tmp_path / "b", count=4, seed=3)
    other = generate(tmp_path / "c", count=4, seed=4)
    assert first[:4] == again and len(first) == len(set(first)) == 12
    assert first[:4] != other
    suite = validate_suite(f"generated:{tmp_path / 'a'}")
    assert not suite.errors and {t.metadata["family"] for t in suite.tasks} == {"generated-repair"}
    assert all(t.metadata["bugs"] == 1 for t in suite.tasks)  # single bugs come first
    sources = {
        (t.metadata["source_task"], (t.workspace_dir / t.metadata["mutations"][0]["file"]).read_text())
        for t in suite.tasks
    }
    assert len(sources) == 12  # no two tasks share a mutated file


@pytest.mark.slow
def test_generation_stops_at_the_supply_of_detectable_mutations(tmp_path):
    ids = generate(tmp_path / "all", count=100_000, seed=0)
    assert 2000 <= len(ids) < 100_000  # thousands from one call


@requires_bwrap
def test_generated_tasks_are_solvable_and_untouched_scores_zero(tmp_path):
    assert main(["tasks", "generate", "--out", str(tmp_path / "g"), "--count", "8", "--seed", "1"]) == 0
    env = HarnessEnv("S2T1O0C2W1", tasks=f"generated:{tmp_path / 'g'}")
    for task in env.tasks:
        assert run_episode(env, ReferenceAgent("xml"), seed=0, task_id=task.id).reward == 1.0, task.id
        assert run_episode(env, NullAgent(), seed=0, task_id=task.id).reward == 0.0, task.id
    env.close()
    with pytest.raises(Exception, match="not a folder"):
        validate_suite(f"generated:{tmp_path / 'nothing'}")


def test_a_hanging_mutant_leaves_no_process_behind(tmp_path):
    """The generator's host-side check of a mutant that loops forever times out, and the grader's
    untrusted child dies with the grader instead of spinning on (PR_SET_PDEATHSIG)."""
    import subprocess
    import time

    from harness_gym.tasks import load_tasks
    from harness_gym.tasks.generator import correct_project, run_hidden_tests

    task = next(t for t in load_tasks("builtin") if t.id == "repair-median")
    correct_project(task, tmp_path)
    module = next(p for p in sorted(tmp_path.rglob("*.py")) if p.name != "__init__.py")
    module.write_text("while True:\n    pass\n")
    assert run_hidden_tests(task, tmp_path, timeout_s=2.0) is None
    time.sleep(1)
    running = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert f"{tmp_path}" not in running and not any(
        "evaluate_calls.py" in line and "harness-gym-verify" in line for line in running.splitlines()
    )
