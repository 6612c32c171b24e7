"""The persistent-shell protocol shared by process-based sandboxes (bubblewrap, Docker, unsafe-host).

A backend starts one shell per episode. Nothing is written to disk per command: the host sends each
command over a pipe, which the shell ``eval``s at top level (so ``cd`` and ``export`` persist) with
stdin /dev/null and stderr joined to stdout. Bash reads a script from a pipe one byte per read(2), so
(bubblewrap, unsafe-host) a short ASCII command comes inline as a quoted literal, then the alias
``__hi`` and its nonce; a longer one as the alias ``__hg`` followed by a fixed header (length, nonce) and
the command as ``read -N`` blocks, ASCII-escaped for ``printf %b`` so that its length means the same
in every locale. Docker's ``sh`` gets the command as a shell-quoted literal.

End of a command: after the ``eval`` the shell writes ``<status> 1 <nonce>`` (stderr mode: ``<nonce>
<status>``) on a status channel that is not the output stream. The nonce is fresh for every command and travels only inside the command pipe,
which bash reads as its script descriptor: bash closes that in every subshell and child. Where the backend allows it (bubblewrap, unsafe-host)
the status channel is a unix seqpacket socket with ``SO_PASSCRED``: a record counts only when the
kernel says the shell process itself sent it, so no process the agent starts can end a command early
or attribute output to the wrong command, even one that holds a copy of the socket or learns a nonce.
Under bubblewrap the shell and the tool server are also non-dumpable (they are executed from
execute-only copies), so the agent's processes cannot open their descriptors through /proc or read
their memory. Docker's ``exec`` passes only stdin/stdout/stderr: there the status goes over the
shell's stderr, through a sealed warden (``tools/scripts/relay.py``) that counts only records the
shell itself sent and fences the output with a secret the shell never sees (the shell there is
dumpable: a process the agent left behind could otherwise read the next command and its nonce from
/proc and answer for it); an image without Python gets the bare shell and the nonce alone.

What this does not cover: agent code that runs *inside* the shell process (shell functions, traps,
builtins) is the shell. It shares the shell's memory and descriptors, so it can misreport the status
of the commands it runs in (as `false` can); the host still never hangs past a timeout, never raises,
and never counts a record from any other process or for any other command.

Output is capped exactly: at most ``output_limit_chars`` bytes of head and tail plus one elision note.
A command that outlives its timeout takes the whole process tree with it and a new shell is started;
the result says so. The non-bash tools run in a persistent Python tool server (see
``tools/scripts/server.py``) started by the first tool call or primed at the start (a warm spare waits for
it to announce itself), inside the same sandbox, with the
same limits, on pipes only the host and the server hold.
"""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import math
import os
import re
import secrets
import select
import shlex
import shutil
import socket
import struct
import subprocess
import termios
import threading
import time
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from harness_gym.budget import COMMAND_TIMEOUT_S, OUTPUT_LIMIT_CHARS
from harness_gym.sandboxes.base import TOOLS_DIR, CommandResult, SandboxBackend, SandboxError
from harness_gym.sandboxes.launcher import launch

_S = TypeVar("_S", bound="ShellSandbox")
_CREDENTIALS = struct.calcsize("3i")
_CREDENTIALS_SPACE = socket.CMSG_SPACE(_CREDENTIALS)
_FRAME = struct.Struct(">I")
_INLINE_MAX = 96  # commands up to this many characters (ASCII) travel inline in the shell's script
_LONGEST_WAIT_S = (2**31 - 1) // 1000  # poll(2) takes a C int of milliseconds (about 24 days)
_forks = 0  # fork generation of this process: a forked child draws fresh nonces, not its parent's pool


def _after_fork_in_child() -> None:
    global _forks
    _forks += 1


os.register_at_fork(after_in_child=_after_fork_in_child)


@dataclass
class _Channels:
    """The host's ends of one shell's pipes, and the child ends to hand over at spawn."""

    commands: int
    status: socket.socket | None = None  # socket mode; None: the status comes on the shell's stderr
    requests: int | None = None  # the tool server's request pipe (host writes)
    replies: int | None = None  # the tool server's reply pipe (host reads)
    child_fds: list[int] = field(default_factory=list)
    server_started: bool = False
    announced: bool = True  # False while a shell-started server's "S" (it is up and sealed) is unread
    server: subprocess.Popen[bytes] | None = None  # a tool server started as a process of its own
    poller: Any = None  # select.poll over (status, output), made at the first command and kept

    def close(self) -> None:
        for fd in (self.commands, self.requests, self.replies, *self.child_fds):
            if fd is not None and fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.child_fds = []
        if self.status is not None:
            self.status.close()
        if self.server is not None:
            kill_process_group(self.server)
            self.server = None


@dataclass
class _SentWrite:
    """A write sent to the tool server whose reply is read later (:meth:`ShellSandbox.write_file_soon`)."""

    request_id: str
    rest: bytes  # what of its frame the request pipe did not take yet
    path: str
    content: str


