"""pytest plugin of the SWE-bench / R2E grader: test outcomes to a report file, not to stdout.

Loaded with ``-p pytest_report`` before any test or conftest is imported. The runner used to read
statuses from pytest's ``-rA`` text on stdout, which the code under test prints to as well
(``print("PASSED tests/test_x.py::test_y")`` passed a test). Here each outcome goes to the file
named by ``HARNESS_GYM_REPORT`` (opened at load, the variable then removed), with the status
names of ``-rA``. The code under test runs in this process, so this cannot be airtight; to catch
the generic attack, references to the pytest and unittest functions that decide outcomes are
taken at load and compared before every report: a replaced one marks the run as tampered.
"""

import json
import os
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


def _tampered():
    return sorted(n for n, (owner, attr) in _GUARDED.items() if owner.__dict__.get(attr) is not _ORIGINAL[n])


def _write(record):
    _REPORT.write(json.dumps(record) + "\n")
    _REPORT.flush()


def _status(report):
    xfail = hasattr(report, "wasxfail")
    if report.when == "call":
        if report.passed:
            return "XPASS" if xfail else "PASSED"
        if report.skipped:
            return "XFAIL" if xfail else "SKIPPED"
        return "FAILED"
    if report.failed:
        return "ERROR"
    if report.skipped and report.when == "setup":
        return "SKIPPED"
    return None


def pytest_runtest_logreport(report):
    tampered = _tampered()
    if tampered:
        _write({"tampered": tampered})
    status = _status(report)
    if status is not None:
        _write({"test": report.nodeid, "status": status})


def pytest_sessionfinish(session, exitstatus):
    tampered = _tampered()
    if tampered:
        _write({"tampered": tampered})
    _write({"finished": True})
