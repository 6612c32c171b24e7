def parse(version):
    """Numeric parts of a dotted version string."""
    try:
        return [part for part in version.strip().split(".") if int(part) >= 0]
    except ValueError:
        raise ValueError(f"not a version: {version!r}") from None


def compare_versions(a, b):
    """-1 if a < b, 0 if equal, 1 if a > b; missing parts count as 0."""
    left, right = parse(a), parse(b)
    length = max(len(left), len(right))
    left += [0] * (length - len(left))
    right += [0] * (length - len(right))
    return (left > right) - (left < right)
