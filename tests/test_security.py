"""Real attacks against the local sandbox. Each must be contained, and the environment must still
work afterwards (the next command and the next episode)."""

import contextlib
import json
import os
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.sandboxes import BubblewrapSandbox, isolation

pytestmark = requires_bwrap

LIMITS = {"memory_mb": 512, "max_processes": 64, "max_file_mb": 64, "workspace_size_mb": 128, "tmp_size_mb": 64}


@pytest.fixture
def env():
    environment = HarnessEnv("S0T0O0C0W0", sandbox_options=LIMITS, max_steps=100)
    environment.reset(seed=0, options={"task_id": "workspace-config-update"})
    yield environment
    environment.close()


def bash(env, command, timeout=None):
    arguments = {"command": command} if timeout is None else {"command": command, "timeout": timeout}
    obs, _, _, _, info = env.step(
        f"<tool_call>{json.dumps({'name': 'execute_bash', 'arguments': arguments})}</tool_call>"
    )
    return obs["messages"][-1]["content"], info


def still_works(env):
    # in the same episode, background processes the agent left may still write to its terminal
    out, info = bash(env, "echo alive && pwd")
    assert "alive\n" in out and info["exit_codes"] == [0]
    env.reset(seed=1, options={"task_id": "workspace-config-update"})
    out, _ = bash(env, "cat config/app.ini | head -1")
    assert out == "; Service configuration\n"


def test_write_outside_the_workspace(env):
    out, _ = bash(
        env,
        "for p in /etc/evil /usr/evil /evil /.harness/tools/evil; do echo x > $p 2>/dev/null && echo WROTE $p; done; true",
    )
    assert "WROTE" not in out
    assert not any(Path(p).exists() for p in ("/etc/evil", "/usr/evil", "/evil"))
    still_works(env)


def test_read_a_secret_planted_on_the_host(env, tmp_path):
    token = uuid.uuid4().hex
    secrets = [
        tmp_path / "secret.txt",
        Path("/tmp") / f"harness-gym-secret-{token}",
        Path.home() / f".hg-secret-{token}",
    ]
    try:
        content = token[::-1].upper()  # not part of any path the agent names
        for path in secrets:
            path.write_text(content)
        out, _ = bash(
            env,
            " ; ".join(f"cat {p} 2>&1" for p in secrets) + f"; grep -rsl {content} /tmp /root /home /etc /run; true",
        )
        assert content not in out.replace(f"grep -rsl {content}", "")
    finally:
        for path in secrets:
            path.unlink(missing_ok=True)
    still_works(env)


def test_symlinks_out_of_the_workspace(env, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("HOST-SECRET")
    out, _ = bash(env, f"ln -s {secret} leak && cat leak 2>&1; ln -s / root_link && ls root_link/work 2>&1; true")
    assert "HOST-SECRET" not in out
    # the harness writes its own files (the C2 summary) from inside the sandbox, so a planted link cannot redirect them
    c2 = HarnessEnv("S0T0O0C2W0", sandbox_options=LIMITS)
    c2.reset(seed=0)
    target = tmp_path / "hijacked"
    target.mkdir()
    bash(c2, f"ln -s {target} .harness_context")
    for _ in range(6):
        bash(c2, "true")
    assert list(target.iterdir()) == []
    c2.close()
    still_works(env)


def test_connect_to_a_server_on_the_host_loopback(env):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(4)
    port = server.getsockname()[1]
    accepted = []

    def accept():
        with contextlib.suppress(OSError):
            accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept)
    thread.start()
    out, _ = bash(
        env,
        f"python3 -c \"import socket; s=socket.socket(); s.settimeout(2); s.connect(('127.0.0.1', {port})); print('CONNECTED')\" 2>&1; true",
    )
    thread.join()
    server.close()
    assert "CONNECTED" not in out and accepted == []
    still_works(env)


def test_fork_bomb(env):
    limits = env.sandbox.limits.as_dict()
    if "processes" in limits["not_enforced"]:  # non-root without a delegated pids cgroup: said at start
        pytest.skip(f"the process limit is not enforced here ({limits['not_enforced']['processes']})")
    bash(env, ":(){ :|:& };:", timeout=5)
    time.sleep(1.5)
    uid = env.sandbox.uid
    if uid is not None:
        running = subprocess.run(["pgrep", "-c", "-U", str(uid)], capture_output=True, text=True).stdout.strip()
        assert int(running or 0) <= LIMITS["max_processes"]
    assert subprocess.run(["true"]).returncode == 0  # the host can still fork
    still_works(env)


def test_memory_bomb(env):
    out, info = bash(env, "python3 -c 'b = bytearray(8 << 30)' 2>&1; echo status=$?", timeout=20)
    assert "MemoryError" in out and "status=1" in out
    out, info = bash(env, "python3 -c 'x = [bytearray(64 << 20) for _ in range(64)]' 2>&1 | tail -1", timeout=20)
    assert "MemoryError" in out or "Killed" in out or info["exit_codes"] != [0]
    still_works(env)


def test_endless_output(env):
    out, _ = bash(env, "yes", timeout=3)
    assert "timed out" in out and "bytes of output elided" in out
    assert len(out) < 40_000
    still_works(env)


def test_sleep_forever(env):
    out, _ = bash(env, "sleep infinity", timeout=2)
    assert "timed out after 2 s" in out
    still_works(env)


def test_daemon_that_tries_to_survive_reset(env):
    marker = f"hgdaemon{uuid.uuid4().hex[:8]}"
    bash(
        env,
        f"(setsid nohup bash -c 'exec -a {marker} sleep 1000' >/dev/null 2>&1 &); (nohup sleep 999 &) ; disown -a; sleep 0.3",
    )
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout != b""
    env.reset(seed=2)
    assert _running(marker) == []  # dead or dying: its teardown may finish in the background close
    still_works(env)


# Agents that try to go on running past a reset. A reset's guarantee: when it returns, no process of
# the finished episode runs user code again (each is gone, or has SIGKILL pending and cannot leave
# the kernel but to die), though the kernel's teardown of them may still be under way. Each writes
# to a file of its workspace, which the test holds open across the reset (the grader's view of it).
_HOSTILE_AGENTS = {
    # a daemon in a session of its own, writing in a loop (no fork: builtins)
    "setsid-daemon": "(setsid nohup bash -c 'exec -a {m} bash -c \"while :; do echo x >> tick; done\"' "
    "</dev/null >/dev/null 2>&1 &); disown -a",
    # four loops that fork all the time (a kill that lists the processes, then signals them, misses a
    # child being forked meanwhile), each child writing once
    "fork-loop": "for i in 1 2 3 4; do (exec -a {m} bash -c 'while :; do (echo y >> tick); done' &); done",
    # a process with every signal it can block blocked and the rest ignored, two threads writing,
    # and a stopped child
    "signals-blocked": "printf '%s\\n' 'import os, signal, threading' "
    "'signal.pthread_sigmask(signal.SIG_BLOCK, set(range(1, signal.NSIG)))' "
    "'[signal.signal(s, signal.SIG_IGN) for s in (1, 2, 3, 15)]' "
    "'child = os.fork()' 'os.kill(os.getpid(), signal.SIGSTOP) if child == 0 else None' "
    "'def write():' '    with open(\"tick\", \"a\") as f:' '        while True: f.write(\"z\"); f.flush()' "
    "'threading.Thread(target=write).start()' 'write()' > hold.py; (exec -a {m} python3 hold.py &)",
    # (red team) a loop of vfork children (glibc's posix_spawn: CLONE_VM | CLONE_VFORK), each writing once
    "vfork-loop": "cat > v.py <<'EOF'\nimport os\nwhile True:\n    os.waitpid(os.posix_spawn('/bin/sh', "
    "['sh', '-c', 'echo v >> tick'], os.environ), 0)\nEOF\n(exec -a {m} python3 v.py &)",
    # (red team) a thread group whose leader has exited (SYS_exit): a zombie leader, a thread writing
    "zombie-leader": "cat > zl.py <<'EOF'\nimport ctypes, threading\ndef write():\n    f = open('tick', 'a')\n"
    "    while True:\n        f.write('w'); f.flush()\nthreading.Thread(target=write).start()\n"
    "ctypes.CDLL(None).syscall(60, 0)\nEOF\n(exec -a {m} python3 zl.py &)",
}


@pytest.mark.parametrize("agent", sorted(_HOSTILE_AGENTS))
def test_nothing_of_the_episode_runs_after_its_reset(env, agent):
    marker = f"hgreset{uuid.uuid4().hex[:8]}"
    bash(env, _HOSTILE_AGENTS[agent].format(m=marker) + "; sleep 0.3")
    folder = os.open(env.workspace, os.O_RDONLY | os.O_DIRECTORY)  # keeps the old workspace readable
    finished = env.sandbox
    at_return: list[list[int]] = []

    def stop_agent() -> None:  # the moment the guarantee must hold: a kill's teardown runs on after it
        type(finished).stop_agent(finished)
        at_return.append(_running_in(finished) + _running(marker))

    finished.stop_agent = stop_agent
    try:
        written = _size(folder, "tick")
        time.sleep(0.05)
        assert _size(folder, "tick") > written > 0, "the hostile agent is not running: the test shows nothing"
        # a zombie leader's command line reads empty (pgrep finds none): its live thread is in the
        # cgroup; without root a sandbox has no cgroups (RLIMIT_NPROC and namespaces only), and the
        # processes are found by name alone
        grouped = bool(finished._cgroups)
        assert (_running(marker) or agent == "zombie-leader") and (_running_in(finished) or not grouped)
        tick = os.open("tick", os.O_RDONLY, dir_fd=folder)  # its inode, should the close remove the file
        try:
            env.reset(seed=2, options={"task_id": "workspace-config-update"})
            running = _running(marker)
            written = os.fstat(tick).st_size
            time.sleep(0.3)
            # nothing more in the file the agent wrote, nor in a new one by that name (0: removed by the close)
            assert at_return == [[]] and running == [] and os.fstat(tick).st_size == written
            assert _size(folder, "tick") in (0, written)
        finally:
            os.close(tick)
    finally:
        os.close(folder)
    still_works(env)


def test_a_reset_that_cannot_freeze_the_sandbox_waits_for_its_processes(env, monkeypatch):
    monkeypatch.setattr(isolation, "kill_frozen", lambda *args, **kwargs: False)  # a freeze that timed out
    marker = f"hgwait{uuid.uuid4().hex[:8]}"
    bash(env, f"(setsid nohup bash -c 'exec -a {marker} sleep 1000' >/dev/null 2>&1 &); sleep 0.2")
    env.reset(seed=2, options={"task_id": "workspace-config-update"})
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout == b""  # gone, not only dying
    still_works(env)


def _size(folder: int, name: str) -> int:
    try:
        return os.stat(name, dir_fd=folder).st_size
    except FileNotFoundError:
        return 0


def _running(marker: str) -> list[int]:
    """Processes named ``marker`` that could still run user code: a thread of theirs that is
    alive, not exiting and without SIGKILL pending (read twice: one thread in the instant between
    taking SIGKILL and marking itself exiting reads as neither)."""
    found = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found if _runs_user_code(int(pid)) and _runs_user_code(int(pid))]


def _running_in(sandbox) -> list[int]:
    """The processes of ``sandbox``'s cgroups (every process it started: none can leave them) that
    could still run user code; read at once, with no process started."""
    pids = set()
    for group in sandbox._cgroups:
        with contextlib.suppress(OSError):
            pids |= {int(p) for p in (group / "cgroup.procs").read_text().split()}
    if sandbox._proc is not None:  # None once a kill that was waited for has closed the shell
        pids.discard(sandbox._proc.pid)  # the host-side bwrap, which reaps the rest
    return sorted(pid for pid in pids if _runs_user_code(pid) and _runs_user_code(pid))


def _runs_user_code(pid: int) -> bool:
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    for thread in threads:
        try:
            status = Path(f"/proc/{pid}/task/{thread}/status").read_text()
            stat = Path(f"/proc/{pid}/task/{thread}/stat").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        pending = int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)
        flags = int(stat[stat.rindex(")") + 2 :].split()[6])
        exiting = flags & 0x4  # PF_EXITING
        if fields["State"].split()[0] not in ("Z", "X") and not pending & (1 << 8) and not exiting:  # bit 8: SIGKILL
            return True
    return False


