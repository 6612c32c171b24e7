"""Trusted grader for repository-repair tasks: hidden expectations never meet workspace code.

This process never imports anything from the workspace. It reads the declarative hidden tests
(``hidden_tests*.json`` next to it: per test, a list of steps ``{"run": code}`` or
``{"call": expr, "equals"|"approx"|"raises": expected}``), deletes them and the verdict key from
the grader folder, and gives only the *code* of the steps to an untrusted child
(``evaluate_calls.py``) that imports the workspace and reports, per step, the plain value or the
exception it got. This process compares those values with the expectations it kept, and prints
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
import subprocess
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


def run_child(program, timeout_s):
    """Run the untrusted child; returns (records by test name, the child's own output, note)."""
    result_read, result_write = os.pipe()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    child = subprocess.Popen(
        [sys.executable, "-I", "-B", os.path.join(GRADER, CHILD), str(result_write)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        pass_fds=(result_write,),
        env=env,
        start_new_session=True,
        preexec_fn=die_with_parent,
    )
    os.close(result_write)
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
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass
    child.wait()
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
    specs, key = take_secrets()
    if not specs:
        print("no hidden_tests*.json next to the grader", file=sys.stderr)
        sys.exit(2)
    program, expectations = build(specs)
    timeout_s = max(float(spec.get("timeout_s", DEFAULT_TIMEOUT_S)) for _, spec in specs)
    records, output, note = run_child(program, timeout_s)
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
