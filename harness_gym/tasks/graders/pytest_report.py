"""pytest plugin of the SWE-bench / R2E grader: test outcomes to a report file, not to stdout.

Loaded with ``-p pytest_report`` before any test or conftest is imported. The runner used to read
statuses from pytest's ``-rA`` text on stdout, which the code under test prints to as well
(``print("PASSED tests/test_x.py::test_y")`` passed a test). Here each outcome goes to the file
named by ``HARNESS_GYM_REPORT`` (opened at load, the variable then removed) as pytest reported it
(phase, outcome, xfail); the runner turns that into ``-rA``'s status names. The code under test
runs in this process, so this cannot be airtight; to catch the generic attack, references to the pytest and unittest functions that decide outcomes are
taken at load and compared before every report, and so are this module's own globals: a replaced
one marks the run as tampered. The hooks keep their helpers in a closure, and no status is decided
here (exploit patch-report-plugin).
"""

import json
import os
import sys
import unittest

import _pytest.python
import _pytest.reports
import _pytest.runner

_REPORT = open(os.environ.pop("HARNESS_GYM_REPORT"), "w", encoding="utf-8")  # noqa: SIM115 - open for the session
_GUARDED = {
    "_pytest.runner.call_and_report": (_pytest.runner, "call_and_report"),
    "_pytest.runner.runtestprotocol": (_pytest.runner, "runtestprotocol"),
    "_pytest.runner.CallInfo.from_call": (_pytest.runner.CallInfo, "from_call"),
    "_pytest.python.Function.runtest": (_pytest.python.Function, "runtest"),
    "_pytest.python.pytest_pyfunc_call": (_pytest.python, "pytest_pyfunc_call"),
    "_pytest.reports.TestReport.from_item_and_call": (_pytest.reports.TestReport, "from_item_and_call"),
    "unittest.TestCase.run": (unittest.TestCase, "run"),
    "unittest.TestCase.__call__": (unittest.TestCase, "__call__"),
    "unittest.TestResult.addFailure": (unittest.TestResult, "addFailure"),
    "unittest.TestResult.addError": (unittest.TestResult, "addError"),
}
_ORIGINAL = {name: owner.__dict__.get(attribute) for name, (owner, attribute) in _GUARDED.items()}


def _hooks(report_file, guarded, original, module):
    """The plugin's hooks, holding what they use in their closure (not in this module's globals,
    which the code under test can rebind): ``pytest_report._tampered = lambda: []`` changes nothing
    they call, and is itself reported (every global of this module is compared with its value at
    load). They write what pytest reported, not a status: the runner, in a process the code under
    test does not reach, turns it into one."""
    own: dict = {}

    def snapshot():
        own.update((name, value) for name, value in vars(module).items() if not name.startswith("__"))

    def tampered():
        found = {n for n, (owner, attr) in guarded.items() if owner.__dict__.get(attr) is not original[n]}
        now = {name: value for name, value in vars(module).items() if not name.startswith("__")}
        found.update(f"pytest_report.{name}" for name in set(own) | set(now) if now.get(name) is not own.get(name))
        return sorted(found)

    def write(record):
        report_file.write(json.dumps(record) + "\n")
        report_file.flush()

    def pytest_runtest_logreport(report):
        found = tampered()
        if found:
            write({"tampered": found})
        write(
            {
                "test": str(report.nodeid),
                "when": str(report.when),
                "outcome": str(report.outcome),
                "xfail": hasattr(report, "wasxfail"),
            }
        )

    def pytest_sessionfinish(session, exitstatus):
        found = tampered()
        if found:
            write({"tampered": found})
        write({"finished": True})

    return pytest_runtest_logreport, pytest_sessionfinish, snapshot


pytest_runtest_logreport, pytest_sessionfinish, _snapshot = _hooks(_REPORT, _GUARDED, _ORIGINAL, sys.modules[__name__])
_snapshot()  # last: every global this module has from here on
