"""The task ladder: reproducible, held out by seed, words and template, long enough on its upper
rungs, and graded by data that a do-nothing agent, an agent that edits the wrong file and the
mutation audit's wrong outputs all fail."""

import json
import shutil
import subprocess
import sys

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.agents.base import run_episode
from harness_gym.agents.reference import ReferenceAgent
from harness_gym.tasks import TaskError, load_tasks, validate_suite
from harness_gym.tasks.ladder import HELDOUT_TEMPLATES, HELDOUT_WORDS, TEMPLATES, TRAIN_TEMPLATES, TRAIN_WORDS
from harness_gym.tasks.mutation import mutation_audit

EVERY = f"ladder:5#count={len(TEMPLATES)},templates=all"


def grade_on_host(task, tmp_path, commands=()):
    """Our own grader on a copy of the task's workspace after ``commands`` (our own, on the host)."""
    work = tmp_path / "w"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(task.workspace_dir, work)
    for command in commands:
        subprocess.run(["bash", "-c", command], cwd=work, check=False, capture_output=True)
    grader = task.grader_files[0] / "grade.py"
    out = subprocess.run([sys.executable, str(grader)], cwd=work, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["reward"]


def test_the_seed_and_words_decide_everything():
    first = validate_suite("ladder:3#count=24").tasks
    again = validate_suite("ladder:3#count=24").tasks
    other = validate_suite("ladder:4#count=24").tasks
    assert [(t.id, t.instruction) for t in first] == [(t.id, t.instruction) for t in again]
    assert {t.instruction for t in first}.isdisjoint({t.instruction for t in other})
    assert [t.metadata["template"] for t in first[: len(TEMPLATES)]] == list(TEMPLATES)


def test_held_out_by_seed_words_and_template():
    train = validate_suite("ladder:0#count=36,templates=train").tasks
    heldout = validate_suite("ladder:1000#count=36,templates=heldout,words=heldout").tasks
    assert {t.metadata["template"] for t in train} == set(TRAIN_TEMPLATES)
    assert {t.metadata["template"] for t in heldout} == set(HELDOUT_TEMPLATES)
    assert {t.split for t in train} == {"train"} and {t.split for t in heldout} == {"eval"}
    assert set(TRAIN_WORDS).isdisjoint(HELDOUT_WORDS)
    for task in heldout:  # no training word in a held-out task's prompt or files
        text = task.instruction + "".join(p.read_text() for p in task.workspace_dir.rglob("*") if p.is_file())
        assert not any(word in text.split() or f"{word}." in text for word in TRAIN_WORDS), task.id


def test_rungs_choose_templates_and_upper_rungs_need_six_turns():
    upper = validate_suite("ladder:2#count=12,rungs=4").tasks
    assert {t.metadata["rung"] for t in upper} == {4}
    assert all(len(t.solution) + 1 >= 7 for t in upper)  # calls plus the finish
    assert {t.metadata["rung"] for t in validate_suite("ladder:2#count=8,rungs=1+3").tasks} == {1, 3}


@pytest.mark.parametrize(
    "argument, message",
    [
        ("ladder:x", "expected ladder:SEED"),
        ("ladder:1#count=0", "count must be at least 1"),
        ("ladder:1#templates=hard", "templates must be one of"),
        ("ladder:1#words=latin", "words must be one of"),
        ("ladder:1#rungs=5", "rungs must be among"),
        ("ladder:1#rungs=a-b", "rungs must look like"),
        ("ladder:1#size=3", "unknown options ['size']"),
    ],
)
def test_bad_arguments_are_named(argument, message):
    with pytest.raises(TaskError) as error:
        validate_suite(argument)
    assert message in str(error.value)


@pytest.mark.parametrize("seed", [5, 6])
def test_the_reference_passes_and_doing_nothing_fails(seed, tmp_path):
    for task in load_tasks(f"ladder:{seed}#count={len(TEMPLATES)}"):
        commands = [s["arguments"]["command"] for s in task.solution]
        assert grade_on_host(task, tmp_path, commands) == 1.0, task.id
        assert grade_on_host(task, tmp_path) == 0.0, task.id


def test_acting_on_the_wrong_file_fails(tmp_path):
    """An agent that skips the look and acts on another file of the folder (a guess) fails."""
    checked = 0
    for task in load_tasks("ladder:8#count=24"):
        files = sorted(str(p.relative_to(task.workspace_dir)) for p in task.workspace_dir.rglob("*") if p.is_file())
        commands = [s["arguments"]["command"] for s in task.solution]
        acted = [f for f in files if "/" in f and any(f in c for c in commands[1:])]
        if not acted:
            continue
        folder = acted[0].rsplit("/", 1)[0]
        decoys = [f for f in files if f.startswith(folder + "/") and f not in acted]
        if not decoys:
            continue
        if task.metadata["template"] == "find_count_write":  # the guess writes the guessed file's count
            assert len({(task.workspace_dir / f).read_text().count("\n") for f in [acted[0], *decoys]}) == 3
            continue
        if task.metadata["template"] == "follow_chain":  # the guess names another file that says END
            end = commands[-1].split()[1]
            guess = next(f for f in decoys if (task.workspace_dir / f).read_text() == "END\n" and end not in f)
            commands, acted[0], decoys[0] = commands[-1:], end, guess.split("/")[-1]
        wrong = [c.replace(acted[0], decoys[0]) for c in commands]
        assert grade_on_host(task, tmp_path, wrong) == 0.0, (task.id, wrong)
        checked += 1
    assert checked >= 10


@requires_bwrap
def test_the_reference_plan_states_no_argument_a_solver_could_not_know_yet():
    """Rungs 2-4 take their later arguments (the count to write, the file that holds a word) from tool
    output: a first-turn plan that spells them out teaches a trained model to state answers unseen.
    Before: every step's arguments were in the plan."""
    tasks = [t for t in validate_suite(EVERY).tasks if t.metadata["rung"] >= 2]
    env = HarnessEnv("S0T0O0C0W0", tasks=tasks, max_steps=20)
    try:
        for task in tasks:
            observation, _ = env.reset(options={"task_id": task.id})
            agent = ReferenceAgent()
            agent.reset(env)
            first = str(agent.act(observation))
            commands = [json.dumps(step["arguments"]["command"])[1:30] for step in task.solution]  # as the plan quotes
            assert "Plan:" in first and commands[0] in first, first
            for later in commands[1:]:
                if later != commands[0]:
                    assert later not in first, (task.id, later, first)
    finally:
        env.close()


@requires_bwrap
@pytest.mark.parametrize("config", ["S0T0O0C0W0", "S2T2O2C2W2"])
def test_the_reference_agent_climbs_every_rung_in_a_sandbox(config):
    tasks = validate_suite(EVERY).tasks
    env = HarnessEnv(config, tasks=tasks, max_steps=20)
    for task in tasks:
        result = run_episode(env, ReferenceAgent(), seed=0, task_id=task.id)
        assert result.reward == 1.0, task.id
        if task.metadata["rung"] == 4:
            assert result.steps >= 7, task.id
            if config[7] == "2":  # C2 folds history after 5 turns: the upper rungs make it act
                assert env.context.summarized_turns > 0, task.id
    env.close()


@requires_bwrap
def test_every_template_kills_a_sample_of_its_mutants():
    report = mutation_audit(validate_suite(EVERY).tasks, 4, seed=1, workers=2)
    weak = {t.task_id: t.score for t in report.tasks if t.score is not None and t.score != 1.0}
    assert not weak, report.table()
    # a deletion writes nothing to mutate: the do-nothing and wrong-file tests above cover those
    unscored = {t.task_id.split("-", 4)[-1] for t in report.tasks if t.score is None}
    assert unscored == {"delete_file", "find_and_delete"}, report.table()
    assert sum(t.valid for t in report.tasks) >= len(TEMPLATES)
