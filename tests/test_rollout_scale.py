"""Sandboxes at rollout scale (issue 27): a sandbox lives as long as the process that owns it,
whatever thread started it; every host folder a run makes is in the crash-recovery registry."""

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.tasks.base import Task

pytestmark = requires_bwrap


def _task(root: Path) -> Task:
    folder = root / "files"
    folder.mkdir()
    (folder / "a.txt").write_text("alpha\n")
    grader = root / "grader"
    grader.mkdir()
    (grader / "grade.py").write_text("print(1.0)\n")
    return Task(id="alpha", instruction="Nothing to do.", workspace_dir=folder, grader_files=(grader,))


def _reset_in_pool_then_step(root: Path, count: int) -> int:
    """Reset ``count`` environments in a thread pool, shut the pool down (its threads exit), then run
    a command in each sandbox: how many shells were lost (dead, or restarted under the caller)."""
    task = _task(root)
    envs = [HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=50) for _ in range(count)]
    try:
        with ThreadPoolExecutor(max_workers=min(count, 16)) as pool:
            list(pool.map(lambda env: env.reset(seed=0), envs))
        # the pool's threads have exited: a sandbox tied to its spawning thread is SIGKILLed by now
        time.sleep(0.5)
        lost = 0
        for env in envs:
            before = env.sandbox._proc
            result = env.sandbox.run("cat a.txt")
            if result.output != "alpha\n" or env.sandbox._proc is not before:
                lost += 1
        return lost
    finally:
        for env in envs:
            env.close()


def test_a_sandbox_outlives_the_pool_thread_that_reset_it(tmp_path):
    assert _reset_in_pool_then_step(tmp_path, 8) == 0


@pytest.mark.slow
def test_64_sandboxes_outlive_the_pool_threads_that_reset_them(tmp_path):
    assert _reset_in_pool_then_step(tmp_path, 64) == 0
