import csv, hashlib, json, os, re, stat, subprocess

checks = {}

try:
    data = json.load(open("settings.json"))
except (OSError, ValueError):
    data = None
checks["valid_json"] = data is not None
checks["values_kept"] = data == {"name": "inventory", "port": 8080, "features": ["search", "export"], "limits": {"rows": 500, "timeout": 2.5}}

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
