import csv, hashlib, json, os, re, stat, subprocess

checks = {}

text = (open('emails.txt').read() if os.path.exists('emails.txt') else None)
checks["exists"] = text is not None
checks["content"] = (text or "").split() == ["alice@example.com", "bob@example.com", "carol@corp.example", "dave.smith+news@mail.example.net"]

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
