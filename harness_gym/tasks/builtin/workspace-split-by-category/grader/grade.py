import csv, hashlib, json, os, re, stat, subprocess

checks = {}

def rows(name):
    try:
        return list(csv.reader(open(os.path.join("by_category", name), newline="")))
    except OSError:
        return None
h = ["date", "category", "amount"]
checks["food"] = rows("food.csv") == [h, ["2026-01-02", "Food", "12.50"], ["2026-01-05", "food", "7.25"]]
checks["travel"] = rows("travel.csv") == [h, ["2026-01-03", "Travel", "80.00"], ["2026-01-10", "Travel", "22.00"]]
checks["books"] = rows("books.csv") == [h, ["2026-01-09", "Books", "15.00"]]
checks["no_extra_files"] = os.path.isdir("by_category") and sorted(os.listdir("by_category")) == ["books.csv", "food.csv", "travel.csv"]

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
