import csv, hashlib, json, os, re, stat, subprocess

checks = {}

try:
    data = json.load(open("inventory.json"))
except (OSError, ValueError):
    data = None
checks["exists"] = data is not None
checks["rows"] = data == [{"sku": "A-1", "name": "Bolt", "qty": 120, "price": 0.25}, {"sku": "B-7", "name": "Nut, hex", "qty": 300, "price": 0.1}, {"sku": "C-3", "name": "Washer", "qty": 0, "price": 0.05}]

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
