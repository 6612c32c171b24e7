"""Untrusted side of the repair grader: import the workspace, run the steps, report plain values.

Usage: ``python3 -I -B evaluate_calls.py RESULT_FD`` in the repository's folder, the program
(``[{"name", "steps": [{"run": code} | {"call": expr}]}]``) on stdin. For every test, one JSON line
``{"test", "outcomes": [...]}`` goes to RESULT_FD: ``{"ok": true}`` for a run step,
``{"value": python literal}`` or ``{"raised": [exception class names, most derived first]}``.

Nothing here is trusted: the workspace code runs in this process and may change anything in it.
It never sees what the steps are expected to give (the parent kept that, and compares), so the
best it can do is compute the right values, i.e. solve the task.
"""

import json
import math
import os
import sys


class Unrepresentable(Exception):
    pass


def literal(value, depth=0):
    """A Python literal for plain data, exact builtin types only (a subclass could lie in __eq__)."""
    kind = type(value)
    if depth > 50:
        raise Unrepresentable("too deep")
    if value is None or kind in (bool, int, str, bytes):
        return repr(value)
    if kind is float:
        if not math.isfinite(value):
            raise Unrepresentable("float " + repr(value))
        return repr(value)
    if kind in (list, tuple, set, frozenset):
        items = [literal(item, depth + 1) for item in value]
        if kind is list:
            return "[" + ", ".join(items) + "]"
        if kind is tuple:
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "{" + ", ".join(items) + "}" if items else "set()"
    if kind is dict:
        return "{" + ", ".join(literal(k, depth + 1) + ": " + literal(v, depth + 1) for k, v in value.items()) + "}"
    raise Unrepresentable(kind.__name__)


def exception_names(error):
    return [klass.__name__ for klass in type(error).__mro__]


def run_test(test):
    namespace = {"__name__": "__hidden_test__"}
    outcomes = []
    for step in test["steps"]:
        try:
            if "run" in step:
                exec(compile(step["run"], "<hidden step>", "exec"), namespace)
                outcomes.append({"ok": True})
                continue
            value = eval(compile(step["call"], "<hidden call>", "eval"), namespace)
            try:
                outcomes.append({"value": literal(value)})
            except (Unrepresentable, RecursionError) as error:
                outcomes.append({"unrepresentable": str(error)})
        except BaseException as error:  # noqa: BLE001 - every outcome is reported, SystemExit included
            outcomes.append({"raised": exception_names(error)})
            if "run" in step:
                break
    return outcomes


def main():
    results = os.fdopen(int(sys.argv[1]), "w", encoding="utf-8")
    program = json.load(sys.stdin)
    sys.path.insert(0, os.getcwd())
    for test in program:
        outcomes = run_test(test)
        results.write(json.dumps({"test": test["name"], "outcomes": outcomes}) + "\n")
        results.flush()
    results.close()


if __name__ == "__main__":
    main()
