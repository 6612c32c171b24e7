import csv, hashlib, json, os, re, stat, subprocess

checks = {}

checks["content"] = (open('tags.txt').read() if os.path.exists('tags.txt') else None) == "elixir\nGo\npython\nRust\nZig\n"

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
