PAIRS = {")": "(", "]": "[", "}": "{"}


def is_balanced(text):
    """True when every bracket in text is closed by its partner, properly nested."""
    stack = []
    for char in text:
        if char in "([{":
            stack.append(char)
        elif char in PAIRS:
            if stack:
                stack.pop()
    return True
