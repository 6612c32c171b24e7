"""The shell and tool-server protocol against a hostile agent: forged end records, stray writers,
/proc snooping, a killed server, exact output caps. All on the real bubblewrap sandbox."""

import re
import shlex

import pytest
from conftest import requires_bwrap

from harness_gym.sandboxes import BubblewrapSandbox

pytestmark = requires_bwrap

ROOT = "/testbed"


@pytest.fixture
def box():
    sandbox = BubblewrapSandbox(command_timeout_s=10, output_limit_chars=1000)
    workspace = sandbox.new_workspace()
    (workspace / "a.txt").write_text("alpha\nbeta\n")
    sandbox.start(workspace, ROOT)
    nonces: list[str] = []
    send = sandbox._send_command

    def recording(command):
        nonces.append(send(command))
        return nonces[-1]

    sandbox._send_command = recording
    sandbox.nonces = nonces
    yield sandbox
    sandbox.close()


def test_printed_markers_and_fake_records_are_only_output(box):
    box.run("true")
    stale = box.nonces[-1]
    fake = f"printf '%s 0\\n' {stale}; echo 'hello 2'; echo '__HARNESS_GYM_DONE_0123456789abcdef__ 0'; exit_code=0"
    result = box.run(f"{fake}; echo after; (exit 9)")
    assert result.exit_code == 9
    assert result.output == f"{stale} 0\nhello 2\n__HARNESS_GYM_DONE_0123456789abcdef__ 0\nafter\n"


def test_stray_writers_on_every_descriptor_cannot_end_a_command(box):
    # a background subshell keeps bash's saved descriptors (the status socket among them) and sprays
    # records with every nonce it could know, on every descriptor, while later commands run
    spray = (
        "( for i in $(seq 60); do for fd in 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 255; do "
        "{ printf '%s 0\\n' hello 0123456789abcdef0123456789abcdef >&$fd; } 2>/dev/null; done; "
        "sleep 0.02; done ) >/dev/null 2>&1 &"
    )
    assert box.run(spray).exit_code == 0
    for expected in (3, 4, 5):
        result = box.run(f"sleep 0.3; (exit {expected})")
        assert result.exit_code == expected and not result.timed_out  # (the spray is legitimate output)
    assert box.forged_records > 0  # forged records arrived, and were refused


def test_background_output_later_never_shifts_status(box):
    box.run("( sleep 0.4; echo late-output ) &")
    first = box.run("echo now; (exit 3)")
    assert first.exit_code == 3 and first.output == "now\n"
    second = box.run("sleep 0.8; (exit 4)")
    assert second.exit_code == 4 and "late-output" in second.output  # it arrived during this command


def test_descriptor_games_in_the_command(box):
    result = box.run("exec 3>&- 2>&-; exec 1>/dev/null; echo gone")
    assert result.exit_code == 0
    assert box.run("echo back; (exit 2)").exit_code == 2
    assert box.run("exec 0</dev/null; echo $((1+1))").output == "2\n"


def test_shell_and_server_descriptors_and_memory_are_unreachable(box):
    assert box.run_tool("file_editor.py", {"command": "view", "path": "a.txt", "root": ROOT}).exit_code == 0
    probe = (
        "for p in /proc/[0-9]*; do for f in $p/fd/*; do "
        '[ -e "$f" ] && { echo hi 2>/dev/null >"$f" && echo "wrote $f"; }; done; '
        'head -c 1 $p/mem >/dev/null 2>&1 && echo "mem $p"; done; echo probed'
    )
    result = box.run(f"/bin/bash -c {shlex.quote(probe)}")  # an agent process, not the shell itself
    assert "probed" in result.output
    own = {m.group(1) for m in re.finditer(r"wrote (/proc/\d+)/fd", result.output)}
    shell = f"/proc/{box.shell_pid}"
    assert shell not in own and f"mem {shell}" not in result.output
    server = box.run("for p in /proc/[0-9]*; do grep -l server.py $p/cmdline 2>/dev/null; done").output.split()
    assert server, "the tool server should be running"
    for cmdline in server:
        pid_dir = cmdline.rsplit("/", 1)[0]
        assert pid_dir not in own and f"mem {pid_dir}" not in result.output
    # the protocol still works afterwards
    assert box.run("echo fine").output == "fine\n"
    assert "alpha" in box.run_tool("library.py", {"op": "read_file", "args": {"path": "a.txt"}, "root": ROOT}).output


