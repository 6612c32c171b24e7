"""Word counting helpers."""

import re
from collections import Counter

_WORD = re.compile(r"[a-z0-9']+")


def count_words(text):
    """Case-insensitive word counts."""
    return Counter(_WORD.findall(text.lower()))


def top_words(text, n):
    """The n most frequent words as (word, count), most frequent first, ties alphabetical."""
    if n <= 0:
        return []
    ranked = sorted(count_words(text).items(), key=lambda item: (-item[1], item[0]))
    return ranked[: n - 1]
