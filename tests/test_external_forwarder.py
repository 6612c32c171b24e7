"""The host-side forwarder (issue 26): the CLI's 127.0.0.1:PORT inside the sandbox is a socket of
the host process, in the sandbox's network namespace only; the agent cannot see, signal or replace
it, and it dies with the episode. Real bubblewrap sandboxes (root and, in .ci/nonroot, unprivileged)
and the real Docker engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import requires_bwrap

from harness_gym.external.forwarder import ForwarderError, listen_in_namespace, listen_in_sandbox
from harness_gym.external.policies import ScriptedPolicy
from harness_gym.external.proxy import ModelProxy
from harness_gym.sandboxes.base import create_sandbox

PORT = 41789
ROOT = Path(__file__).resolve().parents[1]

# run inside the sandbox: one Chat Completions request through the port; prints the status or the error
ASK = """python3 -c "
import json, sys, urllib.request
body = json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'hi'}]}).encode()
request = urllib.request.Request('http://127.0.0.1:__PORT__/v1/chat/completions', body, {'authorization': 'Bearer ' + sys.argv[1]})
try:
    print('ASKED', urllib.request.urlopen(request, timeout=20).status)
except Exception as exc:
    print('ASK-FAILED', type(exc).__name__, exc)
" """.replace("__PORT__", str(PORT))

# run inside the sandbox: try to take the port the way a man in the middle would
TAKE = """python3 -c "
import socket
for family, host, options in [(socket.AF_INET, '127.0.0.1', ()), (socket.AF_INET, '0.0.0.0', (socket.SO_REUSEADDR,)),
                              (socket.AF_INET, '127.0.0.1', (socket.SO_REUSEADDR, socket.SO_REUSEPORT)),
                              (socket.AF_INET6, '::', (socket.SO_REUSEADDR, socket.SO_REUSEPORT))]:
    s = socket.socket(family)
    for option in options:
        s.setsockopt(socket.SOL_SOCKET, option, 1)
    try:
        s.bind((host, __PORT__)); s.listen(1); print('TOOK', host, options)
    except OSError as exc:
        print('REFUSED', host, exc.errno)
" """.replace("__PORT__", str(PORT))


@pytest.fixture
def sandbox() -> Iterator[object]:
    with create_sandbox("bubblewrap", None) as box:
        box.start(box.new_workspace(), "/workspace")
        yield box


@requires_bwrap
def test_the_port_is_served_from_the_host_and_the_agent_cannot_kill_or_take_it(sandbox: object) -> None:
    with ModelProxy() as proxy:
        channel = proxy.open_rollout(ScriptedPolicy([], final="ok"))
        port = proxy.serve_sandbox(listen_in_sandbox(sandbox, PORT))
        run = sandbox.run  # type: ignore[attr-defined]
        assert "ASKED 200" in run(ASK + channel.secret).output
        # the agent signals every process it can (kill -1 spares only the caller) and tries to take the port
        out = run(f"kill -9 -1; sleep 0.5; ls /proc | grep -c '^[0-9]'; {TAKE}; {ASK}{channel.secret}").output
        assert "TOOK" not in out and out.count("REFUSED") == 4, out
        assert "ASKED 200" in out, out  # still served: nothing the agent can signal serves it
        assert int(out.split()[0]) <= 4, out  # init, the shell, the pipeline: no forwarder in the sandbox
        assert len(channel.records) == 2 and all(r.status == 200 for r in channel.records)
        port.close()
        assert "ASK-FAILED" in run(ASK + channel.secret).output  # gone with the episode
        assert "No such file" in run("ls /run/harness-gym-proxy 2>&1").output  # no proxy socket folder shown


