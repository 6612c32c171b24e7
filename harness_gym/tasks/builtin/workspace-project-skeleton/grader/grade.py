import csv, hashlib, json, os, re, stat, subprocess

checks = {}

base = "weather"
init = (open('weather/weather/__init__.py').read() if os.path.exists('weather/weather/__init__.py') else None)
checks["package"] = init is not None and re.search(r'^__version__\s*=\s*["\']0\.1\.0["\']', init, re.M) is not None
checks["tests"] = os.path.isfile("weather/tests/__init__.py")
readme = (open('weather/README.md').read() if os.path.exists('weather/README.md') else None)
checks["readme"] = bool(readme) and readme.splitlines()[0].strip() == "# weather"
ignore = (open('weather/.gitignore').read() if os.path.exists('weather/.gitignore') else None)
checks["gitignore"] = bool(ignore) and {"__pycache__/", "*.pyc"} <= {l.strip() for l in ignore.splitlines()}

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
