import csv, hashlib, json, os, re, stat, subprocess

checks = {}

checks["content"] = (open('.env').read() if os.path.exists('.env') else None) == "# local\nSECRET_KEY=s3cr3t\nDEBUG=true\nDATABASE_URL=postgres://localhost/app\nCACHE_TTL=60\n"
checks["example_untouched"] = (open('.env.example').read() if os.path.exists('.env.example') else None) == "# app settings\nDATABASE_URL=postgres://localhost/app\nSECRET_KEY=change-me\nDEBUG=false\nCACHE_TTL=60\n"

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
