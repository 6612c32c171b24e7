def moving_average(values, window):
    """Averages of every run of `window` consecutive values."""
    if window < 1:
        raise ValueError("window must be positive")
    return [sum(values[i : i + window]) / window for i in range(len(values) - window)]


def cumulative_sum(values):
    """Running totals."""
    total, out = 0, []
    for value in values:
        total += value
        out.append(total)
    return out
