"""ThreadVectorEnv: Gymnasium's SyncVectorEnv semantics, the sub-environments stepped concurrently."""

import json
import threading
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from conftest import requires_bwrap
from gymnasium.vector import AutoresetMode, SyncVectorEnv

import harness_gym  # noqa: F401  (registers the ids)
from harness_gym.tasks.base import Task
from harness_gym.vector import SubEnvironmentError, ThreadVectorEnv, make_vec

pytestmark = requires_bwrap
ENV_ID = "Harness-S0T0O0C0W0"


def _tasks(root: Path) -> list[Task]:
    tasks = []
    for name in ("one", "two"):
        folder = root / name / "files"
        folder.mkdir(parents=True)
        (folder / "a.txt").write_text(f"{name}\n")
        grader = root / name / "grader"
        grader.mkdir()
        (grader / "grade.py").write_text("print(1.0)\n")
        tasks.append(Task(id=name, instruction=f"task {name}", workspace_dir=folder, grader_files=(grader,)))
    return tasks


def _bash(command: str) -> str:
    return f"<tool_call>{json.dumps({'name': 'execute_bash', 'arguments': {'command': command}})}</tool_call>"


def _comparable(value):
    """What two runs of the same seeds and actions must share: timings and sandbox uids left out."""
    if isinstance(value, dict):
        return {
            k: _comparable(v) for k, v in value.items() if str(k).lstrip("_") not in ("durations", "sandbox_limits")
        }
    if isinstance(value, (list, tuple)):
        return [_comparable(v) for v in value]
    if isinstance(value, np.ndarray):
        return _comparable(value.tolist())
    return value


def _run(envs, steps: int) -> list:
    trace = [_comparable(envs.reset(seed=3))]
    for step in range(steps):
        actions = tuple(_bash(f"cat a.txt; echo env-{i}-step-{step}") for i in range(envs.num_envs))
        trace.append(_comparable(envs.step(actions)))
    envs.close()
    return trace


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_same_observations_rewards_and_autoresets_as_sync_vector_env(tmp_path, mode):
    """Scripted actions across an episode end and its autoreset (max_steps=2): every observation, reward, flag and
    info equal to SyncVectorEnv's on the same seeds, in both autoreset modes."""
    tasks = _tasks(tmp_path)

    def make():
        return gym.make(ENV_ID, tasks=tasks, max_steps=2)

    threaded = ThreadVectorEnv([make, make], autoreset_mode=mode)
    assert threaded.metadata["autoreset_mode"] == mode
    assert threaded.single_observation_space == threaded.envs[0].observation_space
    assert threaded.single_action_space == threaded.envs[0].action_space
    ours = _run(threaded, 3)
    theirs = _run(SyncVectorEnv([make, make], autoreset_mode=mode), 3)
    assert ours == theirs
    rewards = [step[1] for step in ours[1:]]
    assert [1.0, 1.0] in rewards  # the grader ran at the step budget's end
    outputs = ours[1][0]["messages"]
    assert "one" in outputs[0][-1]["content"] or "two" in outputs[0][-1]["content"]
    assert "env-1-step-0" in outputs[1][-1]["content"]


def test_steps_run_concurrently_and_disabled_mode_wants_an_explicit_reset(tmp_path):
    """Two sub-environments each sleeping 0.4 s in its shell finish a step in well under 0.8 s; with
    autoreset DISABLED a finished sub-environment is reset by ``reset_mask``, as in SyncVectorEnv."""
    import time

    tasks = _tasks(tmp_path)
    envs = make_vec(ENV_ID, 2, autoreset_mode="Disabled", tasks=tasks, max_steps=2)
    try:
        observations, _ = envs.reset(seed=0)
        assert envs.observation_space.contains(observations)
        started = time.perf_counter()
        envs.step((_bash("sleep 0.4"), _bash("sleep 0.4")))
        assert time.perf_counter() - started < 0.75
        _, _, _, truncated, _ = envs.step((_bash("true"), _bash("true")))
        assert truncated.all()
        with pytest.raises(AssertionError):
            envs.step((_bash("true"), _bash("true")))
        mask = np.array([True, False])
        _, info = envs.reset(options={"reset_mask": mask})
        assert list(info["_task_id"]) == [True, False]
        with pytest.raises(ValueError, match="reset_mask"):
            envs.reset(options={"reset_mask": np.zeros(2, dtype=np.bool_)})
        assert envs.spec is not None and envs.spec.kwargs["num_envs"] == 2
    finally:
        envs.close()


def test_call_get_attr_and_set_attr_reach_every_sub_environment(tmp_path):
    envs = make_vec(ENV_ID, 2, tasks=_tasks(tmp_path))
    try:
        assert envs.get_attr("config") == ("S0T0O0C0W0", "S0T0O0C0W0")
        envs.set_attr("resample_names", [True, False])
        assert envs.get_attr("resample_names") == (True, False)
        envs.reset(seed=0)
        outputs = envs.call("render")  # a method, called in each
        assert all(output is None for output in outputs)
        with pytest.raises(ValueError, match="length equal"):
            envs.set_attr("resample_names", [True])
    finally:
        envs.close()


