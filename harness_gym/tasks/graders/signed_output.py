"""Runs a grade command that cannot sign its verdict (ClawGym's ``reward.sh``, a task's own
script) INSIDE the grading sandbox, and signs what it printed (standard library only).

Usage: ``python3 -I signed_output.py GRADER_FOLDER SHELL LIMIT COMMAND``. The key is taken first
(``verdict.take_key``: this process becomes non-dumpable and the key file is gone before the
command runs). The command's stdout goes to a pipe this process reads (a file's offset could be
moved back by the graded code). This process is a child subreaper, so everything the command starts stays its
descendant however it forks; when the command ends, a descendant still alive (a daemon, or a
process whose main thread exited while another thread writes) makes the grading a grader error
(status 125): nothing the graded code started is alive when the output is read. Then the output's
tail and one line ``{"harness_gym_output_signature": HMAC(key, "<status>\\n" + tail), "status"}``
are printed; the host accepts only the text that line signs (``tasks/base.py``). All of it fits in
LIMIT bytes, the sandbox's output cap (a longer output would be cut in its middle by the host and
no longer match its signature: an honest grading scoring 0).
"""

import contextlib
import ctypes
import hashlib
import hmac
import importlib.util
import json
import os
import subprocess
import sys
import threading

LEFTOVER_STATUS = 125
TAIL_CHARS = 16000  # what the reader thread keeps at least of the command's output (the verdict is its last lines)
SIGNATURE_ROOM = 256  # bytes of LIMIT kept for the signature line
SIGNATURE_KEY = "harness_gym_output_signature"


def _verdict_module():
    """verdict.py of the built-in graders, copied beside this file under a name no task's file has."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".harness_gym_verdict.py")
    spec = importlib.util.spec_from_file_location("harness_gym_verdict", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def signed_text(key, status, text):
    return hmac.new(key, (f"{status}\n" + text).encode("utf-8"), hashlib.sha256).hexdigest()


def descendants_alive():
    """Whether any descendant is still alive, reaping the dead: a subreaper's descendants that lost
    their parent become its children, so no child left means none left. A process whose main
    thread exited while another runs cannot be reaped: it counts as alive."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


class Tail:
    """The last TAIL_CHARS-odd bytes of a pipe, read in a thread (a grader flooding its stdout
    neither blocks on a full pipe nor fills this process's memory)."""

    def __init__(self, fd):
        self.fd, self.data, self.dropped = fd, bytearray(), 0
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while True:
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                return
            self.data += chunk
            if len(self.data) > 8 * TAIL_CHARS:
                self.dropped += len(self.data) - 4 * TAIL_CHARS
                del self.data[: len(self.data) - 4 * TAIL_CHARS]


def fitted(data, dropped, limit):
    """The output's tail as text whose UTF-8 form, elision note included, is at most ``limit`` bytes."""
    text = data.decode("utf-8", errors="replace").replace("\r", "\n").encode("utf-8")
    if not text.endswith(b"\n") and text:
        text += b"\n"
    if dropped or len(text) > limit:
        keep = max(limit - 64, 0)  # room for the note
        dropped += len(text) - min(keep, len(text))
        text = text[len(text) - keep :] if keep else b""
        note = f"[... {dropped} bytes of the grader's output elided ...]\n".encode()
        text = note[:limit] + text
    return text.decode("utf-8", errors="ignore")  # a character cut at the start goes whole


def main():
    folder, shell, limit, command = sys.argv[1:5]
    key = _verdict_module().take_key(folder)
    # PR_SET_CHILD_SUBREAPER; where it fails, the sandbox's guard still refuses leftovers
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)
    # a pipe, not a file: a file's offset is shared with the graded code, which could move it back so
    # the grader's verdict overwrites padding instead of following a forged line (exploit rewind-stdout)
    read_end, write_end = os.pipe()
    child = subprocess.Popen([shell, "-c", command], stdout=write_end)
    os.close(write_end)
    tail = Tail(read_end)
    status = child.wait()
    if descendants_alive():
        print(
            "harness-gym: processes the grade command started were still running when it ended;"
            " they could write after its verdict, so it is not trusted",
            file=sys.stderr,
        )
        sys.exit(LEFTOVER_STATUS)
    tail.thread.join()  # no process that could hold the pipe is alive: it is at its end
    text = fitted(bytes(tail.data), tail.dropped, max(int(limit) - SIGNATURE_ROOM, 0))
    sys.stdout.write(text)
    if key is not None:
        sys.stdout.write(json.dumps({SIGNATURE_KEY: signed_text(key, status, text), "status": status}) + "\n")
    sys.stdout.flush()
    sys.exit(status if status >= 0 else 128 - status)  # killed by a signal: 128 + its number, as a shell says


if __name__ == "__main__":
    main()
