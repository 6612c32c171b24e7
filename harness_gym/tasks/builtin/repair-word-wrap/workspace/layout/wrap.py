def wrap(text, width):
    """Greedy word wrap: lines of at most `width` characters, words kept whole."""
    lines, current = [], ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines
