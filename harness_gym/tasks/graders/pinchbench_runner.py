"""Runs a PinchBench task's automated checks INSIDE the grading sandbox.

The folder holds ``checks.py`` (the task's ``def grade(transcript, workspace_path) -> dict``) and
``payload.json`` (the transcript, in OpenClaw's event shape). Prints one JSON line:
{"reward": mean of the numeric scores, "breakdown": scores}. Values that are not numbers are
skipped, as PinchBench's own runner skips them, and listed under ``skipped_non_numeric``.
"""

import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    with open(os.path.join(HERE, "payload.json"), encoding="utf-8") as handle:
        payload = json.load(handle)
    namespace = {"__name__": "pinchbench_checks"}
    with open(os.path.join(HERE, "checks.py"), encoding="utf-8") as handle:
        exec(compile(handle.read(), "checks.py", "exec"), namespace)
    grade = namespace.get("grade")
    if not callable(grade):
        print("the automated checks define no grade(transcript, workspace_path) function", file=sys.stderr)
        sys.exit(2)
    scores = grade(payload["transcript"], os.getcwd())
    if not isinstance(scores, dict) or not scores:
        print(f"grade() must return a non-empty dict of scores, got {scores!r}", file=sys.stderr)
        sys.exit(2)
    values = {str(key): float(v) for key, v in scores.items() if isinstance(v, (int, float)) and math.isfinite(v)}
    skipped = sorted(str(key) for key in scores if str(key) not in values)
    if not values:
        print(f"grade() returned no numeric score: {scores!r}", file=sys.stderr)
        sys.exit(2)
    breakdown = dict(values, skipped_non_numeric=", ".join(skipped)) if skipped else values
    print(json.dumps({"reward": sum(values.values()) / len(values), "breakdown": breakdown}))


if __name__ == "__main__":
    main()
