"""Check that the .log files were moved into logs/ with a sorted index, and nothing else changed."""
import json
import os

LOGS = ["app.log", "nightly backup.log", "worker-1.log", "worker-2.log"]
OTHERS = {"deploy.yaml": "service: api\nreplicas: 3\n",
          "NOTES.md": "Notes about the logs: see INDEX after cleanup.\n",
          "keep.log.bak": "keep me\n"}


def read(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError:
        return None


def main():
    checks = {}
    checks["logs_moved"] = float(all(
        read(os.path.join("logs", name)) == f"2026-11-01 12:00:00 INFO started {name}\n2026-11-01 12:00:05 INFO done\n"
        for name in LOGS))
    checks["top_level_clean"] = float(not any(n.endswith(".log") for n in os.listdir(".")))
    index = read(os.path.join("logs", "INDEX.txt"))
    checks["index"] = float(index is not None and [l for l in index.splitlines() if l.strip()] == sorted(LOGS))
    checks["others_untouched"] = float(all(read(name) == content for name, content in OTHERS.items()))
    reward = 1.0 if all(v == 1.0 for v in checks.values()) else 0.0
    print(json.dumps({"reward": reward, "breakdown": checks}))


main()
