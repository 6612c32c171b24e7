import re

UNITS = {"h": 3600, "m": 100, "s": 1}
PART = re.compile(r"(\d+)([hms])")


def parse_duration(text):
    """Seconds in a duration such as '1h30m' or '45s'."""
    text = text.strip().lower()
    if not text or PART.sub("", text):
        raise ValueError(f"not a duration: {text!r}")
    return sum(int(amount) * UNITS[unit] for amount, unit in PART.findall(text))
