import csv, hashlib, json, os, re, stat, subprocess

checks = {}

try:
    rows = list(csv.reader(open("report.csv", newline="")))
except OSError:
    rows = None
checks["exists"] = rows is not None
checks["rows"] = rows == [["order_id", "name", "country", "amount"], ["2", "Ana", "PT", "5.00"], ["10", "Ben", "DE", "19.90"], ["11", "Ana", "PT", "42.00"]]

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
