"""Red-team findings: each test plays one exploit through the environment API (everything the agent
does runs in the sandbox) and asserts it earns nothing / leaks nothing. A test marked xfail(strict)
is an exploit that still works."""

import json
import warnings

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv


def play(task_id, *commands, tasks="builtin"):
    """Run ``commands`` as the agent, finish, and return (reward, info, outputs)."""
    warnings.simplefilter("ignore")
    env = HarnessEnv("S0T0O0C0W0", tasks=tasks)
    try:
        env.reset(seed=0, options={"task_id": task_id})
        outputs = []
        for command in commands:
            call = json.dumps({"name": "execute_bash", "arguments": {"command": command}})
            obs, _, _, _, _ = env.step(f"<tool_call>{call}</tool_call>")
            outputs.append(obs["messages"][-1]["content"])
        _, reward, _, _, info = env.step('<tool_call>{"name": "finish", "arguments": {"message": "done"}}</tool_call>')
        return reward, info, outputs
    finally:
        env.close()


@requires_bwrap
def test_checksum_manifest_of_deleted_data_earns_nothing():
    """workspace-checksum-manifest's grader hashed whatever data/ held at grading time: deleting
    data/ and writing an empty SHA256SUMS scored 1.0 (the expected manifest was empty too)."""
    reward, info, _ = play("workspace-checksum-manifest", "rm -rf data; : > SHA256SUMS")
    assert reward == 0.0, info.get("reward_breakdown")


@requires_bwrap
def test_checksum_manifest_of_replaced_data_earns_nothing():
    """Same grader: replace data/ with one file of the agent's choosing and list only that one."""
    reward, info, _ = play(
        "workspace-checksum-manifest", "rm -rf data; mkdir data; : > data/x; sha256sum data/x > SHA256SUMS"
    )
    assert reward == 0.0, info.get("reward_breakdown")
