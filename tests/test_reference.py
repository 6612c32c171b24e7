"""Every built-in task is solvable through every harness, and doing nothing earns nothing."""

import gymnasium as gym
import pytest
from conftest import covering_configs, requires_bwrap

from harness_gym import all_configs, load_tasks
from harness_gym.agents import CALL_FORMATS, NullAgent, ReferenceAgent, run_episode
from harness_gym.design import TRAINING_SET

pytestmark = requires_bwrap
TASKS = [t.id for t in load_tasks("builtin")]
COVERING = covering_configs()
PAIRWISE = sorted(TRAINING_SET)  # the 18 OA training configurations: alone, every pair of levels


def solve_everywhere(configs, tasks_per_config=None):
    """The reference agent in every configuration, on every task (or on a rotating subset of
    ``tasks_per_config`` tasks per configuration, so that every task meets several harnesses)."""
    failures = []
    for index, config in enumerate(configs):
        env = gym.make(config.env_id)
        chosen = (
            TASKS
            if tasks_per_config is None
            else [TASKS[(index * tasks_per_config + k) % len(TASKS)] for k in range(tasks_per_config)]
        )
        for task_id in chosen:
            fmt = CALL_FORMATS[(index + TASKS.index(task_id)) % len(CALL_FORMATS)]
            result = run_episode(env, ReferenceAgent(fmt), seed=index, task_id=task_id)
            if result.reward != 1.0 or not result.terminated:
                failures.append((config.code, task_id, fmt, result.reward, result.final_info.get("reward_breakdown")))
        env.close()
    return failures


def test_builtin_suite_has_both_families_and_splits():
    tasks = load_tasks("builtin")
    assert len(tasks) >= 5
    assert {t.metadata["family"] for t in tasks} == {"repository-repair", "workspace"}
    assert {t.split for t in tasks} == {"train", "eval"}
    assert all(t.solution for t in tasks)


def rotation(configs, tasks_per_config):
    """The (task, call format) pairs solve_everywhere plays, to check what a sample keeps."""
    return {
        (
            TASKS[(index * tasks_per_config + k) % len(TASKS)],
            CALL_FORMATS[(index + (index * tasks_per_config + k) % len(TASKS)) % len(CALL_FORMATS)],
        )
        for index in range(len(configs))
        for k in range(tasks_per_config)
    }


@pytest.mark.parametrize(
    "configs", [pytest.param(PAIRWISE, id="pairwise"), pytest.param(COVERING, id="covering", marks=pytest.mark.slow)]
)
def test_reference_agent_solves_every_task_on_a_covering_set_of_configurations(configs):
    """`pairwise` (default suite): the 18 OA training configurations, which alone hold every pair of
    levels, 4 rotating tasks each (every task and every call format at least once); `covering`
    (slow): the 36 training and held-out configurations, every task at least 3 times."""
    assert len(PAIRWISE) == 18 and len(COVERING) == 36
    played = rotation(configs, 4)
    assert {task for task, _ in played} == set(TASKS) and {fmt for _, fmt in played} == set(CALL_FORMATS)
    assert solve_everywhere(configs, tasks_per_config=4) == []


@pytest.mark.slow
def test_reference_agent_solves_every_task_in_all_243_configurations():
    assert solve_everywhere(all_configs()) == []


@pytest.mark.parametrize("config", ["S2T2O2C2W2", pytest.param("S1T1O1C1W1", marks=pytest.mark.slow)])
def test_doing_nothing_scores_zero(config):
    """Every task in the richest harness (default suite); the middle corner too behind slow."""
    env = gym.make(f"Harness-{config}")
    for task_id in TASKS:
        result = run_episode(env, NullAgent(), seed=0, task_id=task_id)
        assert result.terminated and result.reward == 0.0, task_id
        assert result.final_info["grader_error"] is None
    env.close()


def test_talking_until_the_budget_ends_scores_zero():
    env = gym.make("Harness-S0T0O0C0W0", max_steps=3)
    result = run_episode(env, NullAgent(finish=False), seed=0, task_id=TASKS[0])
    assert result.truncated and result.reward == 0.0 and result.steps == 3
    env.close()


def test_visible_tests_do_not_decide_the_reward():
    """Deleting the repository's visible tests and finishing does not pass: the grader has its own."""
    env = gym.make("Harness-S0T0O0C0W0")
    env.reset(seed=0, options={"task_id": "repair-word-frequency"})
    env.step('<tool_call>{"name": "execute_bash", "arguments": {"command": "rm -rf tests"}}</tool_call>')
    *_, reward, terminated, _, info = env.step('<tool_call>{"name": "finish", "arguments": {}}</tool_call>')
    assert terminated and reward == 0.0
    env.close()