def test_nonces_are_nowhere_the_agent_can_read(box):
    for _ in range(3):
        box.run("true")
    seen = box.nonces[:]
    dump = box.run(
        "cat /proc/[0-9]*/cmdline /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n'; "
        "grep -r . /tmp /.harness/tools 2>/dev/null; env; declare -p 2>/dev/null | grep -v __hg_c"
    )
    assert dump.exit_code is not None
    assert not any(n in dump.output for n in seen)


def test_nonces_stay_fresh_past_the_random_pool(box):
    """Nonces come from os.urandom drawn a kilobyte (128 nonces) at a time: never one twice."""
    for _ in range(300):
        box.run("true")
    assert len(set(box.nonces)) == len(box.nonces) == 300
    assert all(re.fullmatch("[0-9a-f]{16}", n) for n in box.nonces)


def test_programs_a_command_starts_hold_no_protocol_socket(box):
    """The status socket is closed around every command (only copies of the output pipe stay open),
    whatever options the command left set for the record's own `echo`."""
    assert box.run("shopt -s xpg_echo; set -o posix; (exit 5)").exit_code == 5
    held = box.run("ls -l /proc/self/fd/; ( ls -l /proc/self/fd/ ) & wait")
    assert held.exit_code == 0 and "pipe:" in held.output, held
    assert "socket:" not in held.output, held.output
    assert box.run("echo still; (exit 6)").output == "still\n"


def test_killing_or_stopping_the_server_gives_an_observation(box):
    assert box.run_tool("library.py", {"op": "read_file", "args": {"path": "a.txt"}, "root": ROOT}).exit_code == 0
    box.run("pkill -9 -f server.py; sleep 0.2")
    dead = box.run_tool("library.py", {"op": "read_file", "args": {"path": "a.txt"}, "root": ROOT})
    assert dead.exit_code is None and "tool server" in dead.note
    again = box.run_tool("library.py", {"op": "read_file", "args": {"path": "a.txt"}, "root": ROOT})
    assert again.exit_code == 0 and "alpha" in again.output
    box.run("pkill -STOP -f server.py")
    stuck = box.run_tool("library.py", {"op": "read_file", "args": {"path": "a.txt"}, "root": ROOT}, timeout_s=1)
    assert stuck.timed_out and "timed out" in stuck.note
    assert box.run_tool("library.py", {"op": "read_file", "args": {"path": "a.txt"}, "root": ROOT}).exit_code == 0


def test_inline_tools_cannot_reach_the_server_channel(box):
    source = "import os, sys, json\nprint(sorted(os.listdir('/proc/self/fd')), json.load(open(sys.argv[1]))['k'])"
    result = box.run_inline(source, {"k": "v"})
    assert result.exit_code == 0 and result.output.strip().endswith("v")
    assert result.output.startswith("['0', '1', '2', '3']")  # stdin, stdout, stderr and listdir's own
    crash = box.run_inline("import sys\nsys.stdout.write('partial'); raise SystemExit(4)", {})
    assert crash.exit_code == 4 and crash.output == "partial"


@pytest.mark.parametrize("size", [999, 1000, 1001, 1002, 65_537, 300_000])
def test_output_caps_are_exact(box, size):
    result = box.run(f"head -c {size} /dev/zero | tr '\\0' x")
    body = re.sub(
        r"\n\[\.\.\. \d+ bytes of output elided; showing the first and last \d+ \.\.\.\]\n", "", result.output
    )
    assert len(body) <= 1000
    assert len(body) + result.elided_chars == size
    assert (result.elided_chars > 0) == (size > 1000)


def test_odd_timeouts_give_an_observation(box):
    for timeout in (float("nan"), float("inf"), -5.0, 0.0):
        result = box.run("echo ok", timeout_s=timeout)
        assert result.output == "ok\n" or result.timed_out