class CappedOutput:
    """Head and tail of a byte stream, never more than ``limit`` bytes kept (exact output caps)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.half = max(limit // 2, 1)
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk:
            return
        self.tail += chunk
        excess = len(self.tail) - self.half
        if excess > 0:
            del self.tail[:excess]
            self.dropped += excess

    def cut_at(self, marker: bytes) -> bool:
        """Drop ``marker`` and everything after it, if it is in what is kept near the end (a marker
        written last lands in the tail, or in the head while nothing was dropped)."""
        at = self.tail.rfind(marker)
        if at >= 0:
            del self.tail[at:]
            return True
        joined = self.head + self.tail
        at = joined.rfind(marker) if not self.dropped else -1
        if at < 0:
            return False
        self.head, self.tail = joined[: min(at, self.half)], joined[self.half : at] if at > self.half else bytearray()
        return True

    def drain(self, stream: Any) -> None:
        """Read ``stream`` to its end (a reader thread's loop)."""
        try:
            while True:
                chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
                if not chunk:
                    return
                self.add(chunk)
        except (OSError, ValueError):
            return

    def text(self) -> tuple[str, int]:
        return join_output(self.head, self.tail, self.dropped, self.limit)


class ShellSandbox(SandboxBackend):
    """Base of sandboxes that run one persistent shell per episode (starting and grading are
    :class:`~harness_gym.sandboxes.base.SandboxBackend`'s). Subclasses say what command starts the
    shell inside the sandbox (:meth:`_shell_command`) and how to kill everything (:meth:`_kill_all`)."""

    python = "python3"
    # where the sandbox sees the harness's tool scripts (a backend without mounts overrides this)
    tools_dir = TOOLS_DIR
    # "socket": status records on a credential-checked unix socket passed as a descriptor;
    # "stderr": on the shell's stderr (for launchers that pass only the standard descriptors)
    status_channel: ClassVar[str] = "socket"

    def __init__(
        self, *, command_timeout_s: float = COMMAND_TIMEOUT_S, output_limit_chars: int = OUTPUT_LIMIT_CHARS
    ) -> None:
        self.command_timeout_s = command_timeout_s
        self.output_limit_chars = output_limit_chars
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: Path | None = None
        self._channels: _Channels | None = None
        self._shell_host_pid: int | None = None
        self.shell_pid: int | None = None
        self.forged_records = 0  # status records refused (wrong sender or nonce), for tests and audits
        self._fence_secret = ""  # stderr mode: a warden's fence secret (see tools/scripts/relay.py)
        self._random = b""  # os.urandom drawn a kilobyte at a time: a fresh nonce without a syscall each
        self._random_used = 0
        self._random_forks = _forks  # the fork generation the pool was drawn in
        self._sent_write: _SentWrite | None = None  # a write sent by write_file_soon, its reply not read yet
        self._carried_note = ""  # a restart the deferred write's failure caused: told with the next result

    # ------------------------------------------------------------------ to implement

    @abstractmethod
    def _shell_command(
        self, shell_argv: list[str]
    ) -> contextlib.AbstractContextManager[tuple[list[str], Sequence[int]]]:
        """The host command that runs ``shell_argv`` inside the sandbox, and descriptors it must
        inherit besides the protocol's (open while the shell starts, closed afterwards)."""

    def _shell_env(self) -> dict[str, str] | None:
        """The launcher's environment (None: this process's own)."""
        return None

    def _shell_cwd(self) -> str | None:
        """The launcher's working folder (None: this process's own)."""
        return None

    def _spawn_shell(self, shell_argv: list[str], pass_fds: Sequence[int]) -> subprocess.Popen[bytes]:
        """Start ``shell_argv`` in the sandbox with ``pass_fds`` inherited: stdout a pipe and stderr
        joined to it, stdin empty (nothing at descriptors 0-2 may be a protocol pipe); in "stderr"
        status mode stdin is the command pipe and stderr the status pipe."""
        socket_mode = self.status_channel == "socket"
        with self._shell_command(shell_argv) as (argv, extra_fds):
            env, cwd = self._shell_env(), self._shell_cwd()
            # on the launcher thread: a sandbox must not die with the thread that reset it
            return launch(
                lambda: subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL if socket_mode else subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT if socket_mode else subprocess.PIPE,
                    start_new_session=True,
                    env=env,
                    cwd=cwd,
                    pass_fds=(*pass_fds, *extra_fds),
                    bufsize=0,
                )
            )

    def _kill_all(self) -> None:
        """Kill the shell and every process it started (its process group; backends add to this)."""
        if self._proc is not None:
            kill_process_group(self._proc)
            self._proc = None
        if self._channels is not None:
            self._channels.close()
            self._channels = None

    def interrupt(self) -> None:
        """From another thread: kill the running command's whole process tree now (a budget the
        host enforces, such as an external CLI's turns); the blocked :meth:`run` returns as for a
        shell that exited, and a new shell is started."""
        proc = self._proc
        if proc is not None:
            kill_process_group(proc)

    def _stop_agent(self) -> None:
        """Before grading: the shell and everything it started (the sandbox's own setup stays)."""
        self._settle_write()  # the file a deferred write makes is there for the grader
        self._kill_all()

    def _shell_program(self) -> str:
        """The shell executable inside the sandbox (bash: the protocol uses bash redirections)."""
        return "/bin/bash"

    def _server_python(self) -> str | None:
        """The Python that runs the persistent tool server inside the sandbox, or None for none
        (then each tool call runs its script through the shell)."""
        return None

    def _spawn_server(self, server_python: str) -> subprocess.Popen[bytes] | None:
        """Start the tool server as a process of its own, stdin and stdout pipes (a launcher that
        passes only the standard descriptors: Docker's exec); None: the shell's launcher starts it."""
        return None

    def _channel_owner(self) -> int | None:
        """The host uid the shell runs as, when it differs from ours (it must open its command pipe)."""
        return None

    # ------------------------------------------------------------------ shared

    def close(self) -> None:
        """Kill every process and remove the workspace and everything the episode held. Safe twice."""
        self._stop()
        self._release_workspace()

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _shell_setup(self) -> str:
        """Shell code run once in every new shell (resource limits, prompt)."""
        return "PS1=''; PS2=''\n"

    # ------------------------------------------------------------------ commands

    def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        """Run ``command`` in the persistent shell."""
        if self._proc is None or self._channels is None:
            raise SandboxError("sandbox is not started; call start() first (the environment does this at reset)")
        if self._sent_write is not None or self._carried_note:
            self._settle_write()
            return self._told(self._run(command, timeout_s))
        return self._run(command, timeout_s)

    def _run(self, command: str, timeout_s: float | None) -> CommandResult:
        timeout = self._bounded_timeout(timeout_s)
        started = time.perf_counter()
        nonce = self._send_command(command)
        result, ended = self._collect(timeout, started, nonce)
        if ended == "done":
            return result
        what = "shell" if ended == "unrunnable" else "command"
        return self._restart_after(result, timed_out=ended == "timeout", timeout=timeout, what=what)

    def run_tool(self, script: str, payload: Mapping[str, Any], timeout_s: float | None = None) -> CommandResult:
        """Run the harness tool script ``script`` (in TOOLS_DIR) with a JSON payload."""
        if self._server_python() is not None:
            return self._request({"kind": "script", "script": script, "payload": dict(payload)}, timeout_s)
        command = f"command {shlex.quote(self.python)} -I -S {self.tools_dir}/{script} /dev/stdin"
        return self.run(_with_here_document(command, json.dumps(payload)), timeout_s)

    def run_inline(self, source: str, payload: Mapping[str, Any], timeout_s: float | None = None) -> CommandResult:
        """Run a spec's inline Python tool ``source`` inside the sandbox; ``sys.argv[1]`` names a file
        holding the JSON payload. In the tool server it runs in a forked child (its state and output
        cannot touch the server), without starting an interpreter."""
        if self._server_python() is not None:
            return self._request({"kind": "inline", "source": source, "payload": dict(payload)}, timeout_s)
        command = f"command {shlex.quote(self.python)} -I -c {shlex.quote(source)} /dev/stdin"
        return self.run(_with_here_document(command, json.dumps(payload)), timeout_s)

    def write_file(self, path: str, content: str) -> CommandResult:
        """Write a file from inside the sandbox (so a symlink planted by the agent cannot escape)."""
        if self._server_python() is not None:
            return self._request({"kind": "write", "path": path, "content": content}, None)
        return self.run(self._write_command(path, content))

    def write_file_soon(self, path: str, content: str) -> None:
        """:meth:`write_file` without waiting for it (a context fold's summary file: the next model
        reply, not this step, waits): the request goes to the tool server now, its reply is read
        before the next operation on this sandbox (a command, a tool call, grading), so the file is
        there before the agent's next command runs. A write the server fails is made again after the
        restart, and the restart's note comes with the next result. Where the server is a process of
        its own (Docker) or not started with the shell, or a write is still unanswered, it waits."""
        channels = self._channels
        if (
            self._server_python() is None
            or channels is None
            or channels.requests is None
            or channels.server is not None
            or self._sent_write is not None
        ):
            self.write_file(path, content)
            return
        request_id, frame = self._frame({"kind": "write", "path": path, "content": content})
        try:
            written = os.write(channels.requests, frame)
        except BlockingIOError:
            written = 0
        except OSError:  # the server is gone: the synchronous path restarts and says so
            self.write_file(path, content)
            return
        self._sent_write = _SentWrite(request_id, frame[written:], path, content)

    def _settle_write(self) -> None:
        """Read the reply of the write :meth:`write_file_soon` sent (finishing sending it first)."""
        sent, self._sent_write = self._sent_write, None
        if sent is None or self._channels is None:
            return
        timeout = self._bounded_timeout(None)
        reply, ended = self._exchange(self._channels, sent.rest, timeout)
        if reply is not None and reply.get("id") == sent.request_id:
            return
        restarted = self._restart_after(
            CommandResult("", None, 0.0), timed_out=ended == "timeout", timeout=timeout, what="tool server"
        )
        self._carried_note = restarted.note
        self._request_now({"kind": "write", "path": sent.path, "content": sent.content}, None)

    def _told(self, result: CommandResult) -> CommandResult:
        """``result`` with the note of a restart that happened before it (see :meth:`write_file_soon`)."""
        note, self._carried_note = self._carried_note, ""
        if note:
            result.note = f"{note} {result.note}".strip()
        return result

    def _write_command(self, path: str, content: str) -> str:
        """The shell command that writes ``content`` to ``path`` (no tool server)."""
        quoted = shlex.quote(path)
        return (
            f'__hg_d={_quote(content)}; command mkdir -p -- "$(command dirname -- {quoted})" && '
            f"printf '%s' \"$__hg_d\" > {quoted}; __hg_s=$?; unset __hg_d; (exit $__hg_s)"
        )

    # ------------------------------------------------------------------ lifecycle helpers

    def _close_control(self) -> None:
        if self._control is not None:
            shutil.rmtree(self._control, ignore_errors=True)
            self._control = None

    def _bounded_timeout(self, timeout_s: float | None) -> float:
        """A usable wall-clock limit: the default when none (or a NaN, infinite or negative one) is
        given; never longer than one poll(2) can wait (longer raised OverflowError mid-command)."""
        if timeout_s is None or not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s):
            timeout_s = self.command_timeout_s
        return min(max(float(timeout_s), 0.001), _LONGEST_WAIT_S)

    def _start_shell(self) -> None:
        """Start a shell and check that it answers; raise SandboxError with its output if not."""
        self._shell_host_pid = None
        channels = self._open_channels()
        shell = self._shell_program()
        if channels.status is not None:
            command_fd = channels.child_fds[0]
            argv = [shell, "--noprofile", "--norc", f"/dev/fd/{command_fd}"]
        else:
            argv = [shell]
        try:
            self._proc = self._spawn_shell(argv, tuple(channels.child_fds))
        except BaseException:
            channels.close()
            raise
        for fd in channels.child_fds:
            os.close(fd)
        passed, channels.child_fds = channels.child_fds, []
        self._channels = channels
        os.set_blocking(self._proc.stdout.fileno(), False)  # type: ignore[union-attr]
        if self._proc.stderr is not None:
            os.set_blocking(self._proc.stderr.fileno(), False)
        self._write(self._startup_script(passed).encode())
        hello, ended = self._collect(30.0, time.perf_counter(), "hello", startup=True)
        if ended != "done" or hello.exit_code is None:
            self._kill_all()
            raise SandboxError(f"{type(self).__name__} could not start a shell: {hello.output.strip() or 'no output'}")
        self.shell_pid = hello.exit_code
        hello.exit_code = 0

    def _open_channels(self) -> _Channels:
        command_read, command_write = os.pipe()
        channels = _Channels(commands=command_write, child_fds=[command_read])
        if self.status_channel != "socket":
            os.close(command_read)  # the command pipe is the shell's stdin, made by Popen
            channels.commands, channels.child_fds = -1, []
            return channels
        owner = self._channel_owner()
        if owner is not None:
            os.fchown(command_read, owner, owner)  # the shell opens it as /dev/fd/N
        host_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        host_end.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        channels.status = host_end
        channels.child_fds.append(child_end.detach())
        if self._server_python() is not None:
            request_read, request_write = os.pipe()
            reply_read, reply_write = os.pipe()
            channels.requests, channels.replies = request_write, reply_read
            os.set_blocking(request_write, False)  # the host's ends, once (set_blocking is an ioctl)
            os.set_blocking(reply_read, False)
            channels.announced = False
            channels.child_fds += [request_read, reply_write]
        return channels

    def _startup_script(self, passed: Sequence[int]) -> str:
        """The first code every shell runs, before any command of the agent's."""
        if self.status_channel != "socket":
            return self._shell_setup() + "exec 4>&1; printf '%s %s\\n' hello \"$$\" >&2\n"
        command_fd, status_fd = passed[0], passed[1]
        # between commands fd 1 is the status socket and fd 2 the output pipe (see ``run`` below)
        # __hf: the descriptor bash reads this script from (255 as a rule; bash closes it in subshells)
        find_script_fd = (
            f"__hf=255; [[ /proc/$$/fd/255 -ef /proc/$$/fd/{command_fd} ]] || "
            f"for __hf in {{254..5}}; do [[ $__hf != {command_fd} && /proc/$$/fd/$__hf -ef /proc/$$/fd/{command_fd} ]] "
            "&& break; done"
        )
        lines = [
            find_script_fd,
            f"exec {command_fd}<&- 0</dev/null 2>&1 1>&{status_fd} {status_fd}>&-",
            self._shell_setup().rstrip("\n"),
        ]
        server = self._server_python()
        if server is not None:
            request_fd, reply_fd = passed[2], passed[3]
            shell = self._shell_program()
            # an orphaned launcher (not a job of the shell, so `wait` and `kill %1` do not see it) that
            # execs the server when the first request's start byte arrives
            launcher = 'read -r -N 1 _ && exec "$0" -I -S "$1" --announce'
            lines.append(
                f"( {shlex.quote(shell)} --noprofile --norc -c {shlex.quote(launcher)} {shlex.quote(server)} "
                f"{self.tools_dir}/server.py 0<&{request_fd} 1>&{reply_fd} 2>/dev/null "
                f"{request_fd}<&- {reply_fd}>&- & ); exec {request_fd}<&- {reply_fd}>&-"
            )
        # Between commands the shell's stdin is /dev/null, its stdout the status socket and its stderr
        # the output pipe. The command's group redirects all three (stdin /dev/null, stdout and stderr the output
        # pipe), so bash keeps the status socket and the shell's own fds 0-2 only as its saved copies
        # (close-on-exec: no program a command starts holds them) and puts them back when the command
        # ends, whatever its `exec >file`/`exec 2>&-`/`exec <file` did (a redirection bash saved is
        # restored after an inner `exec`; one of a descriptor onto itself, `2>&2`, is not saved). The
        # record is then a plain `echo` on stdout: one write(2). Before, fds 3 (status) and 4 (output
        # copy) were closed around the `eval`, the record redirected to fd 3, and fds 0-2 restored by
        # an `exec` after it: 58 descriptor syscalls a command, 31 here.
        # `__hd`, set in the redirected group before the `eval`, says the command ran: when bash
        # cannot make the redirections (`ulimit -n 4`) it skips the group and the host replaces the
        # shell (before, the record's own redirection failed too, and the host waited its timeout)
        # The record is `<status> <1 if it ran> <nonce>`: a short command's frame puts its nonce after
        # the alias, as the `echo`'s last word (no `__hn=` assignment for bash to read byte by byte).
        run = '__hd=; { __hd=1; eval "$__hc"; } 0</dev/null 1>&2 2>&1; echo "$? $__hd"'
        # a long command: its header (length, nonce) and text as `read -N` blocks (bash's parser
        # reads a script one byte per read(2)); a short one (``_INLINE_MAX``) is cheaper inline as a
        # quoted literal than two `read` builtins and a `printf %b`
        read = (
            'IFS= read -r -u "$__hf" -N 24 __hh; IFS= read -r -u "$__hf" -N "$((16#${__hh:0:8}))" __he; '
            'printf -v __hc %b "$__he"; __hn=${__hh:8}; unset __he __hh; '
        )
        named = ' "$__hn"'  # a long command's nonce comes in its header
        lines += [
            "shopt -s expand_aliases",
            f"alias __hg={shlex.quote(read + run + named)}",
            f"alias __hi={shlex.quote(run)}",
        ]
        lines.append("printf '%s %s\\n' hello \"$$\"")
        return "\n".join(lines) + "\n"

    def _nonce(self) -> str:
        """64 fresh random bits, hex (from a pool drawn from os.urandom, never reused)."""
        at = self._random_used
        if at + 8 > len(self._random) or self._random_forks != _forks:  # (a forked child's copy is its parent's)
            self._random, at, self._random_forks = os.urandom(1024), 0, _forks
        self._random_used = at + 8
        return self._random[at : at + 8].hex()

    def _send_command(self, command: str) -> str:
        nonce = self._nonce()
        if self.status_channel == "socket":
            if len(command) <= _INLINE_MAX and command.isascii():
                literal = command.replace("\0", "").replace("'", "'\\''").encode()
                self._write(b"__hc='%s';__hi %s\n" % (literal, nonce.encode()))
                return nonce
            # the header (length, nonce) and the command as `read -N` blocks, the command as ASCII (so
            # its length means the same in every locale), decoded by printf %b
            payload = _ascii_escaped(command) or b" "
            self._write(b"\n__hg\n%08x%s" % (len(payload), nonce.encode()) + payload)
            return nonce
        # under a warden the fence is the warden's (with a secret the shell never sees), else the shell's
        fence = "" if self._fence_secret else f"printf %s {_fence(nonce)} >&4; "
        self._write(
            (
                f"__hg_c={_quote(command)}\n"
                f'eval "$__hg_c" </dev/null >&4 2>&1 4>&-; __hg_s=$?; {fence}'
                f"printf '%s %s\\n' {nonce} \"$__hg_s\" >&2\n"
            ).encode("utf-8", errors="replace")
        )
        return nonce

    def _write(self, data: bytes) -> None:
        assert self._proc is not None
        fd = self._channels.commands if self._channels and self._channels.commands >= 0 else None
        if fd is None:
            assert self._proc.stdin is not None
            fd = self._proc.stdin.fileno()
        try:  # a dead shell shows up as EOF in _collect
            written = os.write(fd, data)  # a command frame fits the pipe: one write as a rule
            if written < len(data):
                view = memoryview(data)[written:]
                while view:
                    view = view[os.write(fd, view) :]
        except OSError:
            pass

    def _status_fd(self) -> int:
        assert self._proc is not None and self._channels is not None
        if self._channels.status is not None:
            return self._channels.status.fileno()
        assert self._proc.stderr is not None
        return self._proc.stderr.fileno()

    def _collect(
        self, timeout: float, started: float, nonce: str, *, startup: bool = False
    ) -> tuple[CommandResult, str]:
        """Read output until this command's status record ('done'), a 'timeout' or end of file ('eof').

        At startup the record is ``hello <pid>``; its sender (the shell, before any agent code ran)
        becomes the only process whose records count."""
        assert self._proc is not None and self._proc.stdout is not None
        out_fd, status_fd = self._proc.stdout.fileno(), self._status_fd()
        output = CappedOutput(self.output_limit_chars)
        pending = bytearray()  # stderr-mode status stream
        deadline = time.monotonic() + timeout
        channels = self._channels
        assert channels is not None
        if channels.poller is None:  # registered once per shell: poll(2) costs half of select(2) here
            channels.poller = select.poll()
            channels.poller.register(status_fd, select.POLLIN)
            channels.poller.register(out_fd, select.POLLIN)
        poll = channels.poller.poll
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._partial(output, started), "timeout"
            ready = [fd for fd, _ in poll(math.ceil(remaining * 1000))]
            if out_fd in ready:
                try:
                    chunk = os.read(out_fd, 1 << 16)
                except BlockingIOError:
                    chunk = None
                if chunk == b"":
                    return self._partial(output, started), "eof"
                if chunk:
                    output.add(chunk)
            if status_fd not in ready:
                continue
            record, eof = self._read_status(status_fd, pending, startup)
            if eof:
                return self._partial(output, started), "eof"
            if record is None:
                continue
            word, _, value = record.partition(" ")
            ran = "1"
            if startup and self.status_channel != "socket":  # `hello <pid> <secret>` from a warden, else `hello <pid>`
                value, _, secret = value.strip().partition(" ")
                self._fence_secret = secret
            elif not startup and self.status_channel == "socket":  # `<status> <1 if it ran> <nonce>`
                parts = record.split(" ")
                value, ran, word = parts if len(parts) == 3 else ("", "", "")
            status = _status_number(value)
            if word != nonce or status is None:
                self.forged_records += 1
                continue
            if out_fd in ready:  # (not ready in the poll that saw the record: the pipe held nothing then)
                self._drain(out_fd, output)
            if ran != "1":  # the shell could not open the command's descriptors: it cannot run any
                return self._partial(output, started), "unrunnable"
            # stderr mode: stdout and stderr reach the host by separate copies, so the status can
            # overtake the last output: read on until the command's fence, written after its output
            fenced = self.status_channel == "socket" or startup
            if not fenced and not self._read_to_fence(
                out_fd, output, _fence(self._fence_secret + nonce).encode(), deadline
            ):
                return self._partial(output, started), "timeout"
            text, elided = output.text()
            return CommandResult(
                text, status, time.perf_counter() - started, elided_chars=elided, pid=self.shell_pid
            ), "done"

    def _read_status(self, fd: int, pending: bytearray, startup: bool) -> tuple[str | None, bool]:
        """One status record (or None for nothing complete yet / refused), and whether the channel ended."""
        channels = self._channels
        assert channels is not None
        if channels.status is None:
            try:
                chunk = os.read(fd, 4096)
            except BlockingIOError:
                return None, False
            if not chunk:
                return None, True
            pending += chunk
            if b"\n" not in pending:
                return None, False
            line, _, rest = bytes(pending).partition(b"\n")
            pending[:] = rest
            return line.decode(errors="replace").strip(), False
        try:
            data, ancillary, _, _ = channels.status.recvmsg(256, _CREDENTIALS_SPACE)
        except (BlockingIOError, InterruptedError):
            return None, False
        if not data:
            return None, True
        sender = None
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                sender = array.array("i", payload[:_CREDENTIALS])[0]
        if startup and self._shell_host_pid is None:
            self._shell_host_pid = sender
        elif sender is None or sender != self._shell_host_pid:
            self.forged_records += 1
            return None, False
        return data.decode(errors="replace").strip(), False

    def _drain(self, fd: int, output: CappedOutput) -> None:
        """Read what the command wrote before its status record: what the pipe holds now, no more
        (a background writer must not keep this command open)."""
        available = array.array("i", [0])
        with contextlib.suppress(OSError):
            fcntl.ioctl(fd, termios.FIONREAD, available)
        left = available[0]
        while left > 0:
            try:
                chunk = os.read(fd, min(left, 1 << 16))
            except BlockingIOError:
                break
            if not chunk:
                break
            output.add(chunk)
            left -= len(chunk)

    def _read_to_fence(self, fd: int, output: CappedOutput, fence: bytes, deadline: float) -> bool:
        """Read ``fd`` until ``fence`` has passed, then cut the output there (stderr status mode)."""
        while not output.cut_at(fence):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            ready, _ = wait_for([fd], [], remaining)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                return False
            output.add(chunk)
        return True

    def _partial(self, output: CappedOutput, started: float) -> CommandResult:
        text, elided = output.text()
        return CommandResult(text, None, time.perf_counter() - started, elided_chars=elided, pid=self.shell_pid)

    # ------------------------------------------------------------------ the tool server

    def _request(self, request: dict[str, Any], timeout_s: float | None) -> CommandResult:
        """One request to the in-sandbox tool server; a timeout or a dead server restarts the sandbox's
        processes (like a shell timeout), with a note."""
        if self._sent_write is not None or self._carried_note:
            self._settle_write()
            return self._told(self._request_now(request, timeout_s))
        return self._request_now(request, timeout_s)

    def _request_now(self, request: dict[str, Any], timeout_s: float | None) -> CommandResult:
        if self._proc is None or self._channels is None:
            raise SandboxError("sandbox is not started; call start() first (the environment does this at reset)")
        channels = self._channels
        if channels.requests is None:  # no pipes to a shell-started server: one of its own
            server_python = self._server_python()
            server = self._spawn_server(server_python) if server_python is not None else None
            if server is None or server.stdin is None or server.stdout is None:
                raise SandboxError(f"{type(self).__name__} cannot start its tool server")
            channels.server, channels.server_started = server, True
            channels.requests, channels.replies = os.dup(server.stdin.fileno()), os.dup(server.stdout.fileno())
            os.set_blocking(channels.requests, False)
            os.set_blocking(channels.replies, False)
        assert channels.requests is not None and channels.replies is not None
        timeout = self._bounded_timeout(timeout_s)
        started = time.perf_counter()
        request_id, frame = self._frame(request)
        reply, ended = self._exchange(channels, frame, timeout)
        duration = time.perf_counter() - started
        if reply is not None and reply.get("id") == request_id:
            text, elided = elide(
                str(reply.get("output", "")).encode("utf-8", errors="replace"), self.output_limit_chars
            )
            code = reply.get("exit_code")
            return CommandResult(
                text, code if isinstance(code, int) else None, duration, elided_chars=elided, pid=self.shell_pid
            )
        partial = CommandResult("", None, duration, pid=self.shell_pid)
        if ended == "done":  # a reply that is not this request's: the server is not to be trusted
            ended = "eof"
        return self._restart_after(partial, timed_out=ended == "timeout", timeout=timeout, what="tool server")

    def _frame(self, request: dict[str, Any]) -> tuple[str, bytes]:
        """A request's id and its frame for the tool server (with the start byte if it is not started)."""
        channels = self._channels
        assert channels is not None
        request_id = self._nonce() + self._nonce()  # 128 bits from the pool: no getrandom(2) a request
        request = dict(request, id=request_id, limit=self.output_limit_chars)
        body = json.dumps(request, default=str).encode()  # ASCII: lone surrogates travel as \\u escapes
        frame = (b"" if channels.server_started else b"G") + _FRAME.pack(len(body)) + body
        channels.server_started = True
        return request_id, frame

    def prime_tool_server(self, wait_s: float = 0.0) -> bool:
        """Start the in-sandbox tool server now: its launcher gets the start byte and execs Python
        while the episode starts (a spare: off every clock), not at the first non-shell tool call or
        context fold (90-280 ms of interpreter start). ``wait_s``: wait that long for the server to
        say it is up (a spare's worker does, so a spare handed out has its server answering: on a
        loaded machine the interpreter took longer than the model's first reply, and the episode's
        first tool call waited up to 0.5 s for it). Returns whether the server is known to be up
        (True also for a server that is a process of its own, Docker's, which announced itself)."""
        channels = self._channels
        if channels is None or channels.requests is None:
            return False
        if not channels.server_started:
            try:
                os.write(channels.requests, b"G")
            except OSError:  # the shell is gone: the next request restarts the sandbox's processes
                return False
            channels.server_started = True
        if not channels.announced and wait_s > 0 and channels.replies is not None:
            ready, _ = wait_for([channels.replies], [], wait_s)
            if ready:
                try:
                    byte = os.read(channels.replies, 1)
                except BlockingIOError:
                    byte = b""
                if byte:  # "S"; anything else is no announcement, and the next request finds out
                    channels.announced = True
        return channels.announced

    def _exchange(self, channels: _Channels, frame: bytes, timeout: float) -> tuple[dict[str, Any] | None, str]:
        assert channels.requests is not None and channels.replies is not None
        deadline = time.monotonic() + timeout
        view = memoryview(frame)  # (both ends are non-blocking since they were made)
        received = bytearray()
        needed: int | None = None
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None, "timeout"
            ready_read, ready_write = wait_for([channels.replies], [channels.requests] if view else [], remaining)
            if ready_write and view:
                try:
                    view = view[os.write(channels.requests, view) :]
                except BlockingIOError:
                    pass
                except OSError:
                    return None, "eof"
            if not ready_read:
                continue
            try:
                chunk = os.read(channels.replies, 1 << 20)
            except BlockingIOError:
                continue
            if not chunk:
                return None, "eof"
            received += chunk
            if not channels.announced and received[:1] == b"S":  # the server's "up" byte, unread before
                del received[:1]  # (a frame starts with its length's high byte: 0 below 16 MB)
                channels.announced = True
            if needed is None and len(received) >= _FRAME.size:
                needed = _FRAME.unpack_from(received)[0] + _FRAME.size
            if needed is not None and len(received) >= needed:
                try:
                    return json.loads(bytes(received[_FRAME.size : needed])), "done"
                except ValueError:
                    return None, "eof"

    def _restart_after(
        self, partial: CommandResult, *, timed_out: bool, timeout: float, what: str = "command"
    ) -> CommandResult:
        """Replace a shell that timed out or exited, and say so in the result."""
        status = None
        if not timed_out and self._proc is not None and what == "command":
            try:  # a shell that closed its status channel but lives on must not hold us past the timeout
                status = self._proc.wait(timeout=min(5.0, max(timeout - partial.duration_s, 0.5)))
            except subprocess.TimeoutExpired:
                status = None
        self._kill_all()
        if timed_out:
            note = (
                f"The {what} timed out after {timeout:g} s; it and every process it started were killed. "
                "A new shell was started: the working directory and environment variables are reset."
            )
        elif what == "command":
            note = (
                f"The shell exited (status {status}); every process it started was killed and a new shell "
                "was started: the working directory and environment variables are reset."
            )
        elif what == "shell":
            note = (
                "The shell could not set up the command's descriptors (a descriptor limit?), so it could not "
                "run it; every process was killed and a new shell was started: the working directory and "
                "environment variables are reset."
            )
        else:
            note = (
                "The tool server stopped without answering; every process was killed and a new shell was "
                "started: the working directory and environment variables are reset."
            )
        self._start_shell()
        partial.exit_code = None if timed_out else status
        partial.timed_out, partial.note, partial.pid = timed_out, note, self.shell_pid
        return partial


