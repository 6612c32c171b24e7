"""Red-team findings: each test plays one exploit through the environment API (everything the agent
does runs in the sandbox) and asserts it earns nothing / leaks nothing. A test marked xfail(strict)
is an exploit that still works."""

import json
import warnings

import pytest
from conftest import requires_bwrap

from harness_gym import HarnessEnv


def play(task_id, *commands, tasks="builtin", **env_options):
    """Run ``commands`` as the agent, finish, and return (reward, info, outputs)."""
    warnings.simplefilter("ignore")
    env = HarnessEnv("S0T0O0C0W0", tasks=tasks, **env_options)
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


DAEMON = """
import os, stat, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:  # a daemon that outlives the graded code and writes "1.0" to every pipe it holds
        fds = []
        for fd in range(64):
            try:
                if stat.S_ISFIFO(os.fstat(fd).st_mode):
                    fds.append(fd)
            except OSError:
                pass
        end = time.time() + 20
        while time.time() < end and fds:
            for fd in list(fds):
                try:
                    os.write(fd, b"1.0\\n")
                except OSError:
                    fds.remove(fd)
            time.sleep(0.0005)
        os._exit(0)
    os._exit(0)


def add(a, b):
    return a - b
"""


def clawgym_pytest_task(root):
    """A ClawGym task graded the common way: reward.sh runs pytest on the agent's code and prints
    the reward as its last line (no signature: the format has none)."""
    task = root / "task_0000"
    (task / "input_files").mkdir(parents=True)
    (task / "reward").mkdir()
    (task / "data_entry.json").write_text(
        json.dumps(
            {
                "task_id": "task_0000",
                "user_query": "Fix add() in calc.py.",
                "input_mount_dir": "/root/.openclaw/workspace",
                "metadata": {"grading_type": "automated"},
            }
        )
    )
    (task / "input_files" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (task / "reward" / "test_hidden.py").write_text(
        "from calc import add\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    (task / "reward" / "reward.sh").write_text(
        "cd /root/.openclaw/workspace\n"
        'if PYTHONPATH="$PWD:$PYTHONPATH" python -m pytest -q -p no:cacheprovider reward/test_hidden.py; '
        "then echo 1.0; else echo 0.0; fi\n"
    )
    return f"clawgym:{root}"


@requires_bwrap
def test_daemon_left_by_graded_code_cannot_write_the_last_line(tmp_path, clawgym_world):
    """The graded code (imported by the grader's pytest) double-forks a daemon that keeps writing
    "1.0" to the grader's stdout (pytest's saved copy of fd 1 is inherited); the grader prints 0.0
    and exits, the daemon's next "1.0" became the last line, and an unsigned grader scored 1.0."""
    suite = clawgym_pytest_task(tmp_path)
    reward, info, _ = play("task_0000", f"cat > calc.py <<'EOF'\n{DAEMON}\nEOF\ntrue", tasks=suite)
    assert reward == 0.0, (info.get("reward_breakdown"), info.get("grader_error"))
    # the honest fix still scores
    reward, info, _ = play("task_0000", "sed -i 's/a - b/a + b/' calc.py", tasks=suite)
    assert reward == 1.0, info.get("grader_error")


def test_daemon_left_by_graded_code_cannot_write_the_last_line_in_docker(
    tmp_path, clawgym_world, docker_engine, monkeypatch
):
    """The same daemon under the Docker backend (the clawgym world imported as an image): the
    grading container's shell refuses a grading that leaves processes running."""
    host, _ = docker_engine
    monkeypatch.setenv("DOCKER_HOST", host)
    suite = clawgym_pytest_task(tmp_path)
    options = {"sandbox": "docker", "world": "clawgym"}
    reward, info, _ = play("task_0000", f"cat > calc.py <<'EOF'\n{DAEMON}\nEOF\ntrue", tasks=suite, **options)
    assert reward == 0.0 and "status 125" in (info.get("grader_error") or ""), info  # the guard refused it
    reward, info, _ = play("task_0000", "sed -i 's/a - b/a + b/' calc.py", tasks=suite, **options)
    assert reward == 1.0, info.get("grader_error")


FLOOD = """
import os, stat
chunk = b"x" * (1 << 20)
for fd in range(3, 64):  # pytest's saved copy of the grader's stdout
    try:
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            for _ in range(300):
                os.write(fd, chunk)
    except OSError:
        pass


def add(a, b):
    return a + b
"""

FLOOD_DRIVER = """
import json, resource, sys, warnings
warnings.simplefilter("ignore")
from harness_gym import HarnessEnv
env = HarnessEnv("S0T0O0C0W0", tasks=sys.argv[1])
env.reset(seed=0, options={"task_id": "task_0000"})
call = {"name": "execute_bash", "arguments": {"command": "cat > calc.py <<'EOF'\\n" + sys.argv[2] + "\\nEOF"}}
env.step("<tool_call>" + json.dumps(call) + "</tool_call>")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
env.step('<tool_call>{"name": "finish", "arguments": {"message": "done"}}</tool_call>')
print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
env.close()
"""


@requires_bwrap
def test_graded_code_flooding_stdout_does_not_fill_host_memory(tmp_path, clawgym_world):
    """Graded code writing 300 MB to the grader's stdout made the host hold all of it (and more:
    peak RSS grew by ~1.8 GB), since run_oneshot used communicate(); over a 300 s grader timeout
    that fills the host's memory. Only a head and a tail are kept now."""
    import os
    import subprocess
    import sys

    suite = clawgym_pytest_task(tmp_path)
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    done = subprocess.run(
        [sys.executable, "-c", FLOOD_DRIVER, suite, FLOOD], capture_output=True, text=True, timeout=300, env=env
    )
    grown_mb = int(done.stdout.strip().splitlines()[-1])
    assert grown_mb < 150, f"host RSS grew by {grown_mb} MB while grading"


def test_call_to_a_tool_the_harness_lacks_is_not_reported_as_a_canonical_call():
    """Under T1 the shell tool is `run_shell_command`; a call written as `execute_bash` runs nothing
    (unknown tool) but reached transcript graders (ClawGym payload, PinchBench grade(transcript))
    as an `execute_bash` toolCall with the agent's command, the same as one that ran under T0."""
    from harness_gym.tasks.base import openclaw_transcript

    warnings.simplefilter("ignore")
    env = HarnessEnv("S0T1O0C0W0", tasks="builtin")
    try:
        env.reset(seed=0, options={"task_id": "workspace-disk-usage"})
        call = {"name": "execute_bash", "arguments": {"command": "python -m pytest -q"}}
        env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
        events = openclaw_transcript(env.unwrapped.transcript)
    finally:
        env.close()
    parts = [p for e in events for p in e["message"]["content"] if isinstance(p, dict) and p.get("type") == "toolCall"]
    assert parts and all(p["name"] != "execute_bash" for p in parts), parts
    results = [e["message"] for e in events if e["message"]["role"] == "toolResult"]
    assert results and all(r["toolName"] != "execute_bash" for r in results), results


@requires_bwrap
def test_hard_link_is_not_a_copy_in_generated_easy_tasks():
    """`ln lemon.txt koala.txt` for "Copy lemon.txt to koala.txt." scored 1.0 (the grader refuses
    symbolic links as copies, but a hard link is one file under two names)."""
    reward, info, _ = play("easy-3-0002-copy_file", "ln lemon.txt koala.txt", tasks="generated-easy:3")
    assert reward == 0.0, info.get("reward_breakdown")
    reward, info, _ = play("easy-3-0002-copy_file", "cp lemon.txt koala.txt", tasks="generated-easy:3")
    assert reward == 1.0, info.get("reward_breakdown")


# ------------------------------------------------------------------ Docker: the agent's processes and the protocol

TOOL_SERVER_THIEF = """
import json, os, struct, time
held, deadline = None, time.time() + 20
while held is None and time.time() < deadline:  # catch the tool server before it seals itself
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if b"server.py" not in handle.read():
                    continue
            held = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY), os.open(f"/proc/{pid}/fd/1", os.O_WRONLY)
            break
        except OSError:
            continue
while held:
    header = os.read(held[0], 4)
    if len(header) < 4:
        break
    size, body = struct.unpack(">I", header)[0], b""
    while len(body) < size:
        body += os.read(held[0], size - len(body))
    reply = json.dumps({"id": json.loads(body)["id"], "output": "FORGED", "exit_code": 0}).encode()
    os.write(held[1], struct.pack(">I", len(reply)) + reply)
"""

SHELL_THIEF = """
import os, re, socket, stat, sys
shell = sys.argv[1]
commands = status = None
for fd in os.listdir(f"/proc/{shell}/fd"):  # its pipes reopen through /proc (its sockets do not)
    link = os.readlink(f"/proc/{shell}/fd/{fd}")
    flags = int(open(f"/proc/{shell}/fdinfo/{fd}").read().split("flags:")[1].split()[0], 8)
    if "pipe:" in link and fd != "1" and link != os.readlink(f"/proc/{shell}/fd/1"):
        if flags & 3 == 0 and fd != "0":
            commands = os.open(f"/proc/{shell}/fd/{fd}", os.O_RDONLY)  # its saved stdin: the command pipe
        elif flags & 3:
            status = os.open(f"/proc/{shell}/fd/{fd}", os.O_WRONLY)  # its saved stderr: the status pipe
for fd in range(3, 10):  # copies of its descriptors the agent handed this process
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            continue
    except OSError:
        continue
    handle = socket.socket(fileno=fd)
    if handle.type == socket.SOCK_STREAM:
        commands = handle
    else:
        status = handle
read = (lambda: commands.recv(65536, socket.MSG_PEEK)) if isinstance(commands, socket.socket) else (
    lambda: os.read(commands, 65536))
data = b""
while not re.search(rb"__hg_fence_[0-9a-f]+__[^\\n]*\\n|printf '%s %s\\\\n' ([0-9a-f]+)", data):
    data = read() if isinstance(commands, socket.socket) else data + read()
nonce = re.search(rb"(?:__hg_fence_|printf '%s %s\\\\n' )([0-9a-f]{16})", data).group(1)
os.write(1, b"FORGED__hg_fence_" + nonce + b"__")
if isinstance(status, socket.socket):
    status.send(nonce + b" 0\\n")
else:
    os.write(status, nonce + b" 0\\n")
"""


def _docker_sandbox(docker_engine, files):
    from harness_gym.sandboxes.base import create_sandbox

    host, image = docker_engine
    sandbox = create_sandbox("docker", image, docker_host=host, command_timeout_s=10)
    workspace = sandbox.new_workspace()
    for name, text in files.items():
        (workspace / name).write_text(text)
    sandbox.start(workspace, "/workspace")
    return sandbox


def test_agent_process_cannot_answer_for_the_docker_tool_server(docker_engine):
    """The Docker tool server was started (a second `docker exec`) at the first tool call and sealed
    itself (non-dumpable) only once Python ran its code: a process the agent left polling /proc
    opened the server's stdin and stdout in that window and answered every later tool call itself
    (any output, exit 0). The server now starts with the shell, before any agent code runs."""
    sandbox = _docker_sandbox(docker_engine, {"thief.py": TOOL_SERVER_THIEF, "a.txt": "genuine\n"})
    try:
        assert sandbox.run("python3 thief.py >/dev/null 2>&1 & sleep 0.3").exit_code == 0
        for _ in range(3):
            view = sandbox.run_tool(
                "file_editor.py", {"command": "view", "path": "/workspace/a.txt", "root": "/workspace"}
            )
            assert "FORGED" not in view.output and "genuine" in view.output, view
    finally:
        sandbox.close()


@pytest.mark.parametrize(
    "handed",
    ["", "3<&10 4<&11 5<&12 6<&13"],  # busybox sh keeps its stdin/stdout/stderr at 10-13 during eval
    ids=["through-proc", "inherited"],
)
def test_agent_process_cannot_answer_for_the_docker_shell(docker_engine, handed):
    """Docker's shell protocol (status over stderr, guarded by a nonce) was open to a process the
    agent left behind: the shell runs as the agent's user and is dumpable, so the process opened
    /proc/<shell>/fd/10 (the command pipe), read the next command and its nonce, and wrote that
    command's output, fence and status itself: the command never ran and its result was forged.
    The shell now runs under a sealed warden (tools/scripts/relay.py) that holds the exec's pipes,
    counts only records the shell itself sent and writes a fence with a secret the shell never sees;
    a process handed the shell's own sockets can peek at commands but not answer for them."""
    sandbox = _docker_sandbox(docker_engine, {"thief.py": SHELL_THIEF})
    try:
        assert sandbox.run(f"python3 thief.py $$ {handed} 2>/dev/null & sleep 0.5").exit_code == 0
        result = sandbox.run("echo genuine; false")
        assert (result.output, result.exit_code) == ("genuine\n", 1), result
        # what the process still writes shows up here, before or after, as any background output does;
        # the command's own output and status must still be there
        after = sandbox.run("echo next")
        assert "next\n" in after.output and after.exit_code == 0, after
    finally:
        sandbox.close()


@requires_bwrap
def test_long_command_with_a_syntax_error_does_not_break_the_next_long_command():
    """A command over the inline limit (96 characters) with an unterminated quote left bash's parser
    expecting no command word: the next long command's ``__hg`` line was not alias-expanded
    ("__hg: command not found"), so that command timed out and the shell was restarted (its working
    directory and variables lost) for a typo in the command before."""
    from harness_gym.sandboxes.base import create_sandbox

    sandbox = create_sandbox("bubblewrap", None, command_timeout_s=5)
    try:
        sandbox.start(sandbox.new_workspace(), "/workspace")
        long_text = "x" * 100
        for broken in (f"echo 'a{long_text}", f'echo "a{long_text}', f"if true; then echo {long_text}"):
            assert sandbox.run(broken).exit_code == 2
            result = sandbox.run(f"echo {long_text}")
            assert (result.output, result.exit_code, result.timed_out) == (long_text + "\n", 0, False), result
    finally:
        sandbox.close()


# ------------------------------------------------------------------ the persistent shell's protocol (bubblewrap)
# cf8f622..e488a7e: the status record is written with `echo`, redirections restored by `exec` after it,
# one poller per shell, nonces from an os.urandom pool. Each test plays an attack from inside the sandbox.


def _bwrap_box(timeout_s=5.0):
    """A started bubblewrap sandbox that records the nonce of every command it sends."""
    from harness_gym.sandboxes.base import create_sandbox

    sandbox = create_sandbox("bubblewrap", None, command_timeout_s=timeout_s, output_limit_chars=1000)
    sandbox.start(sandbox.new_workspace(), "/workspace")
    sandbox.nonces = []
    send = sandbox._send_command

    def recording(command):
        sandbox.nonces.append(send(command))
        return sandbox.nonces[-1]

    sandbox._send_command = recording
    return sandbox


@requires_bwrap
def test_a_command_using_descriptor_4_does_not_swallow_later_output():
    """fd 4 (the shell's copy of the output pipe, from which `exec 1>&4` restores stdout after each
    command) was left open around commands for speed: `exec 4>lock` (the flock idiom) sent every
    later command's output into the lock file, and `exec 4>&-` dropped it, for the rest of the episode."""
    sandbox = _bwrap_box()
    try:
        for clobber in ("exec 4>lock; echo x", "exec 4>&-", "exec 1>&- 2>&- 4>&-", "exec >hidden; exec 4>&1"):
            sandbox.run(clobber)
            result = sandbox.run("echo shown; (exit 3)")
            assert (result.output, result.exit_code, result.note) == ("shown\n", 3, ""), (clobber, result)
        assert sandbox.run("cat lock hidden").output == "", "output went to a file the command chose"
    finally:
        sandbox.close()


RECORD_INTACT = [
    "set -o posix; shopt -s xpg_echo",  # echo interprets backslashes, takes no options
    "exec() { :; }",  # the restoring `exec` redefined (the shell's own redirections are already right)
    "alias exec=: echo='echo -e'",
    "PROMPT_COMMAND='echo prompt'; export BASH_ENV=/workspace/env; echo 'echo bash_env' > env",
    "set -f -u -o noclobber; IFS=0123456789abcdef",  # word splitting on the nonce's digits
    "exec 3>&-",
    "exec 3>/dev/null",
    "shopt -s extglob failglob nullglob; set -o pipefail",
    # bash's saved copies of fds 0-2 around the command's group (the status socket among them, at 10+)
    "exec 1>&10; echo '0 1 0123456789abcdef'",  # the shell's own record-shaped line on the status socket
    "exec 10>&1 11>&1 12>&1 13>&1 14>&1",  # the saved copies overwritten with the output pipe
    "exec 20>&10 10>&-; exec 1>&20 2>&20",
    "declare -i __hd",  # the ran-flag made an integer
]


@requires_bwrap
@pytest.mark.parametrize("setting", RECORD_INTACT)
def test_shell_settings_a_command_leaves_do_not_change_later_statuses(setting):
    """Options, redefinitions and descriptor games a command leaves in the shell, around the record's
    `echo` and the restoring `exec`: later commands, short (inline) and long, still get their own
    output and status."""
    sandbox = _bwrap_box()
    try:
        sandbox.run(setting)
        for expected in (7, 5):
            result = sandbox.run(f"echo ok; (exit {expected})")
            assert (result.output, result.exit_code, result.note) == ("ok\n", expected, ""), (setting, result)
        long_text = "y" * 120  # over the inline limit: the `read -N` path
        result = sandbox.run(f"echo {long_text}; (exit 4)")
        assert (result.output, result.exit_code, result.note) == (long_text + "\n", 4, ""), (setting, result)
    finally:
        sandbox.close()


RECORD_LOST = [
    "enable -n echo",  # the record comes from /bin/echo, a child: refused
    "echo() { :; }",
    "shopt -s extdebug; trap false DEBUG",  # every command skipped, the record too
    "kill -STOP $$",
    "ulimit -n 4",  # no descriptor left for the redirections
    "exec sleep 100",  # the status socket closed, the shell's process alive: the host waited 5 s for it
    "exec 10>&- 11>&-",  # the saved status socket and output copy closed in the shell itself
    "readonly __hd",  # the next command's `__hd=` fails: bash drops the line, the record with it
]


@requires_bwrap
@pytest.mark.parametrize("sabotage", RECORD_LOST)
def test_a_shell_that_stops_reporting_never_holds_the_host_past_the_timeout(sabotage):
    """A command that stops the shell sending records (or closes its status channel while its process
    lives on) costs the host at most its timeout plus a restart; nothing raises, and the next shell
    reports truthfully. Closing the channel without exiting held the host 5 s, whatever the timeout."""
    import time

    sandbox = _bwrap_box(timeout_s=1.0)
    try:
        started = time.monotonic()
        lost = sandbox.run(sabotage)
        after = sandbox.run("echo ok; (exit 7)")
        elapsed = time.monotonic() - started
        assert lost.note or after.note, (lost, after)  # one of them said the shell was replaced
        assert elapsed < 4.0, f"{sabotage!r}: {elapsed:.1f} s for two commands with a 1 s timeout"
        result = sandbox.run("echo ok; (exit 5)")
        assert (result.output, result.exit_code, result.note) == ("ok\n", 5, ""), result
    finally:
        sandbox.close()


@requires_bwrap
@pytest.mark.xfail(strict=True, reason="documented: code in the shell process (a function, an alias) is the shell")
def test_shell_code_misreports_the_commands_it_runs_in():
    """Not covered by the protocol (shell.py's docstring): an alias or function named `eval`/`echo`
    reports what it likes for every later command. Only the agent's own observations lie: nothing
    rewarded reads them (grading kills the shell first)."""
    sandbox = _bwrap_box()
    try:
        sandbox.run("alias eval=true")
        result = sandbox.run("echo ok; (exit 7)")
        assert (result.output, result.exit_code) == ("ok\n", 7), result
    finally:
        sandbox.close()


# a background subshell keeps bash's saved copy of the status socket (fd 3 is closed around commands)
# and sends `<nonce> 0` on every descriptor for each nonce it can learn: its own command's (`$__hn`,
# copied at the fork) and, after `set -a` exports `__hn`, each later long command's from its children's
# environments (what it writes to copies of the output pipe is only output; a short command's nonce
# is the record's `echo` argument, in no variable)
# Every shape a record has had (`<nonce> 0`, `<status> <ran> <nonce>`, `<status> <nonce>`): one the host
# refuses for its shape alone proves nothing of the sender check (with `<nonce> 0` only, this test
# still passed with SO_PASSCRED's check removed once the record became `<status> <ran> <nonce>`).
SEND_ON_EVERY_FD = 'for fd in {3..30}; do for r in "$n 0" "0 1 $n" "0 $n"; do echo "$r" >&$fd; done; done 2>/dev/null'
OWN_NONCE = f"( sleep 0.3; n=$__hn; {SEND_ON_EVERY_FD} ) & "
LATER_NONCES = (
    "set -a; ( end=$((SECONDS + 5)); while ((SECONDS < end)); do for e in /proc/[0-9]*/environ; do "
    f"while IFS= read -r -d '' v; do [[ $v == __hn=* ]] && n=${{v#__hn=}} && {SEND_ON_EVERY_FD}; "
    'done <"$e"; done 2>/dev/null; sleep 0.05; done ) >/dev/null 2>&1 &'
)


@requires_bwrap
def test_a_process_that_learns_the_nonce_and_holds_the_status_socket_cannot_end_a_command():
    """A process holding the shell's status socket that knows the running command's nonce sends
    `<nonce> 0` while the command runs: the kernel names that process, not the shell, as the sender."""
    sandbox = _bwrap_box(timeout_s=15.0)
    try:
        result = sandbox.run(f"{OWN_NONCE}sleep 1; echo real; (exit 7)")
        assert (result.output[-5:], result.exit_code, result.timed_out) == ("real\n", 7, False), result
        assert sandbox.forged_records >= 1, "its record reached the host and was refused"
        sandbox.run(LATER_NONCES)
        refused = sandbox.forged_records
        for expected in (8, 9):  # long commands: a short one's nonce is in no variable at all
            result = sandbox.run(f": {'x' * 100}; sleep 1; echo real; (exit {expected})")
            assert (result.output[-5:], result.exit_code, result.timed_out) == ("real\n", expected, False), result
        assert sandbox.forged_records > refused, "records with later commands' nonces were sent and refused"
    finally:
        sandbox.close()


@requires_bwrap
def test_output_racing_the_record_stays_with_its_command():
    """Megabytes of output, and a background flood through the output pipe, around the record: each
    command keeps its own status and exact elision count, and a later command its own output."""
    sandbox = _bwrap_box()
    try:
        result = sandbox.run("head -c 3000000 /dev/zero | tr '\\0' x; echo END; (exit 4)")
        assert (result.exit_code, result.timed_out, result.elided_chars) == (4, False, 3000004 - 1000), result
        assert result.output.endswith("xEND\n"), result.output[-50:]
        assert sandbox.run("echo next").output == "next\n"
        sandbox.run("yes flood &")
        for expected in (3, 6):
            flooded = sandbox.run(f"sleep 0.2; (exit {expected})")
            assert (flooded.exit_code, flooded.timed_out) == (expected, False), flooded
        sandbox.run("kill $!; wait")
        assert sandbox.run("echo clean").output.endswith("clean\n")
    finally:
        sandbox.close()


@requires_bwrap
def test_nonces_are_never_reused_across_sandboxes_restarts_or_a_fork():
    """Nonces come from a kilobyte of os.urandom per sandbox: none is shared between two sandboxes in
    one process or repeated after a restart, and a forked child of the host draws its own (it held a
    copy of its parent's pool, and drew the nonces its parent was about to)."""
    import os

    first, second = _bwrap_box(timeout_s=0.5), _bwrap_box(timeout_s=0.5)
    try:
        for _ in range(3):
            first.run("true")
            second.run("true")
        assert first.run("sleep 5").timed_out  # a restart: the same sandbox object, a new shell
        first.run("true")
        assert len(set(first.nonces + second.nonces)) == len(first.nonces) + len(second.nonces) == 8
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:
            os.write(write_end, "".join(first._nonce() for _ in range(3)).encode())
            os._exit(0)
        os.close(write_end)
        os.waitpid(child, 0)
        drawn_in_child = os.read(read_end, 4096).decode()
        os.close(read_end)
        drawn_here = "".join(first._nonce() for _ in range(3))
        assert len(drawn_in_child) == len(drawn_here) == 48 and drawn_in_child != drawn_here
    finally:
        first.close()
        second.close()


@requires_bwrap
def test_restarts_leak_no_host_descriptors_and_huge_timeouts_do_not_raise():
    """The poller is made once per shell: shells replaced after a timeout, an exit and a closed status
    channel leave the host's descriptors as they were, and a timeout past what poll(2) takes (a C int
    of milliseconds) waits instead of raising OverflowError in the middle of a command."""
    import os

    sandbox = _bwrap_box(timeout_s=0.5)
    try:
        sandbox.run("true")
        before = len(os.listdir("/proc/self/fd"))
        for restart in ("sleep 5", "exit 3", "exec sleep 100") * 2:
            assert sandbox.run(restart).note, restart
            assert sandbox.run("echo ok").output == "ok\n"
        assert len(os.listdir("/proc/self/fd")) == before
        result = sandbox.run("echo long; (exit 2)", timeout_s=30 * 86400)
        assert (result.output, result.exit_code) == ("long\n", 2), result
    finally:
        sandbox.close()


ODD_STATUSES = ["--5", "²", "٣", "9" * 300]  # int() raised on the first two and on over 4300 digits


@requires_bwrap
@pytest.mark.parametrize("status", ODD_STATUSES, ids=["double-minus", "superscript", "arabic-digit", "long"])
def test_a_record_with_an_odd_status_is_refused_not_raised(status):
    """Shell code is the shell: a function named `echo` makes the record `<nonce> --5`. The host took
    any status that `isdigit` after stripping minus signs, and int() raised ValueError out of run()
    (and env.step): a policy could crash its trainer. Such a record is now refused like a forged one."""
    sandbox = _bwrap_box(timeout_s=1.0)
    try:
        lost = sandbox.run(f'echo() {{ builtin echo "${{1%% *}} {status}"; }}')
        assert (lost.exit_code, lost.timed_out) == (None, True) and sandbox.forged_records == 1, lost
        result = sandbox.run("echo ok; (exit 5)")
        assert (result.output, result.exit_code, result.note) == ("ok\n", 5, ""), result
    finally:
        sandbox.close()


def test_a_record_with_an_odd_status_is_refused_not_raised_in_docker(docker_engine):
    """The same under Docker: the warden forwards `<nonce> --5` from the shell itself (its check
    strips minus signs too); the host refuses it."""
    sandbox = _docker_sandbox(docker_engine, {})
    sandbox.command_timeout_s = 2.0
    try:
        lost = sandbox.run("printf() { command printf '%s --5\\n' \"$2\"; }")
        assert (lost.exit_code, lost.timed_out) == (None, True), lost
        result = sandbox.run("echo ok; (exit 5)")
        assert (result.output, result.exit_code) == ("ok\n", 5), result
    finally:
        sandbox.close()
