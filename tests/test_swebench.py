"""SWE-bench- and R2E-Gym-format tasks in the Docker sandbox, on an image the test builds: a tiny
repository at /testbed, hidden tests at /r2e_tests, and pytest copied in (no registry needed)."""

import json
import re

import pytest
from conftest import SWE_TEST_PATCH

from harness_gym import HarnessEnv
from harness_gym.sandboxes.base import SandboxError
from harness_gym.sandboxes.docker_support import extract_image_path, missing_image
from harness_gym.tasks import validate_suite
from harness_gym.tasks.swebench import swebench_image


@pytest.fixture
def datasets(tmp_path, swe_image, monkeypatch):
    host, tag = swe_image
    monkeypatch.setenv("DOCKER_HOST", host)
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    swe = tmp_path / "swe.jsonl"
    swe.write_text(
        "\n".join(
            json.dumps(row)
            for row in [
                {
                    "repo": "demo/calc",
                    "instance_id": "demo__calc-1",
                    "base_commit": "abc",
                    "patch": "GOLD PATCH - never shown",
                    "test_patch": SWE_TEST_PATCH,
                    "problem_statement": "add() subtracts instead of adding.",
                    "hints_text": "Look at calc.py",
                    "version": "1.0",
                    "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
                    "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_sub"]),
                    "environment_setup_commit": "abc",
                },
                {"instance_id": "broken-1", "problem_statement": "x"},
            ]
        )
    )
    r2e = tmp_path / "r2e.jsonl"
    r2e.write_text(
        json.dumps(
            {
                "repo_name": "calc",
                "docker_image": tag,
                "commit_hash": "0123456789abcdef",
                "problem_statement": "add() is wrong.",
                "prompt": "GOLD PATCH - never shown",
                "execution_result_content": "TEST CODE - never shown",
                "expected_output_json": json.dumps({"test_add": "PASSED", "test_sub": "PASSED"}),
            }
        )
    )
    return swe, r2e


def bash(env, command):
    obs, *_ = env.step(
        f"<tool_call>{json.dumps({'name': 'execute_bash', 'arguments': {'command': command}})}</tool_call>"
    )
    return obs["messages"][-1]["content"]


def finish(env):
    return env.step('<tool_call>{"name": "finish", "arguments": {}}</tool_call>')


def test_image_naming():
    # SWE-bench publishes its images as swebench/sweb.eval...; a local build of its harness drops the prefix
    assert swebench_image("django__django-11099") == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert swebench_image("Foo__bar-1", "arm64") == "swebench/sweb.eval.arm64.foo_1776_bar-1:latest"
    local = "sweb.eval.x86_64.django_1776_django-11099:latest"
    assert swebench_image("django__django-11099", present={local}) == local
    assert swebench_image("django__django-11099", present={local, f"swebench/{local}"}) == f"swebench/{local}"


def test_a_missing_image_says_what_to_pull_or_build():
    docker = pytest.importorskip("docker")
    error = missing_image("swebench/sweb.eval.x86_64.a_1776_b-1:latest", docker.errors.ImageNotFound("No such image"))
    assert "docker pull swebench/sweb.eval.x86_64.a_1776_b-1:latest" in str(error)
    assert "tagged sweb.eval.x86_64.a_1776_b-1:latest" in str(error) and "either name" in str(error)
    assert "docker pull other:1" in str(missing_image("other:1", docker.errors.ImageNotFound("gone")))
    assert missing_image("other:1", RuntimeError("engine hung up")) is None


def test_a_missing_image_is_reported_by_the_engine_path(docker_engine, tmp_path):
    host, _ = docker_engine
    with pytest.raises(SandboxError, match=re.escape("docker pull swebench/sweb.eval.x86_64.none_1776_here-1:latest")):
        extract_image_path("swebench/sweb.eval.x86_64.none_1776_here-1:latest", "/testbed", tmp_path, host)


def test_swebench_instance_resolved_only_by_a_real_fix(datasets):
    swe, _ = datasets
    suite = validate_suite(f"swebench:{swe}")
    assert [t.id for t in suite.tasks] == ["demo__calc-1"] and "broken-1: missing" in suite.errors[0]
    task = suite.tasks[0]
    assert task.image == "sweb.eval.x86_64.demo_1776_calc-1:latest" and "Look at calc.py" not in task.instruction
    env = HarnessEnv(tasks=suite.tasks)  # a task with an image runs in Docker by default
    obs, _ = env.reset(seed=0)
    shown = json.dumps(obs)
    assert "GOLD PATCH" not in shown and "test_add" not in shown
    assert "def add(a, b)" in bash(env, "cat calc.py")
    _, reward, _, _, info = finish(env)  # unfixed
    assert reward == 0.0 and info["reward_breakdown"] == {
        "fail_to_pass": "0/1",
        "pass_to_pass": "1/1",
        "reverted": [],
    }, env.last_grade.log
    env.reset(seed=0)
    bash(env, "sed -i '2s/a - b/a + b/' calc.py && rm -rf tests")  # fixes, and deletes the visible tests
    _, reward, _, _, info = finish(env)
    assert reward == 1.0, info
    env.close()


def test_r2e_row_with_hidden_tests(datasets):
    _, r2e = datasets
    env = HarnessEnv(tasks=f"r2e:{r2e}")
    env.reset(seed=0)
    assert "No such file" in bash(env, "ls /r2e_tests 2>&1")  # hidden from the agent
    bash(env, "sed -i '2s/a - b/a + b/' calc.py")
    _, reward, _, _, info = finish(env)
    assert reward == 1.0 and info["reward_breakdown"] == {"matching_tests": "2/2", "reverted": []}
    env.reset(seed=0)
    _, reward, _, _, info = finish(env)
    assert reward == 0.0 and info["reward_breakdown"] == {"matching_tests": "1/2", "reverted": []}
    env.close()
