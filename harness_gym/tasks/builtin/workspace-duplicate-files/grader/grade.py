import csv, hashlib, json, os, re, stat, subprocess

checks = {}

text = (open('duplicates.txt').read() if os.path.exists('duplicates.txt') else None)
lines = [l.strip() for l in text.splitlines() if l.strip()] if text else None
checks["report_exists"] = lines is not None
checks["groups"] = lines == ["a.jpg c.jpg trip/f.jpg", "b.jpg trip/e.jpg"]
checks["nothing_deleted"] = all(os.path.exists(os.path.join("photos", p)) for p in ["a.jpg", "b.jpg", "c.jpg", "d.jpg", "trip/e.jpg", "trip/f.jpg", "g.jpg"])

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
