"""The persistent-shell protocol shared by process-based sandboxes (bubblewrap, Docker).

A backend starts a shell process whose stdin and stdout are pipes. Commands are written to a
control folder that the sandbox sees read-only at CONTROL_DIR and ``source``d by the shell, so
``cd`` and ``export`` persist; stdin is /dev/null and stderr joins stdout. The end of each command
is recognised by a per-shell random marker that carries the exit status. Output is capped with
head/tail elision. A command that outlives its timeout takes the whole process tree with it and a
new shell is started; the result says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import select
import shlex
import shutil
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from harness_gym.sandboxes.base import CONTROL_DIR, TOOLS_DIR, CommandResult, SandboxError

_S = TypeVar("_S", bound="ShellSandbox")


class ShellSandbox(ABC):
    """Base of sandboxes that run one persistent shell per episode. Subclasses say how to start
    the shell (:meth:`_spawn_shell`), how to kill everything (:meth:`_kill_all`), and how to grade."""

    python = "python3"
    # where the sandbox sees the harness's folders (a backend without mounts overrides these)
    control_dir = CONTROL_DIR
    tools_dir = TOOLS_DIR

    def __init__(self, *, command_timeout_s: float = 60.0, output_limit_chars: int = 30_000) -> None:
        self.command_timeout_s = command_timeout_s
        self.output_limit_chars = output_limit_chars
        self._proc: subprocess.Popen[bytes] | None = None
        self._control: Path | None = None
        self._marker = b""
        self.shell_pid: int | None = None

    # ------------------------------------------------------------------ to implement

    @abstractmethod
    def _spawn_shell(self) -> subprocess.Popen[bytes]:
        """Start the shell process (stdin/stdout pipes, stderr joined to stdout)."""

    def _kill_all(self) -> None:
        """Kill the shell and every process it started (its process group; backends add to this)."""
        if self._proc is not None:
            kill_process_group(self._proc)
            self._proc = None

    @abstractmethod
    def _stop(self) -> None:
        """End the episode's processes and release what they held (the workspace stays)."""

    @abstractmethod
    def _release_workspace(self) -> None:
        """Remove the workspace folder."""

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
        if self._proc is None or self._control is None:
            raise SandboxError("sandbox is not started; call start() first (the environment does this at reset)")
        timeout = self.command_timeout_s if timeout_s is None else timeout_s
        (self._control / "command.sh").write_text(command + "\n", encoding="utf-8")
        started = time.perf_counter()
        self._send_command()
        result, ended = self._collect(timeout, started)
        if ended == "done":
            return result
        return self._restart_after(result, timed_out=ended == "timeout", timeout=timeout)

    def run_tool(self, script: str, payload: Mapping[str, Any], timeout_s: float | None = None) -> CommandResult:
        """Run the harness tool script ``script`` (in TOOLS_DIR) with a JSON payload file."""
        if self._control is None:
            raise SandboxError("sandbox is not started")
        (self._control / "payload.json").write_text(json.dumps(payload), encoding="utf-8")
        command = f"command {shlex.quote(self.python)} -I -S {self.tools_dir}/{script} {self.control_dir}/payload.json"
        return self.run(command, timeout_s)

    def run_inline(self, source: str, payload: Mapping[str, Any], timeout_s: float | None = None) -> CommandResult:
        """Run a spec's inline Python tool ``source`` inside the sandbox with a JSON payload file."""
        if self._control is None:
            raise SandboxError("sandbox is not started")
        (self._control / "inline_tool.py").write_text(source, encoding="utf-8")
        (self._control / "payload.json").write_text(json.dumps(payload), encoding="utf-8")
        command = (
            f"command {shlex.quote(self.python)} -I {self.control_dir}/inline_tool.py {self.control_dir}/payload.json"
        )
        return self.run(command, timeout_s)

    def write_file(self, path: str, content: str) -> CommandResult:
        """Write a file from inside the sandbox (so a symlink planted by the agent cannot escape)."""
        if self._control is None:
            raise SandboxError("sandbox is not started")
        (self._control / "file.dat").write_text(content, encoding="utf-8")
        quoted = shlex.quote(path)
        return self.run(
            f'command mkdir -p -- "$(command dirname -- {quoted})" && command cat -- {self.control_dir}/file.dat > {quoted}'
        )

    # ------------------------------------------------------------------ lifecycle helpers

    def _open_control(self) -> Path:
        self._control = Path(tempfile.mkdtemp(prefix="harness-gym-ctl-"))
        return self._control

    def _close_control(self) -> None:
        if self._control is not None:
            shutil.rmtree(self._control, ignore_errors=True)
            self._control = None

    def _start_shell(self) -> None:
        """Start a shell and check that it answers; raise SandboxError with its output if not."""
        self._marker = f"__HARNESS_GYM_DONE_{secrets.token_hex(8)}__".encode()
        self._proc = self._spawn_shell()
        os.set_blocking(self._proc.stdout.fileno(), False)  # type: ignore[union-attr]
        self._send(self._shell_setup())
        assert self._control is not None
        (self._control / "command.sh").write_text("echo $$\n")
        self._send_command()
        hello, ended = self._collect(30.0, time.perf_counter())
        if ended != "done" or hello.exit_code != 0:
            self._kill_all()
            raise SandboxError(f"{type(self).__name__} could not start a shell: {hello.output.strip() or 'no output'}")
        self.shell_pid = int(hello.output.strip().splitlines()[-1])

    def _send_command(self) -> None:
        marker = self._marker.decode()
        self._send(
            f". {self.control_dir}/command.sh </dev/null 2>&1\n__hg_status=$?\nprintf '\\n%s %d\\n' '{marker}' \"$__hg_status\"\n"
        )

    def _send(self, text: str) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # a dead shell shows up as EOF in _collect
            self._proc.stdin.write(text.encode())
            self._proc.stdin.flush()

    def _collect(self, timeout: float, started: float) -> tuple[CommandResult, str]:
        """Read output until the end marker ('done'), a 'timeout' or end of file ('eof')."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        half = max(self.output_limit_chars // 2, 1)
        window = max(half, len(self._marker) + 32)
        head, tail, dropped = bytearray(), bytearray(), 0
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._partial(head, tail, dropped, started), "timeout"
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                return self._partial(head, tail, dropped, started), "eof"
            tail += chunk
            at = tail.find(self._marker)
            if at >= 0:
                line_end = tail.find(b"\n", at)
                if line_end >= 0:
                    status = int(tail[at + len(self._marker) : line_end].strip() or b"0")
                    body = tail[:at]
                    if body.endswith(b"\n"):
                        body = body[:-1]
                    text, elided = join_output(head, body, dropped, self.output_limit_chars)
                    return CommandResult(
                        text, status, time.perf_counter() - started, elided_chars=elided, pid=self.shell_pid
                    ), "done"
                continue
            if len(tail) > window:
                excess = len(tail) - window
                room = max(half - len(head), 0)
                head += tail[: min(room, excess)]
                dropped += max(excess - room, 0)
                del tail[:excess]

    def _partial(self, head: bytearray, tail: bytearray, dropped: int, started: float) -> CommandResult:
        text, elided = join_output(head, tail, dropped, self.output_limit_chars)
        return CommandResult(text, None, time.perf_counter() - started, elided_chars=elided, pid=self.shell_pid)

    def _restart_after(self, partial: CommandResult, *, timed_out: bool, timeout: float) -> CommandResult:
        """Replace a shell that timed out or exited, and say so in the result."""
        status = None
        if not timed_out and self._proc is not None:
            try:
                status = self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                status = None
        self._kill_all()
        if timed_out:
            note = (
                f"The command timed out after {timeout:g} s; it and every process it started were killed. "
                "A new shell was started: the working directory and environment variables are reset."
            )
        else:
            note = (
                f"The shell exited (status {status}); every process it started was killed and a new shell "
                "was started: the working directory and environment variables are reset."
            )
        self._start_shell()
        partial.exit_code = None if timed_out else status
        partial.timed_out, partial.note, partial.pid = timed_out, note, self.shell_pid
        return partial


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
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, 9)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except (OSError, ValueError):
        return []


def run_oneshot(
    argv: Sequence[str], timeout_s: float, limit: int, env: Mapping[str, str] | None = None
) -> CommandResult:
    """Run a command to completion with a time limit and capped output (used for grading).

    ``output`` is stdout alone (where a grader's verdict is read); stderr, kept apart so nothing a
    grader logs can pass for its verdict, is in ``extra["stderr"]``."""
    started = time.perf_counter()
    proc = subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=dict(env) if env is not None else None,
    )
    try:
        out, err = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        kill_process_group(proc)
        out, err, timed_out = b"", b"", True
    text, elided = elide(out or b"", limit)
    return CommandResult(
        text,
        None if timed_out else proc.returncode,
        time.perf_counter() - started,
        timed_out=timed_out,
        elided_chars=elided,
        extra={"stderr": elide(err or b"", limit)[0]},
    )


def join_output(head: bytes, tail: bytes, dropped: int, limit: int) -> tuple[str, int]:
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
