"""The warm spare: the next episode's sandbox is started in the background and taken at reset when
it was made for the task asked for; a fresh workspace either way; one spare at most; nothing left
after close; off with HARNESS_GYM_WARM_SPARE=0."""

import os
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
        assert ready._channels.announced, "a spare handed out before its tool server was up"
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


def test_handing_a_job_to_the_spare_pool_takes_no_lock(monkeypatch):
    """64 resets at once waited p50 194 ms to hand over their next spare: the pool's submit took
    locks, and a thread preempted while holding one made every other wait for the scheduler in turn.
    A lock held (as by a preempted thread) must not stop a handover, nor a sandbox launch."""
    import threading

    from harness_gym.sandboxes import launcher, spare

    assert spare._start_in_background(lambda: 1).result(timeout=30) == 1  # the pool exists
    assert launcher.launch(lambda: 1) == 1  # the launcher thread exists
    done = []

    def hand_over() -> None:
        done.append(spare._start_in_background(lambda: 2).result(timeout=30))
        done.append(launcher.launch(lambda: 3))

    with spare._starter_lock, launcher._lock:
        thread = threading.Thread(target=hand_over, daemon=True)
        thread.start()
        thread.join(timeout=10)
    assert done == [2, 3]


def test_what_the_spare_pool_holds_at_exit_is_still_done(tmp_path):
    """Finished sandboxes are closed by the pool: a job queued as the interpreter exits still runs."""
    import subprocess
    import sys

    marker = tmp_path / "closed"
    script = (
        "import time\n"
        "from harness_gym.sandboxes import spare\n"
        "spare._start_in_background(lambda: time.sleep(0.3))\n"
        f"spare._start_in_background(lambda: open({str(marker)!r}, 'w').close())\n"
    )
    repo = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(repo)}, timeout=60)
    assert done.returncode == 0 and marker.exists()
