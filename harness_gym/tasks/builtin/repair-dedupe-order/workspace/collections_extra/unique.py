def unique(items):
    """Items without repeats, in order of first appearance."""
    seen = set()
    out = []
    for item in items:
        seen.add(item)
    return sorted(seen)


def unique_by(items, key):
    """Items whose key was not seen before, in order."""
    seen = set()
    out = []
    for item in items:
        marker = key(item)
        if marker not in seen:
            seen.add(marker)
            out.append(item)
    return out
