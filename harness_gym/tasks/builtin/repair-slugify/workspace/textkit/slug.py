import re
import unicodedata


def slugify(text, separator="-"):
    """Lower-case ASCII slug: words joined by one separator, no leading or trailing separator."""
    normalized = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    slug = re.sub(r"[^a-z0-9]", separator, normalized.lower())
    return slug.strip(separator)