def _status_number(value: str) -> int | None:
    """A record's status (or the shell's pid): ASCII digits, optionally one minus sign, or None.
    (`isdigit` alone let `--5` and `²` through to int(), which raised out of ``run``: a shell
    function named `echo` crashed the host.)"""
    digits = value.strip()
    digits = digits[1:] if digits[:1] == "-" else digits
    if not digits.isascii() or not digits.isdigit() or len(digits) > 18:
        return None
    return int(value)


def _quote(text: str) -> str:
    """A shell single-quoted literal of ``text`` (NUL bytes, which no shell string can hold, dropped)."""
    return "'" + text.replace("\0", "").replace("'", "'\\''") + "'"


_NEEDS_ESCAPE = re.compile(rb"[\\\\\x80-\xff]")


def _ascii_escaped(command: str) -> bytes:
    """``command`` as ASCII for ``printf %b``: backslashes doubled, other bytes >= 0x80 as \\xHH."""
    data = command.replace("\0", "").encode("utf-8", errors="replace")
    return _NEEDS_ESCAPE.sub(lambda m: b"\\\\" if m.group() == b"\\" else b"\\x%02x" % m.group()[0], data)


def _with_here_document(command: str, body: str) -> str:
    """``command`` with ``body`` on its stdin through a here-document whose delimiter cannot occur in it."""
    delimiter = f"__HG_{secrets.token_hex(8)}"
    return f"{command} <<'{delimiter}'\n{body}\n{delimiter}"