def test_filling_the_disk(env):
    before = os.statvfs("/tmp")
    out, _ = bash(
        env,
        "dd if=/dev/zero of=big bs=1M count=4096 2>&1 | tail -1; "
        "for i in $(seq 1 400); do head -c 1048576 /dev/zero > f$i 2>/dev/null || break; done; "
        "du -sm . | cut -f1",
        timeout=60,
    )
    used_mb = int(out.strip().splitlines()[-1])
    capabilities = isolation.capabilities()
    if capabilities.tmpfs_workspace:
        assert used_mb <= LIMITS["workspace_size_mb"] + 1
    else:
        assert "File size limit exceeded" in out or used_mb <= LIMITS["max_file_mb"] * 401
    after = os.statvfs("/tmp")
    if "workspace_size" in env.sandbox.limits.enforced:
        assert (before.f_bavail - after.f_bavail) * before.f_frsize < 256 << 20
    else:  # not root: no size-limited workspace, and the sandbox says so
        assert "RLIMIT_FSIZE" in env.sandbox.limits.not_enforced["workspace_size"]
    still_works(env)


def test_killing_the_parent_shell(env):
    out, info = bash(env, "kill -9 $$")
    assert "new shell was started" in out
    out, _ = bash(env, "kill -9 -1; echo after")
    assert "new shell was started" in out or "after" in out
    still_works(env)


HOSTILE = [
    "-rf",
    "--help",
    "a\nb",
    "$(touch pwned)",
    "`touch pwned2`",
    "semi;colon",
    "quote'd\"",
    " space ",
    "ünïcødé",
    "x" * 250,
    ".hidden",
    "*",
    "back\\slash",
]


def test_hostile_file_names(env):
    script = (
        "import os\nfor n in "
        + repr(HOSTILE)
        + ":\n    open(n, 'w').write('x')\nos.makedirs('dir\\nwith\\nnewlines/sub', exist_ok=True)\n"
    )
    obs, _, _, _, info = env.step(
        f"<tool_call>{json.dumps({'name': 'file_editor', 'arguments': {'command': 'create', 'path': 'mk.py', 'file_text': script}})}</tool_call>"
    )
    out, info = bash(env, "python3 mk.py && ls -1 | wc -l")
    assert info["exit_codes"] == [0]
    obs, _, _, _, info = env.step(
        f"<tool_call>{json.dumps({'name': 'file_editor', 'arguments': {'command': 'view', 'path': '.'}})}</tool_call>"
    )
    assert info["exit_codes"] == [0] and "ünïcødé" in obs["messages"][-1]["content"]
    assert not (env.workspace / "pwned").exists() and not (env.workspace / "pwned2").exists()
    workspace = env.workspace
    still_works(env)
    deadline = time.monotonic() + 30  # the finished episode's sandbox is closed in the background
    while workspace.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not workspace.exists()  # the old workspace, hostile names and all, is gone


def test_nothing_survives_close():
    environment = HarnessEnv("S0T0O0C0W0", sandbox_options=LIMITS)
    environment.reset(seed=0)
    marker = f"hgclose{uuid.uuid4().hex[:8]}"
    bash(environment, f"(exec -a {marker} sleep 1000 &); sleep 0.3")
    workspace = environment.workspace
    sandbox = environment.sandbox
    uid, control, groups = sandbox.uid, sandbox._control, list(sandbox._cgroups)
    environment.close()
    assert not control.exists()
    assert subprocess.run(["pgrep", "-f", marker], capture_output=True).stdout == b""
    assert not workspace.exists()
    if uid is not None:  # no live process: an earlier sandbox's zombie on this uid waits for init to reap it
        states = subprocess.run(["ps", "-o", "stat=", "-U", str(uid)], capture_output=True, text=True).stdout
        assert [state for state in states.split() if not state.startswith("Z")] == [], states
        assert not [group for group in groups if group.exists()]  # (a walk of the cgroup tree races others)
    assert str(workspace) not in Path("/proc/self/mounts").read_text()


def test_cpu_time_and_open_file_limits():
    with BubblewrapSandbox(cpu_time_s=1, max_open_files=64, command_timeout_s=60) as box:
        box.start(box.new_workspace(), "/workspace")
        burn = box.run("python3 -c 'while True: pass'; echo status=$?")
        # stopped by the CPU limit (SIGXCPU or SIGKILL at the hard limit), long before the wall-clock
        # limit: 1 CPU second is a few wall seconds on a loaded machine, far under the 60 s timeout
        assert ("status=152" in burn.output or "status=137" in burn.output) and not burn.timed_out
        assert burn.duration_s < 30
        files = box.run("python3 -c \"import os; [open('/dev/null') for _ in range(200)]\" 2>&1 | tail -1")
        assert "Too many open files" in files.output
        assert box.run("echo fine").output == "fine\n"
