import csv, hashlib, json, os, re, stat, subprocess

checks = {}

try:
    rows = list(csv.reader(open("distances_miles.csv", newline="")))
except OSError:
    rows = None
checks["rows"] = rows == [["route", "km", "miles"], ["Lisbon-Porto", "313", "194.5"], ["Berlin-Munich", "585", "363.5"], ["Paris-Lyon", "465.5", "289.2"]]
checks["original_kept"] = (open('distances.csv').read() if os.path.exists('distances.csv') else None) == "route,km\nLisbon-Porto,313\nBerlin-Munich,585\nParis-Lyon,465.5\n"

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
