import csv, hashlib, json, os, re, stat, subprocess

checks = {}

expected = [["id", "name", "email"], ["1", "Ada", "ada@example.org"], ["2", "Lin, Mei", "mei@example.org"], ["3", "Bo", ""]]
try:
    rows = list(csv.reader(open("users.csv", newline="")))
except OSError:
    rows = None
checks["csv_exists"] = rows is not None
checks["rows_match"] = rows == expected

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
