import csv, hashlib, json, os, re, stat, subprocess

checks = {}

text = (open('SHA256SUMS').read() if os.path.exists('SHA256SUMS') else None)
expected = []
for d, _, fs in os.walk("data"):
    for f in fs:
        p = os.path.join(d, f)
        expected.append(hashlib.sha256(open(p, "rb").read()).hexdigest() + "  " + p)
checks["exists"] = text is not None
checks["content"] = (text or "").splitlines() == sorted(expected, key=lambda l: l.split("  ", 1)[1])

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
