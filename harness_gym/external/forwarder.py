"""The host-side forwarder: the CLI's ``127.0.0.1:PORT`` inside the sandbox, served by the host.

The sandbox keeps no network, and nothing of the forwarder runs in it. :func:`listen_in_sandbox`
makes a TCP listening socket that lives in the sandbox's network namespace and nowhere else: a
short-lived helper process enters only that namespace (``setns(2)`` on ``/proc/<pid>/ns/net``; run
unprivileged, it first enters the user namespace that owns it, whose owner it is), binds
``127.0.0.1:PORT``, passes the socket back over a unix socket pair (``SCM_RIGHTS``) and exits. The
host process then accepts on it (``ModelProxy.serve_sandbox``): each connection the CLI opens is
served by the proxy's own threads, in the host's namespaces. So:

- no process of the forwarder is in the sandbox's pid namespace: the agent can neither see nor
  signal it, and the port is bound before the CLI starts, so the agent cannot take it (a second
  bind of the address fails with EADDRINUSE; the socket has no ``SO_REUSEPORT``);
- the proxy's unix socket is no longer shown in the sandbox at all;
- it dies with the episode: the socket is a descriptor of the host process (closed at the end of
  the episode, and by the kernel if the process is killed, even with ``kill -9``); the helper
  lives milliseconds and dies with its parent besides (``PR_SET_PDEATHSIG``), so nothing can be
  orphaned and no crash-recovery entry is needed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import sys
from typing import Any

from harness_gym.errors import SandboxError
from harness_gym.sandboxes.isolation import process_start_time

HELPER_TIMEOUT_S = 60.0  # a helper that has not passed the socket by then is killed (a loaded host takes ms)
BACKLOG = 64
NS_GET_USERNS = 0xB701  # ioctl(2) on a namespace: its owning user namespace (Linux >= 4.9)

# Run by ``python -I -S -c``: argv = net fd, user fd (-1: none), channel fd, host, port. It enters the
# sandbox's network namespace (its user namespace first when the network one refuses it: unprivileged),
# binds and listens there, and passes the listening socket back. Standard library and libc only.
_HELPER = r"""
import ctypes, os, socket, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, 9)  # PR_SET_PDEATHSIG = SIGKILL: never outlive the process that asked
net, user, channel, host, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
def enter(fd, kind, name):
    if libc.setns(fd, kind) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "setns(%s): %s" % (name, os.strerror(err)))
try:
    try:
        enter(net, 0x40000000, "net")  # CLONE_NEWNET
    except PermissionError:
        if user < 0:
            raise
        enter(user, 0x10000000, "user")  # CLONE_NEWUSER: its owner holds every capability in it
        enter(net, 0x40000000, "net")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((host, port))
    listener.listen(int(sys.argv[6]))
    socket.send_fds(socket.socket(fileno=channel), [b"ok"], [listener.fileno()])
except OSError as exc:
    sys.stderr.write("%s\n" % exc)
    sys.exit(1)
"""


class ForwarderError(SandboxError):
    """The sandbox's port could not be opened (no namespace of its own, a taken port, no privilege)."""


def listen_in_sandbox(sandbox: Any, port: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket on ``host:port`` inside ``sandbox``'s network namespace, held by this
    process. ``sandbox.network_pid()`` names a host pid in that namespace (the sandbox's shell under
    bubblewrap, the container's init under Docker)."""
    finder = getattr(sandbox, "network_pid", None)
    pid = finder() if finder is not None else None
    if pid is None:
        raise ForwarderError(f"{type(sandbox).__name__} has no process whose network namespace the forwarder can enter")
    return listen_in_namespace(int(pid), port, host)


def listen_in_namespace(pid: int, port: int, host: str = "127.0.0.1") -> socket.socket:
    """A listening TCP socket on ``host:port`` in the network namespace of host process ``pid``.
    Refuses the host's own namespace (a sandbox without one would expose the port on the host)."""
    started = process_start_time(pid)
    if started is None:
        raise ForwarderError(f"no process {pid} to take the network namespace of")
    fds: list[int] = []
    try:
        try:
            net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            fds.append(net)
            # the user namespace that owns the network one (bubblewrap nests the sandbox's processes
            # one user namespace deeper): the one whose capabilities setns(2) asks for
            user = fcntl.ioctl(net, NS_GET_USERNS)
            fds.append(user)
        except OSError as exc:
            raise ForwarderError(f"cannot open the namespaces of process {pid}: {exc}") from exc
        if process_start_time(pid) != started:  # the pid was reused meanwhile: these are another process's
            raise ForwarderError(f"process {pid} exited before its network namespace was opened")
        own = os.stat("/proc/self/ns/net")
        theirs = os.fstat(net)
        if (theirs.st_dev, theirs.st_ino) == (own.st_dev, own.st_ino):
            raise ForwarderError(
                f"process {pid} shares the host's network namespace: the sandbox has no network of its own"
            )
        same_user = os.fstat(user).st_ino == os.stat("/proc/self/ns/user").st_ino
        return _helper_listen(net, -1 if same_user else user, host, port)
    finally:
        for fd in fds:
            os.close(fd)


def _helper_listen(net: int, user: int, host: str, port: int) -> socket.socket:
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        passed = [fd for fd in (net, user, theirs.fileno()) if fd >= 0]
        argv = [sys.executable, "-I", "-S", "-c", _HELPER, str(net), str(user), str(theirs.fileno())]
        try:
            done = subprocess.run(
                [*argv, host, str(port), str(BACKLOG)],
                pass_fds=passed,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=HELPER_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise ForwarderError(f"the forwarder's helper did not open port {port} in {HELPER_TIMEOUT_S:g} s") from exc
        theirs.close()
        if done.returncode != 0:
            reason = done.stderr.decode(errors="replace").strip() or f"exit status {done.returncode}"
            raise ForwarderError(f"cannot listen on {host}:{port} in the sandbox: {reason}")
        mine.settimeout(5)
        try:
            _, received, _, _ = socket.recv_fds(mine, 16, 1)
        except OSError as exc:
            raise ForwarderError(f"the forwarder's helper passed no socket: {exc}") from exc
        if len(received) != 1:
            for fd in received:
                os.close(fd)
            raise ForwarderError("the forwarder's helper passed no socket")
        listener = socket.socket(fileno=received[0])
        if listener.family != socket.AF_INET or listener.getsockname() != (host, port):
            listener.close()
            raise ForwarderError(f"the forwarder's helper passed a socket other than {host}:{port}")
        return listener
    finally:
        with contextlib.suppress(OSError):
            theirs.close()
        mine.close()
