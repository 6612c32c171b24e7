"""Trusted grader for repository-repair tasks: hidden expectations never meet workspace code.

This process never imports anything from the workspace. It reads the declarative hidden tests
(``hidden_tests*.json`` next to it: per test, a list of steps ``{"run": code}`` or
``{"call": expr, "equals"|"approx"|"raises": expected}``), deletes them and the verdict key from
the grader folder, and gives only the *code* of the steps to an untrusted child
(``evaluate_calls.py``) that imports the workspace and reports, per step, the plain value or the
exception it got. The child is this interpreter forked before anything secret is read (one
interpreter start per grading, not two): it waits for its program on stdin, which is written only
once the expectations and the key are out of the folder, and holds nothing but code. This process compares those values with the expectations it kept, and prints
the verdict on its own stdout, signed (``verdict.py``: HMAC-SHA256 with the per-grading key the
host wrote), so a line printed by anything else (the child, a process it left behind) is no verdict.

Usage (from the repository's folder): ``python3 -I GRADER/run_hidden_tests.py``.
Prints one JSON line ``{"reward", "breakdown", "signature"}``; exits non-zero only when it
cannot grade at all (the host then scores 0 and reports a grader error).
"""

import ast
import glob
import json
import math
import os
import select
import signal
import sys
import threading
import time

GRADER = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True  # nothing of ours left in the folder the child can read
sys.path.insert(0, GRADER)  # run with -I: only this folder, and before any workspace code runs
from verdict import KEY_DIR, print_verdict, take_key  # noqa: E402

CHILD = "evaluate_calls.py"
RESULT_LIMIT = 4 << 20  # bytes of results the child may send
LOG_LIMIT = 64 << 10  # bytes of the child's own output kept for the grader log
LITERAL_LIMIT = 1 << 20
DEFAULT_TIMEOUT_S = 60.0


def take_secrets():
    """Load the expectations and the key, then remove them from the folder the child can read."""
    specs = []
    # in a grading sandbox the host shows them in the folder's writable KEY_DIR (the rest is read-only);
    # the task generator's checks on the host stage them at the top
    paths = sorted(glob.glob(os.path.join(GRADER, "hidden_tests*.json")))
    paths += sorted(glob.glob(os.path.join(GRADER, KEY_DIR, "hidden_tests*.json")))
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            specs.append((os.path.basename(path), json.load(handle)))
    key = take_key(GRADER)
    for path in paths:
        os.remove(path)  # an error here ends the grading (exit 1): never run the child beside them
    return specs, key


def build(specs):
    """The child's program (code only) and the parent's expectations, test by test."""
    program, expectations = [], {}
    several = len(specs) > 1
    for filename, spec in specs:
        for name, steps in spec["tests"].items():
            test = f"{filename[:-5]}.{name}" if several else name
            code = [{"run": spec.get("setup", "")}]
            expected = [None]
            for step in steps:
                if "run" in step:
                    code.append({"run": step["run"]})
                    expected.append(None)
                else:
                    code.append({"call": step["call"]})
                    expected.append(step)
            program.append({"name": test, "steps": code})
            expectations[test] = expected
    return program, expectations


def die_with_parent():
    """In the child before exec: SIGKILL when this grader dies (PR_SET_PDEATHSIG), so a child stuck in
    a loop never outlives a grader that was killed (a timeout on the host, in the generator's checks)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    except (ImportError, OSError, AttributeError):
        pass


class Child:
    """The untrusted child (:func:`fork_child`): its pid, stdin, output and results pipe."""

    def __init__(self, pid, stdin, stdout, results):
        self.pid, self.stdin, self.stdout, self.results = pid, stdin, stdout, results
        self.returncode = None

    def poll(self):
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self):
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode

    def kill(self):
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        self.wait()


def child_environment():
    """The child's whole environment (nothing of the grader's)."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}


def fork_child():
    """Fork the child while no secret is in this process. In the child: a session of its own,
    SIGKILL when this grader dies, stdin and stdout/stderr on pipes, the results pipe on fd 3 and no
    other descriptor, :func:`child_environment`, no grader module, and ``evaluate_calls.py`` run as
    ``__main__`` (it blocks reading its program from stdin)."""
    stdin_read, stdin_write = os.pipe()
    output_read, output_write = os.pipe()
    result_read, result_write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the grader's code
        code = 1
        try:
            os.setsid()
            die_with_parent()
            if os.getppid() != parent:  # the grader died before the request took effect
                os._exit(1)
            os.dup2(stdin_read, 0)
            os.dup2(output_write, 1)
            os.dup2(output_write, 2)
            os.dup2(result_write, 3)
            os.closerange(4, max(os.sysconf("SC_OPEN_MAX"), 1024))
            os.environ.clear()
            os.environ.update(child_environment())
            sys.path[:] = [entry for entry in sys.path if entry != GRADER]
            for name in ("verdict", "__main__"):
                sys.modules.pop(name, None)
            sys.argv = [os.path.join(GRADER, CHILD), "3"]
            import runpy

            runpy.run_path(sys.argv[0], run_name="__main__")
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else 1
        except BaseException:  # noqa: BLE001 - the child's own failure, reported on its output
            import traceback

            traceback.print_exc()
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            finally:
                os._exit(code)
    for fd in (stdin_read, output_write, result_write):
        os.close(fd)
    return Child(pid, os.fdopen(stdin_write, "wb"), os.fdopen(output_read, "rb"), result_read)


