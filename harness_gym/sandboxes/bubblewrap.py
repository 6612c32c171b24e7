"""A local sandbox on bubblewrap: read-only system, writable workspace, no network, own pid namespace.

One ``bwrap`` process per episode runs a persistent bash. Commands are handed over through a
read-only control folder and ``source``d by that shell, so ``cd`` and ``export`` persist, and the
end of each command is recognised by a per-sandbox random marker carrying the exit status.
Killing the bwrap process group kills the pid namespace, so nothing the agent started survives.
"""

from __future__ import annotations

import contextlib
import json
import os
import posixpath
import secrets
import select
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from harness_gym.sandboxes.base import (
    CONTROL_DIR,
    GRADER_DIR,
    HARNESS_DIR,
    TOOLS_DIR,
    CommandResult,
    SandboxError,
    register_backend,
    tool_scripts_dir,
)

# Host folders made visible read-only inside the sandbox (only those that exist).
SYSTEM_DIRS: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
# Folders that are private and empty in every sandbox.
PRIVATE_TMPFS: tuple[str, ...] = ("/tmp", "/root", "/home", "/run", "/var/tmp")
SANDBOX_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_RESERVED = ("/usr", "/bin", "/sbin", "/lib", "/etc", "/proc", "/dev", "/sys", HARNESS_DIR)


def bubblewrap_available() -> bool:
    """True when the ``bwrap`` executable is on PATH."""
    return shutil.which("bwrap") is not None


def _require_bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxError(
            "bubblewrap is not installed, and harness_gym runs agent commands only inside a sandbox. "
            "Install it with `apt-get install -y bubblewrap` (Debian/Ubuntu), `dnf install bubblewrap` "
            "(Fedora) or `pacman -S bubblewrap` (Arch)."
        )
    return path


def check_mount_path(mount_path: str) -> str:
    """Validate where a workspace may be mounted: absolute, normalised, not over the system."""
    if not mount_path.startswith("/") or posixpath.normpath(mount_path) != mount_path or mount_path == "/":
        raise SandboxError(
            f"workspace mount path must be an absolute, normalised path other than '/', got {mount_path!r}"
        )
    for reserved in _RESERVED:
        if mount_path == reserved or mount_path.startswith(reserved + "/"):
            raise SandboxError(f"workspace mount path {mount_path!r} would cover the sandbox's own {reserved}")
    return mount_path