class _Raises(gym.Wrapper):
    """A sub-environment that raises at its step (and, when asked, at its close)."""

    def __init__(self, env, close_raises: bool = False):
        super().__init__(env)
        self.close_raises = close_raises

    def step(self, action):
        raise KeyError("scripted failure")

    def close(self):
        super().close()
        if self.close_raises:
            raise OSError("close failed too")


def test_a_sub_environment_that_raises_is_named_and_leaks_no_sandbox(tmp_path):
    """The failing index and its exception in the error; the other sub-environment's step ran to
    its end; close closes every sandbox even when one close raises, then raises that."""
    tasks = _tasks(tmp_path)
    made = []

    def healthy():
        made.append(gym.make(ENV_ID, tasks=tasks))
        return made[-1]

    def failing():
        made.append(_Raises(gym.make(ENV_ID, tasks=tasks), close_raises=True))
        return made[-1]

    envs = ThreadVectorEnv([healthy, failing, healthy])
    envs.reset(seed=0)
    shells = [env.unwrapped.sandbox._proc for env in made]
    with pytest.raises(SubEnvironmentError, match="sub-environment 1: KeyError") as raised:
        envs.step((_bash("echo ran > done.txt"), _bash("true"), _bash("echo ran > done.txt")))
    assert list(raised.value.failures) == [1] and isinstance(raised.value.__cause__, KeyError)
    for index in (0, 2):  # each healthy step finished before the error was raised
        assert made[index].unwrapped.steps == 1
    with pytest.raises(SubEnvironmentError, match="sub-environment 1: OSError: close failed"):
        envs.close()
    for shell in shells:
        assert shell.wait(timeout=10) is not None
    assert all(env.unwrapped.sandbox is None for env in made)
    assert not [t for t in threading.enumerate() if t.name.startswith("harness-gym-vector-")]
    with pytest.raises(ValueError, match="max_workers"):
        ThreadVectorEnv([healthy], max_workers=0)


def test_merged_infos_equal_gymnasiums_fold_of_add_info():
    """The batched info merge gives what ``_add_info`` folded in order gives, on infos with keys
    missing in some, nested dicts, numbers, arrays, objects, a key that is a dict in one and not
    in another, ``final_obs``, and a key that collides with a mask's name."""
    envs = ThreadVectorEnv.__new__(ThreadVectorEnv)
    envs.num_envs = 4
    cases = [
        [(0, {"a": 1, "b": {"c": 2.5, "d": "x"}}), (1, {"a": 2, "e": np.int8(3)}), (3, {"b": {"c": 1}, "f": [1]})],
        [(0, {"g": np.arange(3), "h": True}), (2, {"g": np.ones(3), "h": False, "i": None})],
        [(1, {"m": {"n": 1}}), (2, {"m": 5}), (3, {"final_obs": {"messages": []}, "final_info": {"a": 1}})],
        [(0, {"k": 1, "_k": "collides"}), (1, {"k": 2})],
        [],
    ]
    for case in cases:
        expected = envs._folded(case)
        merged = envs._merged_infos(case)
        assert list(merged) == list(expected)
        for key in expected:
            assert _comparable(merged[key]) == _comparable(expected[key])
            assert getattr(merged[key], "dtype", None) == getattr(expected[key], "dtype", None)


def test_copied_observations_are_independent_deep_copies():
    from harness_gym.vector import copied

    shared = {"role": "tool", "content": "x", "tool_calls": [{"function": {"name": "a", "arguments": "{}"}}]}
    observation = {"messages": ([shared], [dict(shared)]), "tools": ([{"parameters": {"type": "object"}}],)}
    observation["extra"] = np.arange(3)
    copy = copied(observation)
    assert _comparable(copy) == _comparable(observation)
    copy["messages"][0][0]["tool_calls"][0]["function"]["name"] = "changed"
    copy["tools"][0][0]["parameters"]["type"] = "changed"
    copy["extra"][0] = 7
    assert shared["tool_calls"][0]["function"]["name"] == "a"
    assert observation["tools"][0][0]["parameters"]["type"] == "object" and observation["extra"][0] == 0
    assert isinstance(copy["messages"], tuple)


def test_gymnasium_make_vec_modes_for_the_registered_ids():
    """``vectorization_mode="vector_entry_point"`` is refused for the ``Harness-*`` ids: Gymnasium
    1.x refuses it for any spec with ``additional_wrappers`` (their GradeTruncation), so none is
    registered, and ``gym.make_vec``'s default stays SyncVectorEnv (a registered vector entry point
    would make that default raise too). ``harness_gym.vector.make_vec`` is the way to threads."""
    with pytest.raises(gym.error.Error, match=r"vector entry point|additional_wrappers"):
        gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="vector_entry_point")
    assert gym.spec(ENV_ID).vector_entry_point is None and gym.spec(ENV_ID).additional_wrappers
    envs = gym.make_vec(ENV_ID, num_envs=2)
    assert isinstance(envs, SyncVectorEnv) and not isinstance(envs, ThreadVectorEnv)
    envs.close()
