"""Grades a SWE-bench / SWE-Gym instance or an R2E-Gym row INSIDE the task's image.

Usage: python runner.py GRADER_FOLDER, run from the repository (/testbed). The folder holds
``spec.json`` and, for SWE-bench, ``test.patch``. SWE-bench: apply the test patch, run the test
files with ``pytest -rA``, resolved when every FAIL_TO_PASS and PASS_TO_PASS test passes. R2E:
run the hidden tests with ``pytest -rA``; reward 1 only if every test's status matches the
expected output. Prints one JSON line {"reward", "breakdown"}.
"""

import json
import os
import re
import shutil
import subprocess
import sys

_STATUS = re.compile(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\s+(\S+)", re.MULTILINE)


def statuses(output):
    found = {}
    for status, test in _STATUS.findall(output):
        found.setdefault(test, status)
    return found


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
                print(json.dumps({"reward": 0.0, "breakdown": {"test_patch": "did not apply"}}))
                return
    command = [sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", *spec["test_paths"]]
    run = subprocess.run(command, capture_output=True, text=True, timeout=spec.get("timeout", 1800))
    sys.stderr.write(run.stdout[-4000:] + run.stderr[-2000:])
    found = statuses(run.stdout)
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
    print(json.dumps({"reward": 1.0 if resolved else 0.0, "breakdown": breakdown}))


def _matches(found, test, status):
    """R2E names tests by their last parts; match on suffix."""
    for name, got in found.items():
        if name == test or name.endswith("::" + test) or name.endswith(test):
            return got == status
    return False


if __name__ == "__main__":
    main()
