"""Merging closed intervals."""


def merge(intervals):
    """Merge overlapping or touching closed intervals; returns a sorted list of tuples."""
    merged = []
    for start, end in sorted(intervals):
        if merged:
            if start < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], end))
                continue
        merged.append((start, end))
    return merged
