"""The Docker sandbox against a real engine (see the docker_engine fixture)."""

import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from harness_gym import HarnessEnv, Task, load_tasks
from harness_gym.agents import ReferenceAgent, run_episode
from harness_gym.sandboxes import DockerSandbox, SandboxError
from harness_gym.sandboxes.docker import LABEL, OWNER_LABEL


@pytest.fixture
def box(docker_engine):
    host, image = docker_engine
    sandbox = DockerSandbox(
        image, docker_host=host, command_timeout_s=5, output_limit_chars=1000, memory_mb=256, max_processes=64
    )
    workspace = sandbox.new_workspace()
    (workspace / "hello.txt").write_text("hi\n")
    sandbox.start(workspace, "/testbed")
    yield sandbox
    sandbox.close()


def labelled(docker_engine):
    import docker

    client = docker.DockerClient(base_url=docker_engine[0])
    return client, client.containers.list(all=True, filters={"label": LABEL})


def test_persistent_shell_semantics(box):
    assert box.run("pwd; cat hello.txt").output == "/testbed\nhi\n"
    box.run("cd /tmp && export GREETING=hello")
    assert box.run("pwd; echo $GREETING").output == "/tmp\nhello\n"
    result = box.run("sleep 30", timeout_s=1)
    assert result.timed_out and "new shell" in result.note
    assert box.run("pwd").output == "/testbed\n"
    result = box.run("exit 3")
    assert result.exit_code == 3 and "shell exited" in result.note
    result = box.run("seq 1 100000")
    assert "bytes of output elided" in result.output and result.output.rstrip().endswith("100000")


def test_no_network_to_the_host_loopback(box):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(3)
    port = server.getsockname()[1]
    accepted = []
    thread = threading.Thread(target=lambda: accepted.append(_accept(server)))
    thread.start()
    result = box.run(
        f"python3 -c \"import socket; s=socket.socket(); s.settimeout(2); s.connect(('127.0.0.1', {port}))\""
    )
    thread.join()
    server.close()
    assert result.exit_code != 0 and accepted == [None]


def _accept(server):
    try:
        server.accept()[0].close()
        return "connected"
    except OSError:
        return None


def test_memory_and_pids_limits(box):
    result = box.run("python3 -c 'b = bytearray(1 << 30); print(len(b))'; echo status=$?", timeout_s=30)
    assert "status=0" not in result.output
    box.run(":(){ :|:& };:", timeout_s=3)
    time.sleep(1)
    count = box.container.exec_run(["sh", "-c", "ls -d /proc/[0-9]* | wc -l"]).output.decode().strip()
    assert int(count or 0) <= 64 + 2
    assert box.run("echo alive", timeout_s=10).output.endswith("alive\n")


def test_close_removes_container_and_workspace(docker_engine):
    host, image = docker_engine
    sandbox = DockerSandbox(image, docker_host=host)
    workspace = sandbox.new_workspace()
    sandbox.start(workspace, "/workspace")
    sandbox.run("sleep 1000 &")
    container_id = sandbox.container.id
    sandbox.close()
    sandbox.close()
    client, containers = labelled(docker_engine)
    assert container_id not in {c.id for c in containers}
    assert not workspace.exists()


def test_containers_of_an_exited_interpreter_are_removed(docker_engine):
    host, image = docker_engine
    script = (
        "from harness_gym.sandboxes import DockerSandbox\n"
        f"box = DockerSandbox({image!r}, docker_host={host!r})\n"
        "box.start(box.new_workspace(), '/workspace')\n"
        "print(box.container.id)\n"
    )
    exited = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    container_id = exited.stdout.strip()
    assert container_id, exited.stderr
    _, containers = labelled(docker_engine)
    assert container_id not in {c.id for c in containers}


def test_containers_of_a_crashed_owner_are_removed_by_the_next_start(docker_engine):
    host, image = docker_engine
    client, _ = labelled(docker_engine)
    dead = subprocess.Popen(["true"])
    dead.wait()
    orphan = client.containers.run(
        image,
        ["sleep", "1000"],
        detach=True,
        network_mode="none",
        labels={LABEL: "1", OWNER_LABEL: f"{socket.gethostname()}:{dead.pid}"},
    )
    alive = client.containers.run(
        image,
        ["sleep", "1000"],
        detach=True,
        network_mode="none",
        labels={LABEL: "1", OWNER_LABEL: f"{socket.gethostname()}:{os.getpid()}"},
    )
    try:
        DockerSandbox(image, docker_host=host).close()
        ids = {c.id for c in client.containers.list(all=True, filters={"label": LABEL})}
        assert orphan.id not in ids and alive.id in ids
    finally:
        alive.remove(force=True)


def test_reference_agent_solves_builtin_tasks_in_docker(docker_engine):
    host, image = docker_engine
    env = HarnessEnv("S1T2O1C2W2", sandbox="docker", sandbox_options={"image": image, "docker_host": host})
    for task in env.tasks[:3]:
        result = run_episode(env, ReferenceAgent("xml"), seed=0, task_id=task.id)
        assert result.reward == 1.0, (task.id, result.grader_log)
    env.close()


def test_a_task_that_names_an_image_runs_in_docker_by_default(docker_engine, monkeypatch):
    host, image = docker_engine
    monkeypatch.setenv("DOCKER_HOST", host)
    base = next(t for t in load_tasks("builtin") if t.id == "workspace-config-update")
    task = Task(**{**base.__dict__, "id": "config-in-docker", "image": image})
    env = HarnessEnv(tasks=[task])
    env.reset(seed=0)
    assert isinstance(env.sandbox, DockerSandbox)
    obs, *_ = env.step(
        '<tool_call>{"name": "execute_bash", "arguments": {"command": "cat /proc/1/cmdline | tr \\"\\\\0\\" \\" \\""}}</tool_call>'
    )
    assert "sleep" in obs["messages"][-1]["content"]
    env.close()
    with pytest.raises(SandboxError, match="only the 'docker' backend"):
        HarnessEnv(tasks=[task], sandbox="bubblewrap")


def test_tools_run_in_one_persistent_sealed_server(box):
    view = {"command": "view", "path": "hello.txt", "root": "/testbed"}
    find = "for p in /proc/[0-9]*; do grep -q server.py $p/cmdline 2>/dev/null && echo ${p#/proc/}; done"
    first = box.run_tool("file_editor.py", view)
    assert first.exit_code == 0 and "hi" in first.output
    servers = box.run(find).output.split()
    assert len(servers) == 1
    assert box.run_tool("file_editor.py", view).exit_code == 0
    assert box.run(find).output.split() == servers  # the same process answered both calls
    # non-dumpable: the agent (root in the container, without CAP_SYS_PTRACE) cannot reach its pipes
    pid = servers[0]
    probe = box.run(
        f"echo forged > /proc/{pid}/fd/1 && echo wrote-fd; head -c 1 /proc/{pid}/mem > /dev/null && echo read-mem; "
        "echo probed"
    )
    assert "probed" in probe.output and "wrote-fd" not in probe.output and "read-mem" not in probe.output
    assert box.run_tool("file_editor.py", view).exit_code == 0
    box.run(f"kill -9 {pid}")
    dead = box.run_tool("file_editor.py", view)
    assert dead.exit_code is None and "tool server" in dead.note
    again = box.run_tool("file_editor.py", view)
    assert again.exit_code == 0 and "hi" in again.output
