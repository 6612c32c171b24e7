"""Grades a SWE-bench / SWE-Gym instance or an R2E-Gym row INSIDE the task's image.

Usage: python runner.py GRADER_FOLDER, run from the repository (/testbed). The folder holds
``spec.json`` and, for SWE-bench, ``test.patch``. SWE-bench: apply the test patch, run the test
files with ``pytest -rA``, resolved when every FAIL_TO_PASS and PASS_TO_PASS test passes. R2E:
run the hidden tests with ``pytest -rA``; reward 1 only if every test's status matches the
expected output. Prints one JSON line {"reward", "breakdown", "signature"}: the key is taken
(``verdict.take_key``, next to this file) before anything of the repository runs.

Before the tests run, the runner's configuration (conftest.py, pytest.ini, ...; see
runner_config.py next to this file) is put back to the task's original (``GRADER/config``) and
stale bytecode is removed; the breakdown lists what was reverted. Outcomes come from the
``pytest_report`` plugin's report file, not from pytest's stdout (which the code under test can
print to). Run it as ``python3 -I -S runner.py GRADER`` so nothing of the repository (a
sitecustomize.py reachable through an editable install's .pth) loads into this process.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile


def apply_patch(path):
    for command in (["git", "apply", "-v", path], ["patch", "-p1", "--forward", "-i", path]):
        try:
            run = subprocess.run(command, capture_output=True, text=True)
        except FileNotFoundError:
            continue
        if run.returncode == 0:
            return True, ""
        last = run.stdout + run.stderr
    return False, last


def main():
    folder = sys.argv[1]
    sys.path.insert(0, folder)
    import runner_config  # next to this script, which runs with -I inside the sandbox: importable only now
    import verdict

    key = verdict.take_key(folder)
    reverted = runner_config.revert(os.path.join(folder, "config"), os.getcwd())
    with open(os.path.join(folder, "spec.json"), encoding="utf-8") as handle:
        spec = json.load(handle)
    if spec["kind"] == "swebench":
        # the test files as they were at the base commit (the agent may have changed or deleted them)
        pristine = os.path.join(folder, "pristine")
        for path in spec["test_paths"]:
            original = os.path.join(pristine, path)
            if os.path.isfile(original):
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
                shutil.copyfile(original, path)
            elif os.path.exists(path):
                os.remove(path)
        patch = os.path.join(folder, "test.patch")
        if os.path.getsize(patch):
            ok, log = apply_patch(patch)
            if not ok:
                print(log[-2000:], file=sys.stderr)
                verdict.print_verdict(key, 0.0, {"test_patch": "did not apply", "reverted": reverted})
                return
    found, tampered = run_tests(folder, spec)
    if spec["kind"] == "swebench":
        f2p = [t for t in spec["fail_to_pass"] if found.get(t) == "PASSED"]
        p2p = [t for t in spec["pass_to_pass"] if found.get(t) == "PASSED"]
        resolved = len(f2p) == len(spec["fail_to_pass"]) and len(p2p) == len(spec["pass_to_pass"])
        breakdown = {
            "fail_to_pass": f"{len(f2p)}/{len(spec['fail_to_pass'])}",
            "pass_to_pass": f"{len(p2p)}/{len(spec['pass_to_pass'])}",
        }
    else:
        expected = spec["expected"]
        matched = [t for t, status in expected.items() if _matches(found, t, status)]
        resolved = len(matched) == len(expected) and bool(expected)
        breakdown = {"matching_tests": f"{len(matched)}/{len(expected)}"}
    breakdown["reverted"] = reverted
    if tampered:
        resolved = False
        breakdown["tampered"] = tampered
    verdict.print_verdict(key, 1.0 if resolved else 0.0, breakdown)


def run_tests(folder, spec):
    """Run pytest with the report plugin; returns ({test: status}, [tampered functions])."""
    private = tempfile.mkdtemp(prefix="harness-gym-report-")
    report = os.path.join(private, "report.jsonl")
    env = dict(os.environ, HARNESS_GYM_REPORT=report, PYTHONDONTWRITEBYTECODE="1")
    env["PYTHONPATH"] = folder + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    command = [sys.executable, "-B", "-m", "pytest", "-rA", "-p", "no:cacheprovider", "-p", "pytest_report"]
    command += spec["test_paths"]
    try:
        run = subprocess.run(command, capture_output=True, text=True, timeout=spec.get("timeout", 1800), env=env)
        sys.stderr.write(run.stdout[-4000:] + run.stderr[-2000:])
    except subprocess.TimeoutExpired:
        sys.stderr.write("the tests timed out\n")
    found, tampered = {}, set()  # type: dict[str, str], set[str]
    try:
        with open(report, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except OSError:
        lines = []
    shutil.rmtree(private, ignore_errors=True)
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        tampered.update(record.get("tampered") or [])
        test, status = record.get("test"), _status(record)
        if isinstance(test, str) and isinstance(status, str) and found.get(test) not in ("FAILED", "ERROR"):
            found[test] = status
    return found, sorted(tampered)


def _status(record):
    """``-rA``'s status name of one report of the plugin (computed here, out of the tested code's
    process: the plugin only says what pytest reported), or None for a phase that names none."""
    when, outcome, xfail = record.get("when"), record.get("outcome"), record.get("xfail") is True
    if when == "call":
        if outcome == "passed":
            return "XPASS" if xfail else "PASSED"
        if outcome == "skipped":
            return "XFAIL" if xfail else "SKIPPED"
        return "FAILED" if outcome == "failed" else None
    if outcome == "failed":
        return "ERROR"
    if outcome == "skipped" and when == "setup":
        return "SKIPPED"
    return None


def _matches(found, test, status):
    """R2E names tests by their last parts; match on suffix."""
    for name, got in found.items():
        if name == test or name.endswith("::" + test) or name.endswith(test):
            return got == status
    return False


if __name__ == "__main__":
    main()
