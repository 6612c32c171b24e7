def paginate(items, page, per_page):
    """The items on a 1-based page of per_page items."""
    if page < 1 or per_page < 1:
        raise ValueError("page and per_page start at 1")
    start = page * per_page
    return items[start : start + per_page]


def page_count(total, per_page):
    """How many pages total items fill."""
    return -(-total // per_page)
