import csv, hashlib, json, os, re, stat, subprocess

checks = {}

checks["content"] = ((open('usage.txt').read() if os.path.exists('usage.txt') else None) or "").splitlines() == ["200 beta", "150 alpha", "150 gamma", "0 empty"]

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
