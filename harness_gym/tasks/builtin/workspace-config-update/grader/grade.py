"""Check the three settings and that everything else in app.ini is unchanged, line by line."""
import json
import os

GRADER = os.path.dirname(os.path.abspath(__file__))
CHANGES = {("server", "port"): "8443", ("server", "debug"): "false", ("database", "pool_size"): "20"}


def parse(lines):
    section, out = None, []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]"):
            section = stripped[1:-1]
            out.append(("section", section, None))
        elif "=" in stripped and not stripped.startswith(";"):
            key, value = (part.strip() for part in stripped.split("=", 1))
            out.append(((section, key), key, value))
        else:
            out.append(("other", stripped, None))
    return out


def main():
    with open(os.path.join(GRADER, "app_original.ini"), encoding="utf-8") as f:
        original = parse(f.read().splitlines())
    try:
        with open("config/app.ini", encoding="utf-8") as f:
            current = parse(f.read().splitlines())
    except OSError:
        current = []
    current_values = {k: v for k, _, v in current if isinstance(k, tuple)}
    checks = {f"{s}.{k}": float(current_values.get((s, k)) == v) for (s, k), v in CHANGES.items()}
    expected = [(k, n, CHANGES.get(k, v) if isinstance(k, tuple) else v) for k, n, v in original]
    checks["rest_unchanged"] = float(current == expected)
    reward = 1.0 if all(v == 1.0 for v in checks.values()) else 0.0
    print(json.dumps({"reward": reward, "breakdown": checks}))


main()