class BubblewrapSandbox:
    """A persistent bash inside bubblewrap. See the module docstring for the protocol."""

    def __init__(
        self,
        *,
        command_timeout_s: float = 60.0,
        output_limit_chars: int = 30_000,
        memory_mb: int = 4096,
        max_file_mb: int = 1024,
        max_open_files: int = 1024,
        cpu_time_s: int = 3600,
        python: str = "/usr/bin/python3",
        extra_ro_binds: Mapping[str, str] | None = None,
    ) -> None:
        self.command_timeout_s = command_timeout_s
        self.output_limit_chars = output_limit_chars
        self.memory_mb = memory_mb
        self.max_file_mb = max_file_mb
        self.max_open_files = max_open_files
        self.cpu_time_s = cpu_time_s
        self.python = python
        self.extra_ro_binds = dict(extra_ro_binds or {})
        self._bwrap = _require_bwrap()
        self._proc: subprocess.Popen[bytes] | None = None
        self._workspace: Path | None = None
        self._mount_path = ""
        self._control: Path | None = None
        self._marker = b""
        self.shell_pid: int | None = None
        self._finalizer: weakref.finalize | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, workspace: Path, mount_path: str) -> None:
        """Start the episode's shell with ``workspace`` mounted read-write at ``mount_path``."""
        self.close()
        self._workspace = Path(workspace).resolve()
        if not self._workspace.is_dir():
            raise SandboxError(f"workspace {workspace} is not a directory")
        self._mount_path = check_mount_path(mount_path)
        self._control = Path(tempfile.mkdtemp(prefix="harness-gym-ctl-"))
        self._finalizer = weakref.finalize(self, _cleanup, None, str(self._control))
        self._spawn()

    def close(self) -> None:
        """Kill every process of the sandbox and remove its control folder. Safe to call twice."""
        self._kill()
        if self._finalizer is not None:
            self._finalizer()
            self._finalizer = None
        self._control = None

    def __enter__(self) -> BubblewrapSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ commands

    def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        """Run ``command`` in the persistent shell; stdin is /dev/null, stderr joins stdout."""
        if self._proc is None or self._control is None:
            raise SandboxError("sandbox is not started; call start() first (the environment does this at reset)")
        timeout = self.command_timeout_s if timeout_s is None else timeout_s
        script = self._control / "command.sh"
        script.write_text(command + "\n", encoding="utf-8")
        start = time.perf_counter()
        self._send(
            f". {CONTROL_DIR}/command.sh </dev/null 2>&1\n__hg_status=$?\nprintf '\\n%s %d\\n' '{self._marker.decode()}' \"$__hg_status\"\n"
        )
        result, ended = self._collect(timeout, start)
        if ended == "done":
            return result
        return self._restart_after(result, timed_out=ended == "timeout", timeout=timeout)

    def run_tool(self, script: str, payload: Mapping[str, Any], timeout_s: float | None = None) -> CommandResult:
        """Run the harness tool script ``script`` (a file in TOOLS_DIR) with a JSON payload."""
        if self._control is None:
            raise SandboxError("sandbox is not started")
        (self._control / "payload.json").write_text(json.dumps(payload), encoding="utf-8")
        command = f"command {shlex.quote(self.python)} -I -S {TOOLS_DIR}/{script} {CONTROL_DIR}/payload.json"
        return self.run(command, timeout_s)

    def write_file(self, path: str, content: str) -> CommandResult:
        """Write a file from inside the sandbox (so a symlink planted by the agent cannot escape)."""
        if self._control is None:
            raise SandboxError("sandbox is not started")
        (self._control / "file.dat").write_text(content, encoding="utf-8")
        quoted = shlex.quote(path)
        return self.run(
            f'command mkdir -p -- "$(command dirname -- {quoted})" && command cat -- {CONTROL_DIR}/file.dat > {quoted}'
        )

    def grade(
        self, grader_files: Sequence[Path], command: str, timeout_s: float, env: Mapping[str, str] | None = None
    ) -> CommandResult:
        """Stop the agent's shell, then run ``command`` in a fresh sandbox with the grader files.

        The grader files are copied to a private folder mounted at GRADER_DIR, so nothing the agent
        left running can see or change them.
        """
        if self._workspace is None:
            raise SandboxError("sandbox is not started")
        self._kill()
        with tempfile.TemporaryDirectory(prefix="harness-gym-grader-") as copy:
            for source in grader_files:
                if Path(source).is_dir():
                    shutil.copytree(source, copy, dirs_exist_ok=True)
                else:
                    shutil.copy2(source, copy)
            argv = self._bwrap_argv(binds=[("--bind", copy, GRADER_DIR)], chdir=self._mount_path)
            argv += ["/bin/bash", "--noprofile", "--norc", "-c", self._limits_prefix() + command]
            proc_env = self._env()
            proc_env.update(env or {})
            start = time.perf_counter()
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=proc_env,
            )
            try:
                out, _ = proc.communicate(timeout=timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                _killpg(proc)
                out, _ = proc.communicate()
                timed_out = True
            text, elided = _elide(out, self.output_limit_chars)
            return CommandResult(
                text,
                None if timed_out else proc.returncode,
                time.perf_counter() - start,
                timed_out=timed_out,
                elided_chars=elided,
            )

    # ------------------------------------------------------------------ internals

    def _bwrap_argv(self, binds: Sequence[tuple[str, str, str]] = (), chdir: str = "/") -> list[str]:
        assert self._workspace is not None and self._control is not None
        argv = [
            self._bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-all",
            "--hostname",
            "sandbox",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
        ]
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        for path in PRIVATE_TMPFS:
            argv += ["--tmpfs", path]
        for host, inside in self.extra_ro_binds.items():
            argv += ["--ro-bind", host, inside]
        argv += ["--ro-bind", str(tool_scripts_dir()), TOOLS_DIR, "--ro-bind", str(self._control), CONTROL_DIR]
        for kind, host, inside in binds:
            argv += [kind, host, inside]
        argv += ["--bind", str(self._workspace), self._mount_path, "--chdir", chdir, "--"]
        return argv

    def _limits_prefix(self) -> str:
        return (
            f"ulimit -v {self.memory_mb * 1024} -f {self.max_file_mb * 1024} -n {self.max_open_files} "
            f"-t {self.cpu_time_s} -c 0 2>/dev/null; "
        )

    def _env(self) -> dict[str, str]:
        return {
            "PATH": SANDBOX_PATH,
            "HOME": "/root",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
        }

    def _spawn(self) -> None:
        self._marker = f"__HARNESS_GYM_DONE_{secrets.token_hex(8)}__".encode()
        argv = [*self._bwrap_argv(chdir=self._mount_path), "/bin/bash", "--noprofile", "--norc"]
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=self._env(),
            bufsize=0,
        )
        if self._finalizer is not None:
            self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _cleanup, self._proc, str(self._control))
        os.set_blocking(self._proc.stdout.fileno(), False)  # type: ignore[union-attr]
        self._send(self._limits_prefix() + "set +o history +o monitor; PS1=''; PS2=''\n")
        (self._control / "command.sh").write_text("echo $$\n")
        self._send(f". {CONTROL_DIR}/command.sh </dev/null 2>&1\nprintf '\\n%s %d\\n' '{self._marker.decode()}' $?\n")
        hello, ended = self._collect(30.0, time.perf_counter())
        if ended != "done" or hello.exit_code != 0:
            self._kill()
            raise SandboxError(f"bubblewrap could not start a shell: {hello.output.strip() or 'no output'}")
        self.shell_pid = int(hello.output.strip().splitlines()[-1])

    def _send(self, text: str) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        with contextlib.suppress(BrokenPipeError):  # a dead shell shows up as EOF in _collect
            self._proc.stdin.write(text.encode())

    def _collect(self, timeout: float, start: float) -> tuple[CommandResult, str]:
        """Read the shell's output until the end marker ('done'), a 'timeout' or end of file ('eof')."""
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        half = max(self.output_limit_chars // 2, 1)
        window = max(half, len(self._marker) + 32)
        head, tail, dropped = bytearray(), bytearray(), 0
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._partial(head, tail, dropped, start), "timeout"
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return self._partial(head, tail, dropped, start), "eof"
            tail += chunk
            at = tail.find(self._marker)
            if at >= 0:
                line_end = tail.find(b"\n", at)
                if line_end >= 0:
                    status = int(tail[at + len(self._marker) : line_end].strip() or b"0")
                    body = tail[:at]
                    if body.endswith(b"\n"):
                        body = body[:-1]
                    text, elided = _join(head, body, dropped, self.output_limit_chars)
                    return CommandResult(
                        text, status, time.perf_counter() - start, elided_chars=elided, pid=self.shell_pid
                    ), "done"
                continue
            if len(tail) > window:
                excess = len(tail) - window
                room = max(half - len(head), 0)
                head += tail[: min(room, excess)]
                dropped += max(excess - room, 0)
                del tail[:excess]

    def _partial(self, head: bytearray, tail: bytearray, dropped: int, start: float) -> CommandResult:
        text, elided = _join(head, tail, dropped, self.output_limit_chars)
        return CommandResult(text, None, time.perf_counter() - start, elided_chars=elided, pid=self.shell_pid)

    def _restart_after(self, partial: CommandResult, *, timed_out: bool, timeout: float) -> CommandResult:
        """Replace a shell that timed out or exited, and say so in the result."""
        status = None
        if not timed_out and self._proc is not None:
            try:
                status = self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                status = None
        self._kill()
        if timed_out:
            note = (
                f"The command timed out after {timeout:g} s; it and every process it started were killed. "
                "A new shell was started: the working directory and environment variables are reset."
            )
        else:
            note = (
                f"The shell exited (status {status}); a new shell was started: "
                "the working directory and environment variables are reset."
            )
        self._spawn()
        partial.exit_code = None if timed_out else status
        partial.timed_out, partial.note, partial.pid = timed_out, note, self.shell_pid
        return partial

    def _kill(self) -> None:
        if self._proc is not None:
            _killpg(self._proc)
            self._proc = None


def _killpg(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _cleanup(proc: subprocess.Popen[bytes] | None, control: str) -> None:
    """Finaliser: runs on close(), garbage collection or interpreter exit."""
    if proc is not None:
        _killpg(proc)
    shutil.rmtree(control, ignore_errors=True)


def _join(head: bytes, tail: bytes, dropped: int, limit: int) -> tuple[str, int]:
    """Head and tail of an output with a note where ``dropped`` bytes were cut from the middle."""
    if dropped:
        note = f"\n[... {dropped} bytes of output elided; showing the first and last {limit // 2} ...]\n"
        return head.decode(errors="replace") + note + tail.decode(errors="replace"), dropped
    return (bytes(head) + bytes(tail)).decode(errors="replace"), 0


def _elide(data: bytes, limit: int) -> tuple[str, int]:
    half = max(limit // 2, 1)
    if len(data) <= 2 * half:
        return data.decode(errors="replace"), 0
    return _join(data[:half], data[-half:], len(data) - 2 * half, limit)


register_backend("bubblewrap", BubblewrapSandbox)
