import csv, hashlib, json, os, re, stat, subprocess

checks = {}

try:
    data = json.load(open("top_words.json"))
except (OSError, ValueError):
    data = None
checks["exists"] = data is not None
checks["top5"] = data == [["we", 5], ["shall", 3], ["fight", 2], ["on", 2], ["the", 2]]

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
