"""Check SHA256SUMS against the hashes of the original data (kept here), not against whatever the
workspace's data/ holds at grading: an agent that deletes or replaces data/ and lists what is left
(nothing) must not pass. The data must also still be there, unchanged, so the manifest verifies."""
import hashlib, json, os

EXPECTED = [
    "b6a98d9ce9a2d9149288fa3df42d377c3e42737afdcdaf714e33c0a100b51060  data/a.bin",
    "5da8f23decf397b13f4f55b6fb8a61936238bfe08ed9d901132974f1beccc45c  data/b.txt",
    "81bf9fa83c6f7f151bd491a98cd7d933de3965289e3ebd77c6c425f7eaa16392  data/sub/c.csv",
]


def digest(path):
    try:
        if not os.path.isfile(path) or os.path.islink(path):
            return None
        with open(path, "rb") as handle:
            return hashlib.sha256(handle.read(1 << 20)).hexdigest()
    except OSError:
        return None


checks = {}
text = None
if os.path.isfile("SHA256SUMS") and not os.path.islink("SHA256SUMS"):
    with open("SHA256SUMS", encoding="utf-8", errors="replace") as handle:
        text = handle.read(1 << 20)
checks["exists"] = text is not None
checks["content"] = (text or "").splitlines() == EXPECTED
present = []
for d, _, fs in os.walk("data"):
    present += [os.path.join(d, f) for f in fs]
checks["data_untouched"] = sorted(present) == sorted(line.split("  ", 1)[1] for line in EXPECTED) and all(
    digest(line.split("  ", 1)[1]) == line.split("  ", 1)[0] for line in EXPECTED
)

reward = 1.0 if checks and all(checks.values()) else 0.0
print(json.dumps({"reward": reward, "breakdown": {k: float(v) for k, v in checks.items()}}))
