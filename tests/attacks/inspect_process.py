"""Try every way one process could read or write another one; print what happened, one JSON line.

Run inside a sandbox (and, for the control, on the host) as ``python3 inspect_process.py PID
[SECRET_PREFIX]``. With a prefix, it searches the target's memory for ``PREFIX`` followed by 32 hex
digits and prints what it found as ``"found"`` (how a program a grader runs would steal the
grader's expected answer). Standard library only.
"""

import ctypes
import errno
import json
import os
import platform
import re
import struct
import sys

libc = ctypes.CDLL(None, use_errno=True)
NUMBERS = {
    "x86_64": {"pidfd_getfd": 438, "perf_event_open": 298},
    "aarch64": {"pidfd_getfd": 438, "perf_event_open": 241},
}
numbers = NUMBERS[platform.machine()]


def outcome(value):
    """'ok' when the call worked, else the errno's name."""
    if value is None or value >= 0:
        return "ok"
    return errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))


def regions(pid):
    """Readable-writable memory regions of ``pid`` (None when its maps cannot be read)."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return None
    found = []
    for line in lines:
        fields = line.split()
        start, end = (int(x, 16) for x in fields[0].split("-"))
        if fields[1].startswith("rw") and end - start < (64 << 20):
            found.append((start, end))
    return found


def main():
    pid = int(sys.argv[1])
    prefix = sys.argv[2].encode() if len(sys.argv) > 2 else None
    report = {}
    pattern = re.compile(re.escape(prefix) + rb"[0-9a-f]{32}") if prefix else None
    some = regions(pid) or [(0x400000, 0x401000)]

    try:  # read its memory through /proc
        with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
            report["proc_mem_read"] = "ok"
            for start, end in some:
                try:
                    mem.seek(start)
                    data = mem.read(end - start)
                except OSError:
                    continue
                if pattern and pattern.search(data):
                    report["found"] = pattern.search(data).group().decode()
                    break
    except OSError as exc:
        report["proc_mem_read"] = errno.errorcode.get(exc.errno, str(exc.errno))
    try:  # write its memory through /proc
        fd = os.open(f"/proc/{pid}/mem", os.O_RDWR)
        os.close(fd)
        report["proc_mem_write"] = "ok"
    except OSError as exc:
        report["proc_mem_write"] = errno.errorcode.get(exc.errno, str(exc.errno))
    try:  # take over its standard output
        fd = os.open(f"/proc/{pid}/fd/1", os.O_WRONLY)
        os.close(fd)
        report["proc_fd_open"] = "ok"
    except OSError as exc:
        report["proc_fd_open"] = errno.errorcode.get(exc.errno, str(exc.errno))

    start = some[0][0]
    buffer = ctypes.create_string_buffer(64)
    local = struct.pack("PN", ctypes.addressof(buffer), 64)
    remote = struct.pack("PN", start, 64)
    libc.process_vm_readv.restype = ctypes.c_ssize_t
    report["process_vm_readv"] = outcome(libc.process_vm_readv(pid, local, 1, remote, 1, 0))
    libc.process_vm_writev.restype = ctypes.c_ssize_t  # writes back what it read: harmless where allowed
    report["process_vm_writev"] = outcome(libc.process_vm_writev(pid, local, 1, remote, 1, 0))

    libc.ptrace.restype = ctypes.c_long
    seized = libc.ptrace(0x4206, pid, None, None)  # PTRACE_SEIZE (does not stop the target)
    report["ptrace_seize"] = outcome(seized)
    if seized == 0:
        libc.ptrace(17, pid, None, None)  # PTRACE_DETACH
    attached = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH (stops it)
    report["ptrace_attach"] = outcome(attached)
    if attached == 0:
        os.waitpid(pid, 0x40000000)  # __WALL: until it has stopped, then let it go on
        libc.ptrace(17, pid, None, None)

    try:
        pidfd = os.pidfd_open(pid)
        report["pidfd_getfd"] = outcome(libc.syscall(numbers["pidfd_getfd"], pidfd, 1, 0))
    except OSError as exc:
        report["pidfd_getfd"] = "pidfd_open:" + errno.errorcode.get(exc.errno, str(exc.errno))

    attr = struct.pack("IIQ", 1, 128, 0) + bytes(128 - 16)  # PERF_TYPE_SOFTWARE, size, CPU clock
    report["perf_event_open"] = outcome(libc.syscall(numbers["perf_event_open"], attr, pid, -1, -1, 0))
    report["userfaultfd"] = outcome(libc.syscall({"x86_64": 323, "aarch64": 282}[platform.machine()], 0))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
