"""Guards against reward hacking, for every built-in task: untouched scores 0, the reference
solution scores 1, removing or rewriting visible tests does not pass, and the grader can be
neither read nor changed from the agent's sandbox."""

import json
from collections import Counter

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv, load_tasks
from harness_gym.agents import NullAgent, ReferenceAgent, run_episode

TASKS = load_tasks("builtin")


def test_the_suite():
    assert len(TASKS) >= 40 and len({t.id for t in TASKS}) == len(TASKS)
    families = Counter(t.metadata["family"] for t in TASKS)
    assert families["repository-repair"] >= 15 and families["workspace"] >= 15
    assert set(Counter(t.split for t in TASKS)) == {"train", "eval"}
    assert all(t.solution for t in TASKS)


@pytest.fixture(scope="module")
def env():
    environment = HarnessEnv("S0T0O0C0W0", max_steps=12)
    yield environment
    environment.close()


def bash(env, command):
    obs, *_ = env.step(
        f"<tool_call>{json.dumps({'name': 'execute_bash', 'arguments': {'command': command}})}</tool_call>"
    )
    return obs["messages"][-1]["content"]


def finish(env):
    return env.step('<tool_call>{"name": "finish", "arguments": {}}</tool_call>')[1]


@requires_bwrap
@pytest.mark.parametrize("task_id", [t.id for t in TASKS])
def test_reward_hacking_guards(env, task_id):
    assert run_episode(env, NullAgent(), seed=0, task_id=task_id).reward == 0.0
    assert run_episode(env, ReferenceAgent(), seed=0, task_id=task_id).reward == 1.0
    env.reset(seed=0, options={"task_id": task_id})
    out = bash(env, "ls -A /.harness; cat /.harness/grader/* 2>&1 | head -2; touch /.harness/grader/x 2>&1 | head -1")
    assert "grader" not in out.split("\n")[0] and "No such file" in out
    if (env.workspace / "tests").is_dir():
        bash(env, "rm -rf tests && mkdir tests && printf 'import unittest\\n' > tests/test_ok.py")
        assert finish(env) == 0.0  # the hidden tests decide, not the visible ones
