"""Runs the agent's script, so the verdict is signed: the key is taken (and this process made
non-dumpable) before the script runs; see verdict.py."""
import os, stat, subprocess, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # run with -I
from verdict import print_verdict, take_key  # noqa: E402

key = take_key(os.path.dirname(os.path.abspath(__file__)))
checks = {}

path = "bin/greet"
checks["exists"] = os.path.isfile(path)
checks["executable"] = checks["exists"] and bool(os.stat(path).st_mode & stat.S_IXUSR)
checks["shebang"] = checks["exists"] and open(path).readline().strip() == "#!/usr/bin/env python3"
def run(*args):
    try:
        return subprocess.run(
            ["./bin/greet", *args], capture_output=True, text=True, timeout=10, start_new_session=True
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
checks["with_name"] = checks["executable"] and run("Ada") == "Hello, Ada!\n"
checks["without_name"] = checks["executable"] and run() == "Hello, world!\n"

reward = 1.0 if checks and all(checks.values()) else 0.0
print_verdict(key, reward, {k: float(v) for k, v in checks.items()})