@requires_bwrap
def test_the_port_caps_its_sandboxs_connections(sandbox: object) -> None:
    """At most N connections of one sandbox at once: one past the cap closes the one waiting longest
    for a request head (the agent's idle ones), so the sandbox never holds more of the proxy."""
    hold = """python3 -c "
import socket, time
held = [socket.create_connection(('127.0.0.1', __PORT__)) for _ in range(6)]
time.sleep(1.5)
closed = 0
for s in held:
    s.settimeout(0.2)
    try:
        closed += s.recv(1) == b''
    except OSError:
        pass
print('CLOSED', closed)
" """.replace("__PORT__", str(PORT))
    with ModelProxy() as proxy:
        port = proxy.serve_sandbox(listen_in_sandbox(sandbox, PORT), max_connections=4)
        out = sandbox.run(hold).output  # type: ignore[attr-defined]
        assert "CLOSED 2" in out, out
        assert port.open_connections <= 4


def test_a_sandbox_without_a_network_namespace_of_its_own_is_refused() -> None:
    """The unsafe host sandbox shares the host's namespace: the port would be on the host's loopback."""
    with pytest.raises(ForwarderError, match="host's network namespace"):
        listen_in_namespace(os.getpid(), PORT)
    with pytest.raises(ForwarderError, match="no process"):
        listen_in_namespace(2**22 + 7, PORT)

    class NoNamespace:
        def network_pid(self) -> None:
            return None

    with pytest.raises(ForwarderError, match="no process whose network namespace"):
        listen_in_sandbox(NoNamespace(), PORT)


OWNER = """
import json, sys, time
from harness_gym.external.forwarder import listen_in_sandbox
from harness_gym.external.proxy import ModelProxy
from harness_gym.sandboxes.base import create_sandbox
box = create_sandbox("bubblewrap", None)
box.start(box.new_workspace(), "/workspace")
proxy = ModelProxy()
proxy.start()
proxy.serve_sandbox(listen_in_sandbox(box, __PORT__))
print(json.dumps({"init": box.network_pid()}), flush=True)
time.sleep(600)
""".replace("__PORT__", str(PORT))


@pytest.mark.slow
@requires_bwrap
def test_nothing_of_the_forwarder_outlives_a_kill_9_of_its_owner() -> None:
    """The port is a descriptor of the owner process (its helper exits once it passed it): after a
    kill -9 of the owner, no process is left in the sandbox's network namespace or holds the port."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
        start_new_session=True,
    )
    try:
        assert owner.stdout is not None
        init = json.loads(owner.stdout.readline())["init"]
        namespace = os.readlink(f"/proc/{init}/ns/net")
        children = [
            Path(f"/proc/{child}/comm").read_text().strip()
            for task in os.listdir(f"/proc/{owner.pid}/task")
            for child in Path(f"/proc/{owner.pid}/task/{task}/children").read_text().split()
        ]
        assert "python3" not in children and "python" not in children, children  # the helper exited
        owner.kill()
        owner.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            inside = []
            for pid in filter(str.isdigit, os.listdir("/proc")):
                try:
                    if os.readlink(f"/proc/{pid}/ns/net") == namespace:
                        inside.append(pid)
                except OSError:
                    continue
            if not inside:
                break
            time.sleep(0.1)
        assert not inside, f"processes left in the sandbox's network namespace: {inside}"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait(timeout=30)


@pytest.mark.slow
def test_docker_sandbox_port_is_served_from_the_host(docker_engine: tuple[str, str]) -> None:
    """The container's network namespace (``--network none``), entered through its init's pid."""
    host, image = docker_engine
    if os.geteuid() != 0:
        pytest.skip("entering a container's network namespace needs root")
    with create_sandbox("docker", image, docker_host=host) as box, ModelProxy() as proxy:
        box.start(box.new_workspace(), "/workspace")
        channel = proxy.open_rollout(ScriptedPolicy([], final="ok"))
        port = proxy.serve_sandbox(listen_in_sandbox(box, PORT))
        out = box.run(f"{ASK}{channel.secret}; {TAKE}").output
        assert "ASKED 200" in out and "TOOK" not in out, out
        port.close()
