"""A Docker sandbox: one container per episode from a given image, no network, memory and pids
limits, the same persistent-shell protocol as the local sandbox.

The container's lifecycle goes through the ``docker`` SDK. The interactive shell is a ``docker
exec -i`` of the Docker CLI, because the CLI demultiplexes the attach stream into plain pipes,
which is what the shell protocol reads. Containers carry labels naming their owner process; a
sandbox that starts removes containers whose owner died (cleanup after a crash), and every
container is removed on ``close()``, on garbage collection and at interpreter exit.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from harness_gym.sandboxes import isolation, seccomp
from harness_gym.sandboxes.base import (
    GRADER_INIT_DIR,
    GRADER_KEY_DIR,
    SANDBOX_HOME,
    TOOLS_DIR,
    CommandResult,
    SandboxError,
    grader_environment,
    grader_guard,
    grader_init_dir,
    register_backend,
    tool_scripts_dir,
)
from harness_gym.sandboxes.docker_support import KEEPALIVE, docker_client, missing_image
from harness_gym.sandboxes.options import DEFAULTS
from harness_gym.sandboxes.shell import CappedOutput, ShellSandbox, kill_process_group, wait_for

LABEL = "harness-gym"
OWNER_LABEL = "harness-gym.owner"  # "<hostname>:<pid>"
# Docker's default capabilities minus those a repository's tests do not need (CAP_SYS_PTRACE is
# never among them; the seccomp profile refuses the ptrace family besides).
CAPABILITIES = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID"]


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def remove_orphaned_containers(client: Any) -> int:
    """Remove harness-gym containers of dead owner processes on this host. Returns how many."""
    host = socket.gethostname()
    removed = 0
    # the low-level list carries the labels: no inspection per container, which fails with NotFound
    # when another sandbox removes its container meanwhile (parallel audits, vector envs)
    for container in client.api.containers(all=True, filters={"label": LABEL}):
        owner = (container.get("Labels") or {}).get(OWNER_LABEL, "")
        owner_host, _, pid = owner.rpartition(":")
        if owner_host != host or not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(Exception):
            client.api.remove_container(container["Id"], force=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DockerSandbox(ShellSandbox):
    """A persistent shell in a container of ``image``.

    Args:
        image: the image to run (must provide ``sh`` and ``sleep``; ``python3`` for file tools).
        memory_mb, max_processes: the container's memory and pids limits.
        cpus: optional CPU quota (e.g. 1.0).
        shell: the shell to run (``/bin/sh`` works with busybox; ``/bin/bash`` where available).
        docker_host: the engine's address (default: ``DOCKER_HOST`` or the default socket).
        extra_ro_binds: host folders shown read-only to the agent's container (host path -> container
            path), e.g. an external CLI's install tree; the grader's container does not get them.
    """

    def __init__(
        self,
        image: str | None = None,
        *,
        command_timeout_s: float = DEFAULTS.command_timeout_s,
        output_limit_chars: int = DEFAULTS.output_limit_chars,
        memory_mb: int = DEFAULTS.memory_mb,
        max_processes: int = DEFAULTS.max_processes,
        cpus: float | None = None,
        shell: str = "/bin/sh",
        python: str = "python3",
        docker_host: str | None = None,
        workspace_root: str | Path | None = None,
        extra_ro_binds: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(command_timeout_s=command_timeout_s, output_limit_chars=output_limit_chars)
        if not image:
            raise SandboxError(
                "the Docker sandbox needs an image: sandbox_options={'image': 'name:tag'} or a task image"
            )
        if shutil.which("docker") is None:
            raise SandboxError("the Docker sandbox needs the docker command-line client on PATH")
        self.image = image
        self.memory_mb = memory_mb
        self.max_processes = max_processes
        self.cpus = cpus
        self.shell = shell
        self.python = python
        self.docker_host = docker_host or os.environ.get("DOCKER_HOST")
        self.workspace_root = workspace_root
        self.extra_ro_binds = dict(extra_ro_binds or {})
        self.client = docker_client(self.docker_host)
        remove_orphaned_containers(self.client)
        self.container: Any = None
        self.workspace: Path | None = None
        self.limits = isolation.LimitReport(
            {"memory": f"docker --memory {memory_mb}m", "processes": f"docker --pids-limit {max_processes}"}
            | ({"cpu": f"docker --cpus {cpus:g}"} if cpus else {})
        )
        self._mount_path = ""
        self._state: dict[str, Any] = {"owner_pid": os.getpid()}
        weakref.finalize(self, _finalize, self._state)

    # ------------------------------------------------------------------ lifecycle

    def new_workspace(self) -> Path:
        self._release_workspace()
        self.workspace, _ = isolation.new_workspace(None, self.workspace_root)
        self._state["workspace"] = self.workspace
        return self.workspace

    def _prepare_start(self, hide: Sequence[str]) -> None:
        """A container with the workspace at the mount path; ``hide`` paths of the image (hidden
        tests, say) are deleted from this container before the agent's shell starts."""
        self._state["workspace"] = self.workspace
        self.container = self._run_container(KEEPALIVE, extra_volumes=self.extra_ro_binds)
        self._state["container"] = self.container
        if hide:
            result = self.container.exec_run(["rm", "-rf", "--", *hide], user="root")
            if result.exit_code != 0:
                raise SandboxError(
                    f"could not hide {list(hide)} in the container: {result.output.decode(errors='replace')}"
                )

    def _stop_agent(self) -> None:
        """Before grading: the agent's whole container goes (the grader gets a fresh one)."""
        self._stop()

    def _run_grader(
        self, folder: Path, mount: str, script: str, timeout_s: float, env: Mapping[str, str] | None
    ) -> CommandResult:
        """A fresh container that also mounts ``folder`` at ``mount``; processes left alive when the
        grader ends make it a grader error. The verdict is read from stdout alone."""
        started = time.perf_counter()
        container = self._run_container(
            [self.shell, "-c", grader_guard(), self.shell, script],  # leftovers are a grader error
            extra_volumes={
                str(folder): mount,  # read-only but for its key folder (the grader removes the key)
                str(folder / GRADER_KEY_DIR): f"{mount}/{GRADER_KEY_DIR}",
                str(grader_init_dir()): GRADER_INIT_DIR,
            },
            environment=grader_environment(env),
        )
        try:
            status = container.wait(timeout=timeout_s)["StatusCode"]
            timed_out = False
        except Exception:  # requests' ReadTimeout, surfaced through the SDK
            status, timed_out = None, True
        # streamed into a head and a tail: graded code flooding stdout must not fill the host's memory
        output, errors = CappedOutput(self.output_limit_chars), CappedOutput(self.output_limit_chars)
        if not timed_out:
            for chunk in container.logs(stdout=True, stderr=False, stream=True):
                output.add(chunk)
            for chunk in container.logs(stdout=False, stderr=True, stream=True):
                errors.add(chunk)
        with contextlib.suppress(Exception):
            container.remove(force=True)
        text, elided = output.text()
        return CommandResult(
            text,
            status,
            time.perf_counter() - started,
            timed_out=timed_out,
            elided_chars=elided,
            extra={"stderr": errors.text()[0]},
        )

    # ------------------------------------------------------------------ ShellSandbox

    status_channel = "stderr"  # `docker exec` passes only stdin, stdout and stderr

    def _shell_program(self) -> str:
        return self.shell

    @contextlib.contextmanager
    def _shell_command(self, shell_argv: list[str]) -> Iterator[tuple[list[str], Sequence[int]]]:
        """``docker exec`` of the shell in the episode's container (stdin, stdout and stderr only), under
        its warden (``tools/scripts/relay.py``: a process the agent leaves behind cannot answer for
        the shell) where the image has a Python, else alone."""
        warden = 'command -v "$1" >/dev/null 2>&1 && exec "$1" -I -S "$2" "$0"; exec "$0"'
        argv = ["docker", "exec", "-i", "-w", self._mount_path, self.container.id, self.shell, "-c", warden]
        yield [*argv, self.shell, self.python, f"{self.tools_dir}/relay.py"], ()

    def _shell_env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.docker_host:
            env["DOCKER_HOST"] = self.docker_host
        return env

    def _server_python(self) -> str | None:
        return self.python

    def _start_shell(self) -> None:
        """The shell, and with it the tool server (a second ``docker exec``), which announces itself
        once it is non-dumpable. Why not at the first tool call: Python runs for tens of ms before it
        can seal itself, and a process the agent left polling /proc opened the server's pipes in that
        window and answered every later tool call. Here nothing of the agent's is running yet (a new
        shell follows a ``kill -9 -1``). Without a Python in the image the tools fail as before."""
        server = self._launch_server()
        try:
            super()._start_shell()
        except BaseException:
            kill_process_group(server)
            raise
        assert self._channels is not None and server.stdin is not None and server.stdout is not None
        ready, _ = wait_for([server.stdout.fileno()], [], 30.0)
        if not ready or server.stdout.read(1) != b"S":
            kill_process_group(server)
            return
        channels = self._channels
        channels.server, channels.server_started = server, True
        channels.requests, channels.replies = os.dup(server.stdin.fileno()), os.dup(server.stdout.fileno())
        os.set_blocking(channels.requests, False)  # (what the tool-server exchange expects)
        os.set_blocking(channels.replies, False)

    def network_pid(self) -> int | None:
        """The container's init, as the engine reports it (its network namespace is the container's
        for the container's whole life); None without a container or with an engine on another host."""
        if self.container is None or (self.docker_host and not self.docker_host.startswith("unix://")):
            return None
        try:
            pid = self.client.api.inspect_container(self.container.id)["State"]["Pid"]
        except Exception:  # the container is gone
            return None
        return int(pid) if isinstance(pid, int) and pid > 0 else None

    def _spawn_server(self, server_python: str) -> subprocess.Popen[bytes] | None:
        """None: Docker's tool server starts only with the shell (:meth:`_start_shell`); one started
        later could be caught by the agent's processes before it seals itself."""
        return None

    def _launch_server(self) -> subprocess.Popen[bytes]:
        """The persistent tool server as a second ``docker exec`` (it makes itself non-dumpable, so the
        agent's processes, without CAP_SYS_PTRACE, cannot reach its pipes through /proc), announcing
        itself once sealed."""
        argv = ["docker", "exec", "-i", "-w", self._mount_path, self.container.id]
        argv += [self.python, "-I", "-S", f"{self.tools_dir}/server.py", "--announce"]
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env=self._shell_env(),
            bufsize=0,
        )

    def _kill_all(self) -> None:
        """Kill the exec'd shell and every process in the container except its keep-alive init."""
        super()._kill_all()
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.exec_run(["kill", "-9", "-1"])

    # ------------------------------------------------------------------ internals

    def _run_container(
        self, command: list[str], extra_volumes: Mapping[str, str], environment: Mapping[str, str] | None = None
    ) -> Any:
        assert self.workspace is not None
        volumes = {
            str(self.workspace): {"bind": self._mount_path, "mode": "rw"},
            str(tool_scripts_dir()): {"bind": TOOLS_DIR, "mode": "ro"},
        }
        for host, inside in extra_volumes.items():
            volumes[host] = {"bind": inside, "mode": "rw" if inside.endswith(f"/{GRADER_KEY_DIR}") else "ro"}
        options: dict[str, Any] = {
            "detach": True,
            "network_mode": "none",
            "mem_limit": f"{self.memory_mb}m",
            "memswap_limit": f"{self.memory_mb}m",
            "pids_limit": self.max_processes,
            "labels": {LABEL: "1", OWNER_LABEL: _owner()},
            "volumes": volumes,
            "working_dir": self._mount_path,
            "environment": {"HOME": SANDBOX_HOME, "LANG": "C.UTF-8", "TERM": "dumb", **(environment or {})},
            "cap_drop": ["ALL"],
            "cap_add": CAPABILITIES,
            "security_opt": ["no-new-privileges", f"seccomp={seccomp.docker_profile()}"],
        }
        if self.cpus:
            options["nano_cpus"] = int(self.cpus * 1e9)
        try:
            return self.client.containers.run(self.image, command, **options)
        except Exception as exc:
            raise missing_image(self.image, exc) or SandboxError(
                f"cannot start a container from image {self.image!r}: {exc}"
            ) from exc

    def _stop(self) -> None:
        ShellSandbox._kill_all(self)  # the exec'd shell and the host ends of its pipes
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.remove(force=True)
            self.container = None
        self._state["container"] = None

    def _release_workspace(self) -> None:
        if self.workspace is not None:
            isolation.release_workspace(self.workspace)
            self.workspace = None
        self._state["workspace"] = None


def _finalize(state: dict[str, Any]) -> None:
    if state.get("owner_pid") != os.getpid():
        return  # a forked child must not remove its parent's container and workspace
    container = state.get("container")
    if container is not None:
        with contextlib.suppress(Exception):
            container.remove(force=True)
    for key in ("control", "workspace"):
        if state.get(key) is not None:
            isolation.release_workspace(Path(state[key]))


register_backend("docker", DockerSandbox)
