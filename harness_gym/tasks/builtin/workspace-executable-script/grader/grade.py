import csv, hashlib, json, os, re, stat, subprocess

checks = {}

path = "bin/greet"
checks["exists"] = os.path.isfile(path)
checks["executable"] = checks["exists"] and bool(os.stat(path).st_mode & stat.S_IXUSR)
checks["shebang"] = checks["exists"] and open(path).readline().strip() == "#!/usr/bin/env python3"
def run(*args):
    try:
        return subprocess.run(["./bin/greet", *args], capture_output=True, text=True, timeout=10).stdout
    except OSError:
        return None
checks["with_name"] = checks["executable"] and run("Ada") == "Hello, Ada!\n"
checks["without_name"] = checks["executable"] and run() == "Hello, world!\n"

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
