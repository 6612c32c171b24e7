"""`harness-gym serve-env`: OpenEnv's own client (openenv-core) drives harness environments over
HTTP/WebSocket on 127.0.0.1, with sessions, a concurrency limit, a token, idle reaping and a
graceful shutdown that leaves no sandbox behind."""

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import requires_bwrap

pytest.importorskip("openenv.core", reason="openenv-core is not installed (pip install --no-deps openenv-core)")
from openenv.core import GenericEnvClient

from harness_gym.env_server import EnvServer
from harness_gym.tasks import load_tasks

pytestmark = requires_bwrap
TOKEN = "test-token-8d1f"


def call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def with_token(url, token=TOKEN):
    return url.replace("http://", f"http://token:{token}@")


@pytest.fixture
def server(request):
    options = getattr(request, "param", {})
    srv = EnvServer(options.pop("env_id", "Harness-S0T0O0C0W0"), port=0, token=TOKEN, **options).start()
    yield srv
    srv.stop()


def wait_for(predicate, timeout_s, message):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(message)
        time.sleep(0.1)


def process_alive(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def sandbox_traces(served_env):
    """The sandbox's shell process and host workspace, to check they are gone after a close."""
    sandbox = served_env.gym_env.unwrapped.sandbox
    return sandbox._proc.pid, Path(sandbox.workspace)


@pytest.mark.parametrize("server", [{"env_id": "Harness-S1T2O0C1W2"}], indirect=True)
def test_scripted_policy_solves_a_builtin_task_over_the_wire(server):
    task = {t.id: t for t in load_tasks("builtin")}["workspace-organize-logs"]
    with GenericEnvClient(base_url=with_token(server.url)).sync() as env:
        result = env.reset(seed=0, task_id=task.id)
        observation = result.observation
        assert not result.done and observation["info"]["task_id"] == task.id
        names = observation["info"]["tool_names"]  # this harness renames its tools: the client learns how
        assert {m["source"] for m in observation["messages"]} >= {"system", "task"}
        assert sorted(t["function"]["name"] for t in observation["tools"]) == sorted(names.values())
        actions = [call(names[s["tool"]], **s["arguments"]) for s in task.solution]
        actions.append(call(names["finish"], message="logs moved and indexed"))
        actions[0] = "Plan:\n1. look\n2. move the logs and write the index\n3. finish\n" + actions[0]
        for action in actions:
            result = env.step({"text": action})
            if result.done:
                break
    assert result.done and result.reward == 1.0
    assert result.observation["terminated"] and not result.observation["truncated"]
    assert result.observation["info"]["terminated_reason"] == "finish tool called"
    assert result.observation["info"]["reward_breakdown"]
    wait_for(lambda: not server.registry.live(), 10, "the session outlived its client")


@pytest.mark.parametrize("server", [{"max_sessions": 32}], indirect=True)
def test_32_concurrent_clients_each_in_their_own_sandbox(server):
    async def episode(index):
        client = GenericEnvClient(base_url=with_token(server.url), message_timeout_s=300)
        async with client:
            await client.reset(seed=index, task_id="workspace-organize-logs")
            result = await client.step({"text": call("execute_bash", command=f"echo client-{index} > mine.txt; ls")})
            listing = result.observation["messages"][-1]["content"]
            result = await client.step({"text": call("execute_bash", command="cat mine.txt")})
            mine = result.observation["messages"][-1]["content"].strip()
            result = await client.step({"text": call("finish", message="done")})
            return listing, mine, result.done, result.reward

    async def all_episodes():
        return await asyncio.gather(*(episode(i) for i in range(32)))

    started = time.perf_counter()
    results = asyncio.run(asyncio.wait_for(all_episodes(), timeout=600))
    for index, (listing, mine, done, reward) in enumerate(results):
        assert mine == f"client-{index}", "a session saw another session's workspace"
        assert "mine.txt" in listing and "app.log" in listing
        assert done and reward == 0.0  # finished without solving: graded, and graded as a failure
    wait_for(lambda: not server.registry.live(), 30, "sessions stayed open after their clients left")
    print(f"32 concurrent episodes in {time.perf_counter() - started:.1f} s")


@pytest.mark.parametrize("server", [{"max_sessions": 1}], indirect=True)
def test_sessions_beyond_the_limit_are_refused(server):
    with GenericEnvClient(base_url=with_token(server.url)).sync() as first:
        first.reset(seed=0)
        with (
            pytest.raises(ConnectionError, match="HTTP 503"),
            GenericEnvClient(base_url=with_token(server.url)).sync() as second,
        ):
            second.reset(seed=0)
        assert first.step({"text": call("execute_bash", command="true")}).reward == 0.0


def test_missing_or_wrong_token_is_refused(server):
    import requests

    for url in (server.url, with_token(server.url, "wrong")):
        with pytest.raises(ConnectionError, match="HTTP 401"), GenericEnvClient(base_url=url).sync() as env:
            env.reset()
    assert not server.registry.live()
    assert requests.get(f"{server.url}/schema", timeout=10).status_code == 401
    assert (
        requests.get(f"{server.url}/schema", headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
    )
    schema = requests.get(f"{server.url}/schema", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert schema.status_code == 200 and "text" in schema.json()["action"]["properties"]
    assert requests.get(f"{server.url}/health", timeout=10).status_code == 200  # probes need no token
    assert requests.post(
        f"{server.url}/reset", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
    ).status_code in (
        404,
        405,
    )  # no stateless episodes over plain HTTP


def test_invalid_actions_get_clear_errors(server):
    with GenericEnvClient(base_url=with_token(server.url)).sync() as env:
        with pytest.raises(RuntimeError, match="no episode is running"):
            env.step({"text": "hello"})
        env.reset(seed=0)
        with pytest.raises(RuntimeError, match="exactly one of 'text'"):
            env.step({"text": "a", "message": {"role": "assistant", "content": "b"}})
        with pytest.raises(RuntimeError, match="unknown reset arguments"):
            env.reset(colour="blue")
        result = env.step({"message": {"role": "assistant", "content": "no call here"}})
        assert "No tool call" in result.observation["messages"][-1]["content"]


@pytest.mark.parametrize("server", [{"idle_timeout_s": 1.0}], indirect=True)
def test_idle_session_is_reaped_and_its_sandbox_closed(server):
    with GenericEnvClient(base_url=with_token(server.url)).sync() as env:
        env.reset(seed=0)
        [served] = server.registry.live()
        pid, workspace = sandbox_traces(served)
        assert process_alive(pid) and workspace.exists()
        wait_for(lambda: not server.registry.live(), 20, "the idle session was not reaped")
        assert not process_alive(pid) and not workspace.exists()
        with pytest.raises(RuntimeError, match="session was closed"):
            env.step({"text": call("execute_bash", command="true")})


def test_vanished_client_session_is_closed(server):
    async def vanish():
        client = GenericEnvClient(base_url=with_token(server.url))
        await client.connect()
        await client.reset(seed=0)
        client._ws.transport.abort()  # the TCP connection drops: no close message, no goodbye

    asyncio.run(vanish())
    wait_for(lambda: not server.registry.live(), 20, "the vanished client's session stayed open")


def bwrap_descendants(root_pid):
    children = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)
            name = fields[0].split("(", 1)[1]
            children.setdefault(int(fields[1].split()[1]), []).append((int(stat.parent.name), name))
        except (FileNotFoundError, IndexError, ValueError):
            continue
    found, stack = [], [root_pid]
    while stack:
        for pid, name in children.get(stack.pop(), []):
            stack.append(pid)
            if name == "bwrap":
                found.append(pid)
    return found


def workspaces(folder):
    return [p for p in folder.iterdir() if p.name.startswith(("harness-gym-ws-", "harness-gym-ctl-"))]


def test_cli_serves_and_shuts_down_gracefully_closing_every_sandbox():
    # the server's own temp folder holds its sessions' workspaces: what a shutdown must not leave behind
    temp = Path(tempfile.mkdtemp(prefix="serve-env-test-"))
    temp.chmod(0o755)  # sandbox users traverse it
    env = {**os.environ, "HARNESS_GYM_ENV_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1", "TMPDIR": str(temp)}
    command = [sys.executable, "-m", "harness_gym.cli", "serve-env", "Harness-S0T0O0C0W0", "--port", "0"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline()
        assert "serving Harness-S0T0O0C0W0 at http://127.0.0.1:" in line and "HARNESS_GYM_ENV_TOKEN" in line
        url = line.split(" at ")[1].split()[0]

        async def open_sessions():
            clients = [GenericEnvClient(base_url=with_token(url)) for _ in range(2)]
            for client in clients:
                await client.reset(seed=0)
            sandboxes = bwrap_descendants(process.pid)
            assert len(sandboxes) >= 2, "each session should run its own sandbox"
            assert len(workspaces(temp)) >= 2, "each session should have its own workspace"
            process.send_signal(signal.SIGTERM)  # while both clients are still connected
            # uvicorn shuts down gracefully, then re-raises the signal: the exit status says SIGTERM
            assert process.wait(timeout=60) in (0, -signal.SIGTERM)
            return sandboxes

        sandboxes = asyncio.run(open_sessions())
        wait_for(lambda: not any(process_alive(pid) for pid in sandboxes), 10, "sandboxes outlived the server")
        assert not workspaces(temp), "the shutdown left workspaces behind"
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        shutil.rmtree(temp, ignore_errors=True)
    assert "Traceback" not in process.stderr.read()


def test_a_message_that_is_no_json_object_gets_an_error_and_the_session_stays(server):
    """Issue 28: openenv-core ended the whole session (and its episode) on a message like ``[]``."""

    async def play():
        client = GenericEnvClient(base_url=with_token(server.url))
        await client.connect()
        await client.reset(seed=0)
        answers = []
        for raw in ("[]", "5", "null", '"x"', '{"type": "no-such-type"}'):
            await client._ws.send(raw)
            answers.append(json.loads(await asyncio.wait_for(client._ws.recv(), 30)))
        await client._ws.send(b"\x00binary")
        answers.append(json.loads(await asyncio.wait_for(client._ws.recv(), 30)))
        result = await client.step({"text": call("execute_bash", command="echo still-here")})
        await client.close()
        return answers, result

    answers, result = asyncio.run(play())
    assert all(a["type"] == "error" and a["data"]["message"] for a in answers), answers
    assert "still-here" in result.observation["messages"][-1]["content"]


def test_serving_beyond_loopback_without_a_token_is_refused():
    from harness_gym.env_server import is_loopback

    with pytest.raises(ValueError, match="without a token"):
        EnvServer("Harness-S0T0O0C0W0", host="0.0.0.0", port=0)
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("example.org")
    EnvServer("Harness-S0T0O0C0W0", host="0.0.0.0", port=0, allow_no_token=True).socket.close()  # on purpose
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "harness_gym.cli",
            "serve-env",
            "Harness-S0T0O0C0W0",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "HARNESS_GYM_ENV_TOKEN"},
    )
    assert run.returncode != 0 and "without a token" in run.stderr + run.stdout, run.stdout + run.stderr


def test_typed_client_and_minted_episode_ids(server):
    from harness_gym.env_client import HarnessEnvClient, HarnessObservation, HarnessState

    with HarnessEnvClient(base_url=with_token(server.url)).sync() as env:
        result = env.reset(seed=0, task_id="workspace-organize-logs")
        assert isinstance(result.observation, HarnessObservation) and result.observation.tools
        minted = result.observation.info["episode_id"]
        state = env.state()
        assert isinstance(state, HarnessState) and state.episode_id == minted and len(minted) == 32
        assert state.task_id == "workspace-organize-logs" and state.env_id == "Harness-S0T0O0C0W0"
        bash = result.observation.info["tool_names"]["execute_bash"]
        result = env.step(call(bash, command="echo typed"))
        assert "typed" in result.observation.messages[-1]["content"] and result.done is False
        assert env.step({"role": "assistant", "content": call(bash, command="true")}).observation.info["step"] == 2
        assert env.state().step_count == 2
        again = env.reset(seed=1)
        assert again.observation.info["episode_id"] not in (None, minted)  # a new episode, a new id
        assert env.reset(seed=2, episode_id="mine-1").observation.info["episode_id"] == "mine-1"
    with GenericEnvClient(base_url=with_token(server.url)).sync() as plain:
        plain.reset(seed=0)
        assert plain.state()["episode_id"]  # minted for OpenEnv's own client too


def test_openenv_manifest_and_dockerfile_serve_this_server(tmp_path):
    import yaml

    folder = Path(__file__).resolve().parent.parent / "deploy" / "openenv"
    manifest = yaml.safe_load((folder / "openenv.yaml").read_text(encoding="utf-8"))
    assert manifest["spec_version"] == 1 and manifest["runtime"] == "fastapi" and manifest["name"]
    module, _, attribute = manifest["app"].partition(":")
    code = f"import {module} as m; app = m.{attribute}; print(type(app).__name__, app.server is not None)"
    root = folder.parent.parent
    env = {**os.environ, "PYTHONPATH": f"{folder}{os.pathsep}{root}", "HARNESS_GYM_ENV": "Harness-S0T0O0C0W0"}
    env.pop("HARNESS_GYM_ENV_TOKEN", None)
    refused = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=120)  # fmt: skip
    assert refused.returncode != 0 and "without a token" in refused.stderr  # a container serves beyond loopback
    env["HARNESS_GYM_ENV_TOKEN"] = "s3cret"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and done.stdout.split() == ["SessionGate", "True"], done.stderr
    dockerfile = (folder / "server" / "Dockerfile").read_text(encoding="utf-8")
    for source in (line.split()[1] for line in dockerfile.splitlines() if line.startswith("COPY ")):
        assert (root / source).exists(), f"the Dockerfile copies {source}, which the repository lacks"
    assert f'"{manifest["app"]}"' in dockerfile and str(manifest["port"]) in dockerfile
