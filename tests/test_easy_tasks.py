"""The generated easy tasks: reproducible from the seed, held out by seed and by template, solved
by their reference solutions under any harness, and graded by data the workspace cannot fake."""

import json

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.agents.base import run_episode
from harness_gym.agents.reference import ReferenceAgent
from harness_gym.tasks import TaskError, validate_suite
from harness_gym.tasks.easy import HELDOUT_TEMPLATES, TEMPLATES, TRAIN_TEMPLATES


def test_the_seed_decides_everything():
    first = validate_suite("generated-easy:3#count=16").tasks
    again = validate_suite("generated-easy:3#count=16").tasks
    other = validate_suite("generated-easy:4#count=16").tasks
    assert [(t.id, t.instruction) for t in first] == [(t.id, t.instruction) for t in again]
    assert {t.instruction for t in first}.isdisjoint({t.instruction for t in other})
    assert [t.metadata["template"] for t in first[: len(TEMPLATES)]] == list(TEMPLATES)  # in turn


def test_held_out_by_template_and_by_seed():
    train = validate_suite("generated-easy:0#count=24,templates=train").tasks
    heldout = validate_suite("generated-easy:1000#count=6,templates=heldout").tasks
    assert {t.metadata["template"] for t in train} == set(TRAIN_TEMPLATES)
    assert {t.metadata["template"] for t in heldout} == set(HELDOUT_TEMPLATES)
    assert {t.split for t in train} == {"train"} and {t.split for t in heldout} == {"eval"}
    assert {t.id for t in train}.isdisjoint({t.id for t in heldout})


@pytest.mark.parametrize(
    "argument, message",
    [
        ("generated-easy:x", "expected generated-easy:SEED"),
        ("generated-easy:1#count=0", "count must be at least 1"),
        ("generated-easy:1#templates=hard", "templates must be one of"),
        ("generated-easy:1#size=3", "unknown options ['size']"),
    ],
)
def test_bad_arguments_are_named(argument, message):
    with pytest.raises(TaskError) as error:
        validate_suite(argument)
    assert message in str(error.value)


@requires_bwrap
@pytest.mark.parametrize("config", ["S0T0O0C0W0", "S2T2O2C2W2"])
def test_reference_solves_every_template_and_doing_nothing_fails(config):
    tasks = validate_suite(f"generated-easy:11#count={len(TEMPLATES)}").tasks
    env = HarnessEnv(config, tasks=tasks)
    for task in tasks:
        assert run_episode(env, ReferenceAgent(), seed=0, task_id=task.id).reward == 1.0, task.id
        env.reset(seed=0, options={"task_id": task.id})
        finish = {"name": env.tool_interface.name_for("finish"), "arguments": {"message": "done"}}
        for _ in range(3):  # W2 may first ask for a plan; a finish is still a finish with nothing done
            _, reward, terminated, truncated, _ = env.step(
                f"Plan: finish.\n<tool_call>{json.dumps(finish)}</tool_call>"
            )
            if terminated or truncated:
                break
        assert terminated and reward == 0.0, task.id
    env.close()


@requires_bwrap
def test_a_link_is_not_a_copy():
    task = next(t for t in validate_suite("generated-easy:5#count=8").tasks if t.metadata["template"] == "copy_file")
    source, target = task.instruction.removeprefix("Copy ").rstrip(".").split(" to ")
    env = HarnessEnv(tasks=[task])
    env.reset(seed=0)
    for command in (f"ln -s {source} {target}", "true"):
        call = {"name": "execute_bash", "arguments": {"command": command}}
        env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
    _, reward, _, _, info = env.step('<tool_call>{"name": "finish", "arguments": {"message": "done"}}</tool_call>')
    env.close()
    assert reward == 0.0 and info["reward_breakdown"][f"content:{target}"] == 0.0