def kill_process_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL a process group started with ``start_new_session=True`` and reap it.

    The direct children are killed first: a sandbox launcher (bwrap) then reaps its child (the
    pid namespace's init, in a session of its own) before dying itself, so no zombie is left to
    a host init that may reap late.
    """
    children = _children(proc.pid) if proc.poll() is None else []
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, 9)
    if children:
        _wait_for_exit(proc, 2)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, 9)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    _wait_for_exit(proc, 10)


def _wait_for_exit(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for ``proc`` to exit, at most ``timeout`` seconds, and reap it. A pidfd wakes us the
    moment it exits (``Popen.wait(timeout)`` polls with sleeps of up to 50 ms: a slower reset)."""
    if proc.poll() is not None:
        return
    try:
        handle = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
        return
    try:
        wait_for([handle], [], timeout)
    finally:
        os.close(handle)
    proc.poll()


def wait_for(readable: Sequence[int], writable: Sequence[int], timeout: float) -> tuple[list[int], list[int]]:
    """The descriptors of ``readable`` and ``writable`` that are ready within ``timeout`` seconds:
    poll(2), not select(2), which refuses any descriptor above 1023 (a process holding a few hundred
    sandboxes has thousands open). A hung-up or failed descriptor counts as ready (its read or
    write then tells what happened)."""
    poller = select.poll()
    for fd in readable:
        poller.register(fd, select.POLLIN)
    for fd in writable:
        poller.register(fd, select.POLLOUT | (select.POLLIN if fd in readable else 0))
    done = poller.poll(math.ceil(min(max(timeout, 0.0), _LONGEST_WAIT_S) * 1000))
    hung = select.POLLHUP | select.POLLERR | select.POLLNVAL
    read = [fd for fd, events in done if fd in readable and events & (select.POLLIN | hung)]
    write = [fd for fd, events in done if fd in writable and events & (select.POLLOUT | hung)]
    return read, write


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def run_oneshot(
    argv: Sequence[str],
    timeout_s: float,
    limit: int,
    env: Mapping[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    cwd: str | Path | None = None,
) -> CommandResult:
    """Run a command to completion with a time limit and capped output (used for grading).

    ``output`` is stdout alone (where a grader's verdict is read); stderr, kept apart so nothing a
    grader logs can pass for its verdict, is in ``extra["stderr"]``. ``pass_fds`` are handed to it
    (a sandbox's seccomp program, say); ``cwd``: its working folder (default: ours)."""
    started = time.perf_counter()
    proc = launch(
        lambda: subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=dict(env) if env is not None else None,
            pass_fds=tuple(pass_fds),
            cwd=cwd,
        )
    )
    # Read both streams as they come, keeping only a head and a tail of each (``communicate`` kept
    # everything: a graded program writing to the grader's stdout for the whole grading time could
    # fill the host's memory).
    out, err = CappedOutput(limit), CappedOutput(limit)
    readers = [
        threading.Thread(target=out.drain, args=(proc.stdout,), daemon=True),
        threading.Thread(target=err.drain, args=(proc.stderr,), daemon=True),
    ]
    for reader in readers:
        reader.start()
    # a pidfd wakes us as it exits: ``Popen.wait(timeout)`` sleeps up to 50 ms between checks, and
    # the end of a grading that takes 70 ms was seen 43 ms late
    _wait_for_exit(proc, timeout_s)
    timed_out = proc.poll() is None
    if timed_out:
        kill_process_group(proc)
    for reader in readers:
        reader.join(timeout=5)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    text, elided = ("", 0) if timed_out else out.text()
    return CommandResult(
        text,
        None if timed_out else proc.returncode,
        time.perf_counter() - started,
        timed_out=timed_out,
        elided_chars=elided,
        extra={"stderr": "" if timed_out else err.text()[0]},
    )


def _fence(nonce: str) -> str:
    """What the shell writes to stdout after a command's output in stderr status mode."""
    return f"__hg_fence_{nonce}__"


def join_output(head: bytes | bytearray, tail: bytes | bytearray, dropped: int, limit: int) -> tuple[str, int]:
    """Head and tail of an output, with a note where ``dropped`` bytes were cut from the middle."""
    if dropped:
        note = f"\n[... {dropped} bytes of output elided; showing the first and last {limit // 2} ...]\n"
        return head.decode(errors="replace") + note + tail.decode(errors="replace"), dropped
    return (bytes(head) + bytes(tail)).decode(errors="replace"), 0


def elide(data: bytes, limit: int) -> tuple[str, int]:
    half = max(limit // 2, 1)
    if len(data) <= 2 * half:
        return data.decode(errors="replace"), 0
    return join_output(data[:half], data[-half:], len(data) - 2 * half, limit)
