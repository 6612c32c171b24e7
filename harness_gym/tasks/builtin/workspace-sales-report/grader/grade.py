"""Check report.json against the revenue computed from the original sales data (kept here, hidden)."""
import csv
import json
import os

GRADER = os.path.dirname(os.path.abspath(__file__))


def expected():
    by_region = {}
    with open(os.path.join(GRADER, "sales_original.csv"), newline="") as f:
        for row in csv.DictReader(f):
            by_region[row["region"]] = by_region.get(row["region"], 0) + int(row["units"]) * float(row["unit_price"])
    return {k: round(v, 2) for k, v in by_region.items()}


def main():
    want = expected()
    checks = {"report_exists": 0.0, "total_revenue": 0.0, "revenue_by_region": 0.0, "best_region": 0.0, "data_untouched": 0.0}
    with open(os.path.join(GRADER, "sales_original.csv"), "rb") as f:
        original = f.read()
    try:
        with open("data/sales.csv", "rb") as f:
            checks["data_untouched"] = 1.0 if f.read() == original else 0.0
    except OSError:
        pass
    try:
        with open("report.json") as f:
            report = json.load(f)
        checks["report_exists"] = 1.0
    except (OSError, ValueError):
        report = None
    if isinstance(report, dict):
        total = report.get("total_revenue")
        if isinstance(total, (int, float)) and abs(total - round(sum(want.values()), 2)) < 0.011:
            checks["total_revenue"] = 1.0
        got = report.get("revenue_by_region")
        if isinstance(got, dict) and set(got) == set(want) and all(
            isinstance(got[k], (int, float)) and abs(got[k] - want[k]) < 0.011 for k in want
        ):
            checks["revenue_by_region"] = 1.0
        if report.get("best_region") == max(want, key=want.get):
            checks["best_region"] = 1.0
    reward = 1.0 if all(v == 1.0 for v in checks.values()) else 0.0
    print(json.dumps({"reward": reward, "breakdown": checks}))


main()
