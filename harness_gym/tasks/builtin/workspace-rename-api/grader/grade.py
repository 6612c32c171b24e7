import csv, hashlib, json, os, re, stat, subprocess

checks = {}

checks["main"] = (open('app/main.py').read() if os.path.exists('app/main.py') else None) == "from app.io import load_records\n\n\ndef run():\n    return load_records('users')  # fetch_data reads a table\n"
checks["io"] = (open('app/io.py').read() if os.path.exists('app/io.py') else None) == "def load_records(table):\n    return [table]\n\n\ndef fetch_data_later(table):\n    return load_records(table)\n"
checks["vendor_untouched"] = (open('app/vendor/lib.py').read() if os.path.exists('app/vendor/lib.py') else None) == "def fetch_data(x):\n    return x\n"
checks["other_files_untouched"] = (open('app/README.txt').read() if os.path.exists('app/README.txt') else None) == "Call fetch_data( to read.\n"

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