def run_child(child, program, timeout_s):
    """Feed the forked child its program; returns (records by test name, its own output, note)."""
    result_read = child.results
    data = json.dumps(program).encode()

    def feed():
        try:
            child.stdin.write(data)
            child.stdin.close()
        except OSError:
            pass

    threading.Thread(target=feed, daemon=True).start()
    results, output = bytearray(), bytearray()
    streams = {result_read: results, child.stdout.fileno(): output}
    limits = {result_read: RESULT_LIMIT, child.stdout.fileno(): LOG_LIMIT}
    deadline = time.monotonic() + timeout_s
    note = ""
    while streams:
        left = deadline - time.monotonic()
        if left <= 0:
            note = f"the tests did not finish within {timeout_s:g} s"
            break
        if child.poll() is not None:
            left = min(left, 0.2)  # the child is gone; drain what is there, do not wait on its leftovers
        ready, _, _ = select.select(list(streams), [], [], left)
        if not ready and child.poll() is not None:
            break
        for fd in ready:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                del streams[fd]
                continue
            room = limits[fd] - len(streams[fd])
            streams[fd] += chunk[: max(room, 0)]
    child.kill()
    os.close(result_read)
    records = {}
    for line in bytes(results).decode("utf-8", "replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("test"), str) and isinstance(record.get("outcomes"), list):
            records.setdefault(record["test"], record["outcomes"])
    return records, bytes(output).decode("utf-8", "replace"), note


def plain_value(outcome):
    """The reported value as plain Python data (never an object of the workspace's making)."""
    text = outcome.get("value")
    if not isinstance(text, str) or len(text) > LITERAL_LIMIT:
        raise ValueError("no value")
    return ast.literal_eval(text)


def step_passes(step, outcome):
    """Compare one step's reported outcome with its expectation (None: a run step)."""
    if not isinstance(outcome, dict):
        return False, "no outcome"
    raised = outcome.get("raised")
    if step is None:
        return (True, "") if outcome.get("ok") is True else (False, f"raised {raised}")
    if "raises" in step:
        if isinstance(raised, list) and step["raises"] in raised:
            return True, ""
        return False, f"expected {step['raises']}, got {raised or outcome.get('value')!r}"
    if raised is not None:
        return False, f"raised {raised}"
    try:
        value = plain_value(outcome)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False, f"not a plain value: {str(outcome)[:200]}"
    if "approx" in step:
        expected = ast.literal_eval(step["approx"])
        good = type(value) in (int, float) and math.isfinite(value) and round(value - expected, 7) == 0
    else:
        expected = ast.literal_eval(step["equals"])
        good = value == expected
    return good, "" if good else f"expected {expected!r}, got {value!r}"


def grade(expectations, records):
    breakdown, failures = {}, []
    for test, expected in expectations.items():
        outcomes = records.get(test, [])
        passed = True
        for index, step in enumerate(expected):
            good, why = step_passes(step, outcomes[index] if index < len(outcomes) else None)
            if not good:
                failures.append(f"{test} step {index}: {why}")
                passed = False
                break
        breakdown[test] = 1.0 if passed else 0.0
    reward = 1.0 if breakdown and all(v == 1.0 for v in breakdown.values()) else 0.0
    return reward, breakdown, failures


def main():
    child = fork_child()  # before any secret is read: the child's memory holds none
    try:
        specs, key = take_secrets()
    except BaseException:
        child.kill()
        raise
    if not specs:
        child.kill()
        print("no hidden_tests*.json next to the grader", file=sys.stderr)
        sys.exit(2)
    program, expectations = build(specs)
    timeout_s = max(float(spec.get("timeout_s", DEFAULT_TIMEOUT_S)) for _, spec in specs)
    records, output, note = run_child(child, program, timeout_s)
    reward, breakdown, failures = grade(expectations, records)
    log = [note] if note else []
    log += failures
    if output.strip():
        log.append("output of the tested code:\n" + output[-LOG_LIMIT:])
    if log:
        print("\n".join(log), file=sys.stderr)
    print_verdict(key, reward, breakdown)


if __name__ == "__main__":
    main()