def test_commands_keep_shell_semantics(box):
    weird = "printf '%s\\n' \"it's\" 'a \"quote\"' $'tab\\there'; cat <<'EOF'\n$HOME `x`\nEOF\necho ü \x00end"
    result = box.run(weird)
    assert result.output == 'it\'s\na "quote"\ntab\there\n$HOME `x`\nü end\n' and result.exit_code == 0
    assert box.run("f() { echo from-f; }; alias q=true").exit_code == 0
    assert box.run("f").output == "from-f\n"
    assert box.run("if true; then").exit_code == 2  # a syntax error is the command's error
    assert box.run("echo still").output == "still\n"


def test_lone_surrogates_and_odd_text_reach_tools_and_shell(box):
    odd = "a\ud800b \\x41 %s \u00e9"
    assert box.run(f"printf '%s' {shlex.quote(odd)} | wc -c").exit_code == 0
    assert box.write_file(f"{ROOT}/odd.txt", odd).exit_code == 0
    view = box.run_tool("file_editor.py", {"command": "view", "path": "odd.txt", "root": ROOT})
    assert view.exit_code == 0 and "\\x41 %s \u00e9" in view.output
    assert box.run("pwd").output == f"{ROOT}\n"  # no restart happened


def test_a_deferred_write_is_there_before_the_next_command(box):
    """``write_file_soon`` (a context fold's summary) returns before the server answers; the next
    command, tool call or grading reads its reply first, so the agent's next command sees the file.
    A frame larger than the pipe is finished then too."""
    box.run_tool("library.py", {"op": "read_file", "args": {"path": "a.txt"}, "root": ROOT})
    box.write_file_soon(f"{ROOT}/notes/summary.md", "folded\n")
    assert box._sent_write is not None, "the write waited for its reply"
    assert box.run("cat notes/summary.md").output == "folded\n"
    box.write_file_soon(f"{ROOT}/big.txt", "x" * 300_000)
    assert box._sent_write is not None and box._sent_write.rest, "the frame fit the pipe"
    result = box.run_tool("library.py", {"op": "read_file", "args": {"path": "a.txt"}, "root": ROOT})
    assert result.exit_code == 0 and "alpha" in result.output
    assert box.run("wc -c < big.txt").output == "300000\n"


def test_a_deferred_write_the_server_drops_is_made_again_and_told(box):
    """The server stopped while a deferred write waits for its reply: the next command restarts the
    sandbox's processes, makes the write again and says so in its note (nothing is silently lost)."""
    box.run_tool("library.py", {"op": "read_file", "args": {"path": "a.txt"}, "root": ROOT})
    box.run("pkill -STOP -f server.py")
    box.command_timeout_s = 1.0
    box.write_file_soon(f"{ROOT}/summary.md", "kept\n")  # (the stopped server never answers)
    result = box.run("cat summary.md; (exit 3)")
    assert (result.output, result.exit_code) == ("kept\n", 3), result
    assert "tool server" in result.note, result.note
    assert box.run("echo ok").note == ""


def test_a_command_cannot_redirect_the_status_socket_or_later_output(box):
    """Between commands the shell's stdout is the status socket and its stderr the output pipe; the
    command's redirections put them back whatever it `exec`s (so its output never becomes a record,
    and a later command's output never goes to a file it chose), and it runs with stdin /dev/null."""
    for command in ("exec 1>hidden 2>&1 0<a.txt", "exec 1>&- 2>&- 0<&-", "exec 2>&1 1>hidden"):
        box.run(command)
        result = box.run("echo out; echo err >&2; cat; (exit 6)")
        assert (result.output, result.exit_code, result.note) == ("out\nerr\n", 6, ""), (command, result)
    assert box.run("cat hidden").output == ""
    before = box.forged_records
    assert box.run('echo "$__hn 0 1"; (exit 4)').exit_code == 4
    assert box.forged_records == before, "the command's output reached the status channel"


def test_a_primed_server_says_it_is_up_before_the_first_call(box):
    """A spare's worker primes the tool server and waits for its "up" byte, so the episode's first
    tool call never waits for an interpreter to start; the byte never reaches a reply."""
    assert box.prime_tool_server(wait_s=10.0) is True
    result = box.run_tool("library.py", {"op": "read_file", "args": {"path": "a.txt"}, "root": ROOT})
    assert result.exit_code == 0 and "alpha" in result.output
