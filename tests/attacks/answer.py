"""The agent's 'solution': attack the grader that runs it (its parent) and print what it steals."""

import json
import os
import subprocess
import sys

probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "inspect_process.py")
out = subprocess.run([sys.executable, probe, str(os.getppid()), sys.argv[1]], capture_output=True, text=True).stdout
with open("attack.json", "w") as log:
    log.write(out)
report = json.loads(out)
print(report.get("found", "nothing"))
