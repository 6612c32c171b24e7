"""The warm spare: the next episode's sandbox is started in the background and taken at reset when
it was made for the task asked for; a fresh workspace either way; one spare at most; nothing left
after close; off with HARNESS_GYM_WARM_SPARE=0."""

import time
from pathlib import Path

from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.sandboxes import spare
from harness_gym.tasks.base import Task

pytestmark = requires_bwrap


def _task(root: Path, name: str) -> Task:
    folder = root / name
    folder.mkdir()
    (folder / "a.txt").write_text(f"{name}\n")
    grader = root / f"{name}-grader"
    grader.mkdir()
    (grader / "grade.py").write_text("print(1.0)\n")
    return Task(id=name, instruction="Nothing to do.", workspace_dir=folder, grader_files=(grader,))


def _running(sandbox) -> bool:
    return sandbox._proc is not None and sandbox._proc.poll() is None


def _wait_for_spare(env: HarnessEnv):
    for _ in range(600):
        ready = env._spare.holds()
        if ready is not None:
            return ready
        time.sleep(0.05)
    raise AssertionError("no spare was made within 30 s")


def test_reset_takes_the_warm_spare_for_the_same_task_with_a_fresh_workspace(tmp_path):
    task = _task(tmp_path, "alpha")
    env = HarnessEnv("S0T1O0C0W0", tasks=[task], max_steps=50)  # T1: the spare's tool server is primed
    try:
        env.reset(seed=0)
        assert env._spare._pending is None  # one reset: no spare yet (an environment may cycle tasks)
        env.reset(seed=0)  # the same task again: from now on a spare is kept
        first = env.sandbox
        assert first.run("echo changed > a.txt; cat a.txt").output == "changed\n"
        ready = _wait_for_spare(env)
        assert ready is not first and _running(ready)
        env.reset(seed=1)
        assert env.sandbox is ready  # the spare, started in the background
        assert env.sandbox.run("cat a.txt").output == "alpha\n"  # the task's files, not the last episode's
        finish = env.tool_interface.finish_name
        assert env.step(f'<tool_call>{{"name": "{finish}", "arguments": {{}}}}</tool_call>')[2]  # graded
        for _ in range(200):  # the finished episode's sandbox is closed in the background
            if not _running(first):
                break
            time.sleep(0.05)
        assert not _running(first) and first.workspace is None
        following = _wait_for_spare(env)
    finally:
        env.close()
    assert not _running(env._sandboxes.get(("bubblewrap", None, None)) or following)
    assert not _running(following) and following.workspace is None and env._spare.holds() is None


def test_a_spare_for_another_task_is_closed_and_not_used(tmp_path):
    one, two = _task(tmp_path, "one"), _task(tmp_path, "two")
    env = HarnessEnv("S0T0O0C0W0", tasks=[one, two], max_steps=50)
    try:
        env.reset(seed=0, options={"task_id": "one"})
        env.reset(seed=0, options={"task_id": "one"})
        made_for_one = _wait_for_spare(env)
        env.reset(seed=1, options={"task_id": "two"})
        assert env.sandbox is not made_for_one
        assert env.sandbox.run("cat a.txt").output == "two\n"
        for _ in range(200):
            if not _running(made_for_one):
                break
            time.sleep(0.05)
        assert not _running(made_for_one) and made_for_one.workspace is None
    finally:
        env.close()


def test_spares_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv(spare.VARIABLE, "0")
    env = HarnessEnv("S0T0O0C0W0", tasks=[_task(tmp_path, "solo")], max_steps=50)
    try:
        env.reset(seed=0)
        first = env.sandbox
        env.reset(seed=1)
        assert env.sandbox is first and env._spare.holds() is None  # one sandbox, restarted in place
    finally:
        env.close()


def test_a_spare_that_failed_leaves_the_reset_to_start_its_own(tmp_path):
    task = _task(tmp_path, "fails")
    env = HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=50)
    try:
        env.reset(seed=0)
        env.reset(seed=0)
        key = (env._sandbox_key(task), id(task))

        def broken():
            raise RuntimeError("no spare today")

        env._spare.prepare(key, broken)  # replaces (and closes) the spare made at reset
        env.reset(seed=1)
        assert _running(env.sandbox) and env.sandbox.run("cat a.txt").output == "fails\n"
    finally:
        env.close()
