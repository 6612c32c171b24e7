"""Choosing a sandbox backend, and the clear errors when one cannot be used."""

import warnings

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.agents import ReferenceAgent, run_episode
from harness_gym.sandboxes import BubblewrapSandbox, DockerSandbox, SandboxError, choose_backend
from harness_gym.sandboxes.base import SandboxBackend
from harness_gym.sandboxes.unsafe import ALLOW_VARIABLE, UnsafeHostSandbox, UnsandboxedHostWarning


def test_missing_bubblewrap_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # a PATH without bwrap
    with pytest.raises(SandboxError, match=r"apt-get install -y bubblewrap"):
        BubblewrapSandbox()


def test_backend_choice():
    assert choose_backend(None, None) == "bubblewrap"
    assert choose_backend(None, "img:1") == "docker"
    assert choose_backend("docker", "img:1") == "docker"
    with pytest.raises(SandboxError, match="only the 'docker' backend"):
        choose_backend("bubblewrap", "img:1")
    with pytest.raises(SandboxError, match="unknown sandbox backend 'nope'"):
        choose_backend("nope", None)


def test_unsandboxed_needs_a_loud_opt_in(monkeypatch):
    monkeypatch.delenv(ALLOW_VARIABLE, raising=False)
    with pytest.raises(SandboxError, match="WITHOUT ANY ISOLATION"):
        UnsafeHostSandbox()
    with pytest.raises(SandboxError, match="WITHOUT ANY ISOLATION"):
        HarnessEnv(sandbox="unsafe-host").reset(seed=0)


def one_task_per_family(tasks):
    return list({task.metadata["family"]: task for task in reversed(tasks)}.values())


@pytest.mark.parametrize(
    "choose",
    # the repair tasks' reference runs `python3 -m unittest` on the host's own Python, seconds each
    [
        pytest.param(one_task_per_family, id="one-per-family"),
        pytest.param(list, marks=pytest.mark.slow, id="every-eval-task"),
    ],
)
def test_unsandboxed_runs_tasks_and_warns(monkeypatch, choose):
    monkeypatch.setenv(ALLOW_VARIABLE, "1")
    env = HarnessEnv("S0T1O0C0W0", sandbox="unsafe-host", tasks="builtin:eval")
    tasks = choose(env.tasks)
    assert {t.metadata["family"] for t in tasks} == {t.metadata["family"] for t in env.tasks}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = [run_episode(env, ReferenceAgent(), seed=0, task_id=t.id).reward for t in tasks]
    env.close()
    assert results == [1.0] * len(results)
    assert any(issubclass(w.category, UnsandboxedHostWarning) for w in caught)


@requires_bwrap
def test_custom_sandbox_factory_is_used():
    made = []

    def factory():
        made.append(BubblewrapSandbox(command_timeout_s=7))
        return made[-1]

    env = HarnessEnv(sandbox=factory)
    env.reset(seed=0)
    env.reset(seed=1)
    assert len(made) == 1 and env.sandbox is made[0]
    env.close()


def test_every_backend_starts_and_grades_through_the_shared_code():
    """Starting and grading are written once (SandboxBackend); a backend supplies only hooks."""
    for backend in (BubblewrapSandbox, DockerSandbox, UnsafeHostSandbox):
        assert issubclass(backend, SandboxBackend)
        assert "start" not in vars(backend) and "grade" not in vars(backend), backend.__name__


def test_unsandboxed_checks_the_mount_path_like_every_backend(monkeypatch, tmp_path):
    monkeypatch.setenv(ALLOW_VARIABLE, "1")
    sandbox = UnsafeHostSandbox()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnsandboxedHostWarning)
            with pytest.raises(SandboxError, match="would cover the sandbox's own /usr"):
                sandbox.start(sandbox.new_workspace(), "/usr/local/workspace")
            with pytest.raises(SandboxError, match="not a directory"):
                sandbox.start(tmp_path / "missing", "/workspace-unsafe-test")
    finally:
        sandbox.close()
    assert not (tmp_path / "missing").exists()
