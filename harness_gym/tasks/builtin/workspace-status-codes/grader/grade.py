import csv, hashlib, json, os, re, stat, subprocess

checks = {}

try:
    counts = json.load(open("status_counts.json"))
except (OSError, ValueError):
    counts = None
checks["counts"] = counts == {"200": 2, "500": 1, "201": 1, "404": 1, "503": 1}
text = (open('errors.txt').read() if os.path.exists('errors.txt') else None)
checks["errors"] = (text or "").split() == ["/api/items", "/api/report"]

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
