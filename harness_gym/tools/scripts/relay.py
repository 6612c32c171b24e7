"""The shell's warden under Docker. Runs INSIDE the container (python3 -I -S, standard library only).

Why: ``docker exec`` passes only stdin, stdout and stderr, and the shell runs as the agent's user,
dumpable: a process the agent leaves behind could open the shell's pipes through /proc, read the next
command and its nonce, and write that command's output, fence and status itself. This process starts
with the shell, before any agent code runs, and makes itself non-dumpable; it holds the exec's
three pipes, and the shell gets others: stdin a stream socket (commands forwarded from ours), stdout a
pipe (forwarded to ours), stderr a seqpacket socket with ``SO_PASSCRED``. A status record counts only
when the kernel says the shell itself sent it; the warden then forwards what the shell wrote before
it, its own fence (a secret the shell never sees) and the record. Its first line is ``hello <pid>
<secret>``; it exits with the shell's status.

    python3 -I -S relay.py /bin/sh
"""

import array
import contextlib
import ctypes
import os
import secrets
import select
import socket
import struct
import sys

CREDENTIALS = struct.calcsize("3i")


def seal():
    """Non-dumpable: the agent's processes (without CAP_SYS_PTRACE) cannot open our descriptors."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def drain(source, target):
    """Forward what ``source`` holds now (non-blocking); False at its end."""
    while True:
        try:
            chunk = os.read(source, 1 << 16)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        write_all(target, chunk)


def main():
    seal()
    shell = sys.argv[1]
    commands, shell_commands = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    status, shell_status = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    status.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    output_read, output_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.dup2(shell_commands.fileno(), 0)
        os.dup2(output_write, 1)
        os.dup2(shell_status.fileno(), 2)
        os.closerange(3, 1 << 16)
        os.execv(shell, [shell])
    shell_commands.close()
    shell_status.close()
    os.close(output_write)
    os.set_blocking(output_read, False)
    secret = secrets.token_hex(16)
    child = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    commands.setblocking(False)
    pending, queued = b"", b""
    host_open = True
    while True:
        watched = (
            [output_read, status.fileno()] + ([0] if host_open and not queued else []) + ([child] if child else [])
        )
        sending = [commands.fileno()] if queued else []
        ready, writable, _ = select.select(watched, sending, [], None if child else 0.1)
        if 0 in ready:
            queued = os.read(0, 1 << 16)
            if not queued:
                host_open = False
                commands.shutdown(socket.SHUT_WR)
        if queued and (writable or 0 in ready):
            with contextlib.suppress(BlockingIOError):
                queued = queued[commands.send(queued) :]
        if output_read in ready:
            drain(output_read, 1)
        if status.fileno() in ready:
            data, ancillary, _, _ = status.recvmsg(4096, socket.CMSG_SPACE(CREDENTIALS))
            sender = None
            for level, kind, payload in ancillary:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    sender = array.array("i", payload[:CREDENTIALS])[0]
            if sender == pid:  # the shell itself, not a process the agent started
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    word, _, value = line.partition(b" ")
                    if not word.isalnum() or not value.strip().lstrip(b"-").isdigit():
                        continue  # the shell's own complaints (a status record is `<nonce> <status>`)
                    drain(output_read, 1)  # what the shell wrote before this record
                    if word == b"hello":
                        write_all(2, b"hello %s %s\n" % (value, secret.encode()))
                    else:
                        write_all(1, b"__hg_fence_%s%s__" % (secret.encode(), word))
                        write_all(2, line + b"\n")
        done, code = os.waitpid(pid, os.WNOHANG)
        if done:
            drain(output_read, 1)
            code = os.waitstatus_to_exitcode(code)
            os._exit(code if code >= 0 else 128 - code)  # killed by a signal: as a shell reports it


if __name__ == "__main__":
    main()
