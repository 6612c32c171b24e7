def find(sorted_items, target):
    """Index of target in the sorted list, or -1 when it is not there."""
    low, high = 0, len(sorted_items)
    while low < high:
        middle = (low + high) // 2
        if sorted_items[middle] < target:
            low = middle + 1
        else:
            high = middle
    return low if low < len(sorted_items) else -1
