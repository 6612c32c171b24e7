import os
import socket
import subprocess
import threading

import pytest
from conftest import requires_bwrap

from harness_gym.sandboxes import BubblewrapSandbox, SandboxError
from harness_gym.sandboxes.base import check_mount_path

pytestmark = requires_bwrap


@pytest.fixture
def sandbox():
    box = BubblewrapSandbox(command_timeout_s=5, output_limit_chars=1000)
    workspace = box.new_workspace()
    (workspace / "hello.txt").write_text("hi\n")
    box.start(workspace, "/testbed")
    yield box, workspace
    box.close()


def test_persistent_shell_state(sandbox):
    box, _ = sandbox
    assert box.run("pwd").output == "/testbed\n"
    assert box.run("cd /tmp && export GREETING=hello").exit_code == 0
    result = box.run("pwd; echo $GREETING; false")
    assert result.output == "/tmp\nhello\n" and result.exit_code == 1


def test_workspace_is_writable_and_shared_with_host(sandbox):
    box, workspace = sandbox
    assert box.run("cat hello.txt && echo new > made.txt").exit_code == 0
    assert (workspace / "made.txt").read_text() == "new\n"


def test_system_is_read_only_and_host_files_are_hidden(sandbox, tmp_path):
    box, _ = sandbox
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    assert box.run("touch /usr/evil").exit_code != 0
    assert "TOP-SECRET" not in box.run(f"cat {secret} 2>&1").output
    assert box.run("ls /work /old_root 2>/dev/null | wc -l").output.strip() == "0"
    out = box.run("ln -s /etc/passwd link && echo x >> link; echo $?").output
    assert out.strip().endswith("1")


def test_no_network_not_even_host_loopback(sandbox):
    box, _ = sandbox
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    accepted = []
    server.settimeout(3)
    thread = threading.Thread(target=lambda: accepted.append(_accept(server)))
    thread.start()
    probe = f"python3 -c \"import socket; s=socket.socket(); s.settimeout(2); s.connect(('127.0.0.1', {port}))\""
    result = box.run(probe)
    thread.join()
    server.close()
    assert result.exit_code != 0
    assert accepted == [None]


def _accept(server):
    try:
        conn, _ = server.accept()
        conn.close()
        return "connected"
    except OSError:
        return None


def test_timeout_kills_the_tree_and_restarts_with_a_note(sandbox):
    box, _ = sandbox
    box.run("cd /tmp")
    result = box.run("sleep 30.5 & sleep 30.5", timeout_s=1)
    assert result.timed_out and result.exit_code is None
    assert "timed out" in result.note and "new shell" in result.note
    assert box.run("pwd").output == "/testbed\n"  # state was reset with the shell
    leftover = subprocess.run(["pgrep", "-f", "sleep 30.5"], capture_output=True, text=True)
    assert leftover.stdout == ""


def test_exit_restarts_the_shell(sandbox):
    box, _ = sandbox
    result = box.run("exit 7")
    assert result.exit_code == 7 and "shell exited" in result.note
    assert box.run("echo ok").output == "ok\n"


def test_long_output_is_elided_in_the_middle(sandbox):
    box, _ = sandbox
    result = box.run("seq 1 100000")
    assert result.output.startswith("1\n2\n3\n")
    assert result.output.rstrip().endswith("100000")
    assert "bytes of output elided" in result.output
    assert result.elided_chars > 500_000
    assert len(result.output) < 1200


def test_stdin_is_closed(sandbox):
    box, _ = sandbox
    result = box.run("cat", timeout_s=3)
    assert result.exit_code == 0 and not result.timed_out


def test_close_leaves_no_process():
    box = BubblewrapSandbox()
    box.start(box.new_workspace(), "/workspace")
    box.run("sleep 1000 &")
    pid = box._proc.pid
    box.close()
    box.close()
    assert not os.path.exists(f"/proc/{pid}")
    assert subprocess.run(["pgrep", "-f", "sleep 1000"], capture_output=True).stdout == b""


@pytest.mark.parametrize("path", ["relative", "/", "/usr/local/x", "/a/../b", "/.harness/x", "/proc"])
def test_bad_mount_paths_are_refused(path):
    with pytest.raises(SandboxError, match="mount path"):
        check_mount_path(path)


def test_clawgym_style_mount_under_private_home():
    with BubblewrapSandbox() as box:
        workspace = box.new_workspace()
        (workspace / "f.txt").write_text("x")
        box.start(workspace, "/root/.openclaw/workspace")
        assert box.run("cat /root/.openclaw/workspace/f.txt").output == "x"


def test_grader_runs_in_a_fresh_sandbox_the_agent_cannot_reach(tmp_path):
    grader = tmp_path / "grader"
    grader.mkdir()
    (grader / "grade.sh").write_text("cat /.harness/grader/grade.sh >/dev/null && ls /tmp | wc -l && echo 1.0\n")
    with BubblewrapSandbox() as box:
        box.start(box.new_workspace(), "/workspace")
        assert box.run("ls /.harness/grader 2>&1").exit_code != 0  # not visible during the episode
        box.run("touch /tmp/agent-was-here; (sleep 100; echo 0 > /workspace/x) &")
        result = box.grade([grader], "bash /.harness/grader/grade.sh", timeout_s=10)
        assert result.output.split() == ["0", "1.0"]  # fresh /tmp, the agent's daemon is gone
