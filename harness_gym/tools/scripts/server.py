"""The persistent tool server. Runs INSIDE the sandbox (python3 -I -S, standard library only).

Started once per shell, at the first tool call, by a launcher the shell forks before any agent code
runs; it inherits the shell's limits, user, namespaces and cgroups. Requests arrive on stdin and
replies leave on stdout, both pipes that only the host and this process hold (under bubblewrap the
process is non-dumpable, so the agent cannot reach them through /proc); the server moves them off
fds 0 and 1 at once, so no child it starts inherits them. Frames: a 4-byte big-endian length, then
UTF-8 JSON. A request ``{"id", "kind", ...}`` gets ``{"id", "output", "exit_code"}``; the host matches
the id and applies the output cap. Kinds: ``script`` (library.py / file_editor.py, in-process),
``inline`` (a spec's Python source, in a forked child so its state and output cannot touch the
server), ``write`` (write a file, making parent folders).
"""

import json
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

FRAME = struct.Struct(">I")


def seal():
    """Make this process non-dumpable: a process without CAP_SYS_PTRACE (the agent's, even as the
    same user, even as root in a container) then cannot open its pipes or memory through /proc.
    Bubblewrap's execute-only interpreter already does this; Docker's exec (as root) needs it."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except (OSError, AttributeError):
        pass


# The tool scripts, each imported at its first request: a warm spare primes a server for every
# episode, and many episodes call no tool (importing both at the start, OpenSSL through hashlib,
# subprocess, difflib, was 14 ms of CPU on a 21 ms interpreter start; traceback, for errors, too).
SCRIPTS = {"library.py": "library", "file_editor.py": "file_editor"}
# children run the system interpreter, not the sealed copy this server may run from
sys.executable = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def read_exact(fd, size):
    data = bytearray()
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def write_all(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def run_inline(source, payload, limit):
    """Fork; the child runs ``source`` as __main__ with sys.argv[1] naming a memory file of the payload."""
    data = json.dumps(payload).encode()
    payload_fd = os.memfd_create("payload")
    write_all(payload_fd, data)
    os.lseek(payload_fd, 0, os.SEEK_SET)
    out_read, out_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        status = 1
        try:
            os.dup2(payload_fd, 0)
            os.dup2(out_write, 1)
            os.dup2(out_write, 2)
            os.closerange(3, 1 << 16)
            sys.stdin = open(0, closefd=False)  # noqa: SIM115
            sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
            sys.stderr = sys.stdout
            sys.argv = ["inline_tool.py", "/dev/stdin"]
            status = 0
            exec(compile(source, "inline_tool.py", "exec"), {"__name__": "__main__"})
        except SystemExit as stop:
            code = stop.code
            status = code if isinstance(code, int) else (0 if code is None else 1)
            if code is not None and not isinstance(code, int):
                sys.stdout.write(f"{code}\n")
        except BaseException:
            import traceback

            traceback.print_exc()
            status = 1
        finally:
            try:
                sys.stdout.flush()
            finally:
                os._exit(status & 0xFF)
    os.close(out_write)
    os.close(payload_fd)
    head, size = bytearray(), 0
    while True:
        chunk = os.read(out_read, 1 << 16)
        if not chunk:
            break
        size += len(chunk)
        if len(head) < 2 * limit + 2:
            head += chunk
        else:  # keep a bounded head and the latest tail
            head = head[: limit + 1] + head[-(limit + 1) :] + chunk
    os.close(out_read)
    _, wait_status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(wait_status)
    return head.decode(errors="replace"), code if code >= 0 else 128 - code


def write_file(path, content):
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
        handle.write(content)
    return "", 0


def serve(request):
    kind = request.get("kind")
    limit = int(request.get("limit") or 30000)
    try:
        if kind == "script":
            module = SCRIPTS.get(request.get("script"))
            if module is None:
                return f"Error: no tool script {request.get('script')!r}\n", 1
            return __import__(module).handle(request.get("payload") or {})
        if kind == "inline":
            return run_inline(request.get("source") or "", request.get("payload") or {}, limit)
        if kind == "write":
            return write_file(request["path"], request.get("content") or "")
        return f"Error: unknown request kind {kind!r}\n", 1
    except OSError as error:
        return f"Error: {error}\n", 1
    except Exception:  # a tool bug must not take the server down
        import traceback

        return "Error: the tool failed:\n" + traceback.format_exc(limit=3), 1


def main():
    seal()
    requests, replies = os.dup(0), os.dup(1)  # non-inheritable copies; 0-2 become /dev/null
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    if "--announce" in sys.argv[1:]:  # the host waits for this byte: sealed before any agent code runs
        write_all(replies, b"S")
    while True:
        header = read_exact(requests, FRAME.size)
        if header is None:
            return
        body = read_exact(requests, FRAME.unpack(header)[0])
        if body is None:
            return
        try:
            request = json.loads(body)
        except ValueError:
            return
        output, status = serve(request)
        reply = json.dumps({"id": request.get("id"), "output": output, "exit_code": status}).encode()
        write_all(replies, FRAME.pack(len(reply)) + reply)


if __name__ == "__main__":
    main()
